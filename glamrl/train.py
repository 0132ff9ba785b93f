"""Online PPO fine-tuning of an LLM agent in BabyAI-Text, read top to bottom.

Phases of each update: collect (the LLM scores actions under inference mode) →
bootstrap and GAE → flatten → optimise the PPO loss over epochs of minibatches →
log → checkpoint. A run directory holds everything; running again on it resumes.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm import tqdm

from glamrl.errors import GlamrlError
from glamrl.agents.llm import LLMAgent
from glamrl.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from glamrl.config import ConfigError, TrainConfig, apply_overrides, from_dict
from glamrl.llm.policy import LLMPolicy
from glamrl.rl.gae import compute_gae
from glamrl.rl.buffer import RolloutBuffer
from glamrl.rl.ppo import accumulate_gradients
from glamrl.rollout import evaluate, step
from glamrl.runlog import RunLogger, episode_stats

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training ones
LOSS_TERMS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")


class TrainingDiverged(GlamrlError, RuntimeError):
    """The PPO loss became NaN or infinite."""


@dataclass
class TrainResult:
    run_dir: Path
    updates: int
    frames: int
    success_before: float | None
    success_after: float | None


def default_run_dir(cfg: TrainConfig) -> Path:
    """runs/{env}-{model}-seed{seed}: the one place run ids are made."""
    model = Path(cfg.model.name).stem.replace("/", "_")
    return Path("runs") / f"{cfg.env.id}-{model}-seed{cfg.env.seed}"


def resolve_config(run_dir: Path, cfg: TrainConfig | None, overrides: list[str]) -> tuple[TrainConfig, bool]:
    """The run's config and whether it resumes: a run directory keeps its own config."""
    saved = run_dir / "config.yaml"
    if not saved.exists():
        if cfg is None:
            raise ConfigError(f"{run_dir} holds no run to resume; give --config")
        return cfg, False
    data = apply_overrides(yaml.safe_load(saved.read_text()), overrides)
    return from_dict(TrainConfig, data), True


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_agent(cfg: TrainConfig, policy: LLMPolicy, greedy: bool = False) -> LLMAgent:
    return LLMAgent(policy, cfg.env.num_envs, cfg.prompt.actions, cfg.prompt.nbr_obs, cfg.env.language, greedy)


def write_config(cfg: TrainConfig, run_dir: Path) -> None:
    """RUN_DIR/config.yaml, written atomically: a run directory keeps the config it was started with."""
    tmp = run_dir / ".config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    os.replace(tmp, run_dir / "config.yaml")


def train(cfg: TrainConfig, run_dir: Path, resume: bool = False, progress: bool = True,
          say: Callable[[str], None] = print) -> TrainResult:
    """Train (or resume, from RUN_DIR's last checkpoint) the LLM agent `cfg` describes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    state = load_checkpoint(run_dir) if resume else None
    if not resume:
        write_config(cfg, run_dir)
    seed_everything(cfg.env.seed)
    p = cfg.ppo
    N, T = cfg.env.num_envs, p.num_steps
    num_updates = math.ceil(p.total_frames / cfg.batch_size)

    # ---- model, optimizer, envs
    policy = LLMPolicy(cfg.model, cfg.prompt.actions)
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=p.lr, betas=(p.adam_beta1, p.adam_beta2), eps=p.adam_eps)
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy)
    update, frames, episodes, duration = 0, 0, 0, 0.0
    if state is not None:
        policy.load_trainable_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        update, frames, episodes, duration = state["update"], state["frames"], state["episodes"], state["duration"]
        say(f"resuming {run_dir} after update {update} ({frames} frames)")

    success_before = None
    if state is None and cfg.run.eval_episodes:
        success_before = evaluate_policy(cfg, policy)["success_rate"]
        say(f"success rate before training: {success_before:.3f} ({cfg.run.eval_episodes} episodes)")

    logger = RunLogger(run_dir, resume_after_update=update if state is not None else None,
                       tensorboard=cfg.run.tensorboard)
    obs, _ = envs.reset(seed=cfg.env.seed + update * N)  # a resumed run starts fresh episodes

    buffer = RolloutBuffer(T, N)
    recent = deque(maxlen=100)  # success of the last episodes, for the progress bar
    bar = tqdm(total=num_updates * cfg.batch_size, initial=frames, unit="frame", disable=not progress)
    start_time = time.time() - duration
    while update < num_updates:
        update_start = time.time()
        finished = []

        # ---- 1. collect T steps in N envs (with model.train_layers, the frozen trunk's output is kept)
        with policy.collecting():
            for t in range(T):
                s = step(envs, agent, obs)
                d = s.decision
                buffer.add(t, d.prompts, d.actions, d.log_probs, d.values, s.rewards * p.reward_scale,
                           s.terminated, s.truncated)
                cut = np.flatnonzero(s.truncated & ~s.terminated)
                if len(cut):  # bootstrap a time-limit cut from V(final observation)
                    final = [s.infos["final_obs"][i] for i in cut]
                    final_obs = {"mission": [o["mission"] for o in final], "descriptions": [o["descriptions"] for o in final]}
                    buffer.final_values[t, cut] = agent.values(final_obs, cut)
                agent.end_episodes(s.done)
                finished += s.episodes
                obs = s.next_obs
        frames += cfg.batch_size
        episodes += len(finished)
        recent.extend(e.success for e in finished)
        collect_time = time.time() - update_start

        # ---- 2. bootstrap value if not done, then GAE
        next_value = agent.values(obs, range(N))                                       # (N,)
        advantages, returns = compute_gae(buffer.rewards, buffer.values, buffer.terminated, buffer.truncated,
                                          buffer.final_values, next_value, p.gamma, p.gae_lambda)  # (T, N)

        # ---- 3. flatten the batch: (T, N) -> (T * N,)
        batch = buffer.flatten(advantages, returns)

        # ---- 4. optimise the policy and value over epochs of minibatches
        stats: list[dict[str, float]] = []  # one entry per forward/backward chunk
        for epoch in range(p.epochs):
            for mb_idx in torch.randperm(len(batch)).split(p.minibatch_size):
                optimizer.zero_grad(set_to_none=True)
                try:
                    stats += accumulate_gradients(policy, batch, mb_idx, cfg.prompt.actions, p)
                except FloatingPointError:
                    raise TrainingDiverged(
                        f"non-finite PPO loss at update {update + 1}, epoch {epoch + 1}; "
                        f"the last good checkpoint is in {run_dir / 'checkpoints'} (try a lower ppo.lr)") from None
                stats[-1]["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, p.max_grad_norm).item()
                optimizer.step()
        update += 1
        update_time = time.time() - update_start - collect_time

        # ---- 5. log, then checkpoint (a kill in between replays this update on resume)
        y, v = batch.returns, batch.values
        explained = float(1 - (y - v).var() / y.var()) if y.var() > 0 else float("nan")
        metrics = {
            "update": update, "frames": frames, "episodes": episodes,
            "FPS": cfg.batch_size / (collect_time + update_time), "duration": time.time() - start_time,
            "collect_FPS": cfg.batch_size / collect_time, "update_FPS": cfg.batch_size / update_time,
            **episode_stats([e.episode_return for e in finished], [e.episode_length for e in finished],
                            [e.success for e in finished]),
            **{name: float(np.nanmean([st.get(name, np.nan) for st in stats])) for name in LOSS_TERMS},
            "explained_variance": explained,
            "first_ratio_dev": max(st["ratio_dev"] for st in stats[:p.grad_accum]),
        }
        logger.log(metrics)
        if update % cfg.run.checkpoint_every == 0 or update == num_updates:
            save_checkpoint(run_dir, {
                "policy": policy.trainable_state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_state(), "update": update, "frames": frames, "episodes": episodes,
                "duration": metrics["duration"], "config": cfg.to_dict(),
            })
        bar.update(cfg.batch_size)
        if recent:
            bar.set_postfix(fps=f"{metrics['FPS']:.1f}", success=f"{np.mean(recent):.2f}")
    bar.close()
    logger.close()
    envs.close()

    success_after = None
    if cfg.run.eval_episodes:
        success_after = evaluate_policy(cfg, policy)["success_rate"]
        say(f"success rate after training: {success_after:.3f} ({cfg.run.eval_episodes} episodes)")
    return TrainResult(run_dir, update, frames, success_before, success_after)


def evaluate_policy(cfg: TrainConfig, policy: LLMPolicy) -> dict[str, Any]:
    """The policy's success on fresh evaluation episodes (seeds apart from training)."""
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, greedy=cfg.run.eval_greedy)
    try:
        return evaluate(envs, agent, cfg.run.eval_episodes, seed=cfg.env.seed + EVAL_SEED_OFFSET)
    finally:
        envs.close()
