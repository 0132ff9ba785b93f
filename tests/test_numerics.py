"""The update's numerics: collection and update agree (PPO's ratio is 1 before the first optimiser step), and
chunked minibatches, activation checkpointing and compiled blocks give the plain backward's gradients."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from glamrl.config import ModelConfig, PPOConfig, load_train_config
from glamrl.envs.actions import ACTION_NAMES
from glamrl.rl.buffer import Batch, RolloutBuffer
from glamrl.rl.gae import compute_gae
from glamrl.rl.ppo import accumulate_gradients
from glamrl.rollout import step
from glamrl.agents.factory import make_agent
from glamrl.trainers.common import seed_everything
from glamrl.llm.compiled import inductor_problem
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


PROMPTS = [f"Goal of the agent: go to the red ball \n Observation 0: You see a wall {i} steps left, "
           + "You see a blue key 1 step forward, " * (i % 3) + "\n Action 0: " for i in range(6)]  # three lengths


def _minibatch_gradients(name: str, grad_accum: int = 1, **model) -> dict[str, torch.Tensor]:
    """Gradients of one PPO minibatch of `PROMPTS` (tiny model, float32, `model` as ModelConfig fields)."""
    torch.manual_seed(0)
    policy = LLMPolicy(ModelConfig(name=name, device="cpu", compute_dtype="float32", **model))
    batch = Batch(PROMPTS, torch.tensor([0, 1, 2, 3, 4, 5]), torch.full((6,), -1.7), torch.zeros(6),
                  torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5, 0.0]), torch.ones(6), torch.zeros(6, dtype=torch.bool))
    cfg = PPOConfig(grad_accum=grad_accum, minibatch_size=6, norm_adv=True)
    accumulate_gradients(policy, batch, torch.tensor([[5, 0, 3, 1, 4, 2]]), ACTION_NAMES, cfg)
    return {k: p.grad for k, p in policy.named_parameters() if p.grad is not None}


def _saved_bytes(name: str, checkpointing: bool) -> int:
    """Bytes autograd keeps for the backward of one forward (weights excluded)."""
    policy = LLMPolicy(ModelConfig(name=name, device="cpu", compute_dtype="float32",
                                   gradient_checkpointing=checkpointing))
    weights = {p.untyped_storage().data_ptr() for p in policy.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in weights:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        policy(["Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps left, \n Action 0: "],
               ACTION_NAMES)
    return sum(saved.values())


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize(("grad_accum", "checkpointing"), [(3, False), (1, True), (3, True)],
                         ids=["chunked", "checkpointed", "both"])
def test_chunked_and_checkpointed_gradients_equal_the_plain_backward(name, grad_accum, checkpointing):
    plain = _minibatch_gradients(name, gradient_checkpointing=False)
    got = _minibatch_gradients(name, grad_accum, gradient_checkpointing=checkpointing)
    assert got.keys() == plain.keys() and any(g.abs().sum() > 0 for g in plain.values())
    for key, grad in plain.items():
        torch.testing.assert_close(got[key], grad, atol=1e-6, rtol=0, msg=key)


class _AttentionOps(TorchDispatchMode):
    """The fused SDPA kernels (aten ops) run inside this block, forward and backward passes alike."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith("_scaled_dot_product_"):
            self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_the_recomputation_runs_the_attention_kernels_of_its_forward(name):
    # The backward pass recomputes each block outside the policy's call: a kernel choice made only around the
    # forward (an sdpa_kernel block, as the scorer had on CUDA) recomputed with another kernel, whose saved
    # tensors had other shapes (torch's CheckpointError, the first H200 run).
    policy = LLMPolicy(ModelConfig(name=name, device="cpu", compute_dtype="float32", gradient_checkpointing=True))
    with _AttentionOps() as attention:
        out = policy(PROMPTS, ACTION_NAMES)
        forward = list(attention.ops)
        (out.log_probs.sum() + out.values.sum()).backward()
    recomputed = [op for op in attention.ops[len(forward):] if "_backward" not in op]
    assert forward and recomputed == forward


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_checkpointing_keeps_fewer_activations_and_leaves_dropout_off(name):
    assert _saved_bytes(name, checkpointing=True) < 0.7 * _saved_bytes(name, checkpointing=False)
    policy = LLMPolicy(ModelConfig(name=name, device="cpu", gradient_checkpointing=True))
    assert not any(m.training for m in policy.llm.modules() if not getattr(m, "gradient_checkpointing", False))
    assert policy.resolved["model.gradient_checkpointing"].value == "true"


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize("model", [{"gradient_checkpointing": True}, {"train_layers": 1}],
                         ids=["full, checkpointed", "train_layers=1"])
def test_compiled_blocks_give_the_eager_policy_and_gradients(name, model):
    def policy_and_gradients(compile: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        policy = LLMPolicy(ModelConfig(name=name, device="cpu", compute_dtype="float32", compile=compile, **model))
        if name == "tiny-llama" and policy.trunk is not None:  # the prefix store's path would skip the compiled blocks
            assert (policy.trunk.prefixes is None) == compile
            assert policy.resolved["model.prefix_cache_mb"].value == ("0" if compile else "256")
        with torch.inference_mode():
            out = policy(PROMPTS, ACTION_NAMES)
        return out.log_probs, out.values, _minibatch_gradients(name, compile=compile, **model)

    log_probs, values, grads = policy_and_gradients(compile=False)
    assert inductor_problem(torch.device("cpu")) is None  # its one-block trial compile, counted before the blocks'
    torch._dynamo.reset()  # forget graphs compiled by earlier tests for the same block code
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    got_log_probs, got_values, got_grads = policy_and_gradients(compile=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs  # inductor compiled the blocks
    torch.testing.assert_close(got_log_probs, log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(got_values, values, atol=1e-5, rtol=0)
    assert got_grads.keys() == grads.keys() and any(g.abs().sum() > 0 for g in grads.values())
    for key, grad in grads.items():
        torch.testing.assert_close(got_grads[key], grad, atol=1e-6, rtol=0, msg=key)
