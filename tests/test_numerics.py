"""Collection and update run the same numerics: before the first optimiser step PPO's ratio is 1."""

import numpy as np
import pytest
import torch

from glamrl.config import load_train_config
from glamrl.rl.buffer import RolloutBuffer
from glamrl.rl.gae import compute_gae
from glamrl.rl.ppo import accumulate_gradients
from glamrl.rollout import step
from glamrl.agents.factory import make_agent
from glamrl.train import seed_everything
from glamrl.llm.policy import LLMPolicy

TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-3}


pytestmark = pytest.mark.usefixtures("one_thread")


def first_minibatch_ratio_dev(overrides: list[str]) -> float:
    """Collect one rollout as `glamrl train` does, then max |ratio - 1| over the first minibatch."""
    cfg = load_train_config(None, [
        "env.id=BabyAI-MixedTrainLocal-v0", "env.num_envs=4", "ppo.num_steps=4", "ppo.minibatch_size=8",
        "ppo.grad_accum=2", "model.device=cpu", *overrides])
    seed_everything(cfg.env.seed)
    policy = LLMPolicy(cfg.model)
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, envs)
    buffer = RolloutBuffer(cfg.ppo.num_steps, cfg.env.num_envs)
    obs, _ = envs.reset(seed=cfg.env.seed)
    with policy.collecting():
        for t in range(cfg.ppo.num_steps):
            s = step(envs, agent, obs)
            d = s.decision
            buffer.add(t, d.inputs, d.actions, d.log_probs, d.values, s.rewards, s.terminated, s.truncated)
            agent.end_episodes(s.done)
            obs = s.next_obs
    envs.close()
    advantages, returns = compute_gae(buffer.rewards, buffer.values, buffer.terminated, buffer.truncated,
                                      buffer.final_values, torch.zeros(cfg.env.num_envs), 0.99, 0.95)
    batch = buffer.flatten(advantages, returns)
    assert len({len(p) for p in batch.inputs}) > 1  # prompts of several lengths: padding differs between phases
    mb_idx = torch.randperm(len(batch))[:cfg.ppo.minibatch_size][None]                 # (1, M): frames
    stats = accumulate_gradients(policy, batch, mb_idx, cfg.prompt.actions, cfg.ppo)
    return max(st["ratio_dev"] for st in stats)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize("compute", ["float32", "bfloat16"])
@pytest.mark.parametrize("batching", ["padded", "bucketed"])
def test_ratio_is_one_on_the_first_minibatch(name, compute, batching):
    dev = first_minibatch_ratio_dev([f"model.name={name}", f"model.compute_dtype={compute}",
                                     f"model.batching={batching}"])
    print(f"{name} {compute} {batching}: max |ratio - 1| = {dev:.2e}")
    assert dev <= TOLERANCE[compute]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize("compute", ["float32", "bfloat16"])
def test_ratio_is_one_with_a_frozen_trunk_cache(name, compute):
    dev = first_minibatch_ratio_dev([f"model.name={name}", f"model.compute_dtype={compute}", "model.train_layers=1"])
    print(f"{name} {compute} train_layers=1: max |ratio - 1| = {dev:.2e}")
    assert dev <= TOLERANCE[compute]
