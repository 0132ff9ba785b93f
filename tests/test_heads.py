"""Value head and NPAE action heads, computed in the same pass as the scores; gradients reach every part."""

import pytest
import torch

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.llm import ActionHeads, LLMPolicy, ValueHead
from glamrl.run.dir import RunDir

PROMPTS = ["Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, \n Action 0: ",
           "Goal of the agent: open the door \n Action 0: "]


def test_head_shapes():
    hidden = torch.randn(5, 64)
    assert ValueHead(64)(hidden).shape == (5,)
    assert ActionHeads(64, 6)(hidden).shape == (5, 6)


def _policy(name: str = "tiny-llama", **kw) -> LLMPolicy:
    torch.manual_seed(0)
    return LLMPolicy(ModelConfig(name=name, device="cpu", **kw))


def test_scoring_policy_output_and_gradients():
    for name in ("tiny-llama", "tiny-t5"):
        policy = _policy(name)
        out = policy(PROMPTS, ACTION_NAMES)
        assert out.log_probs.shape == out.action_log_likelihoods.shape == (2, 6) and out.values.shape == (2,)
        torch.testing.assert_close(out.log_probs.exp().sum(-1), torch.ones(2))
        torch.testing.assert_close(out.log_probs, out.action_log_likelihoods.log_softmax(-1))
        (out.log_probs[:, 2].sum() + out.values.sum()).backward()
        for module in (policy.llm.get_input_embeddings(), policy.value_head):
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_per_call_action_names_change_the_scores():
    policy = _policy()
    with torch.inference_mode():
        assert not torch.allclose(policy(PROMPTS, ACTION_NAMES).log_probs, policy(PROMPTS, SYNONYM_ACTION_NAMES).log_probs)


def test_action_heads_path():
    for name in ("tiny-llama", "tiny-t5"):
        policy = _policy(name, use_action_heads=True)
        out = policy(PROMPTS, ACTION_NAMES)
        assert out.action_log_likelihoods is None and out.log_probs.shape == (2, 6)
        torch.testing.assert_close(out.log_probs, policy.action_heads(policy.scorer(PROMPTS, None).hidden).log_softmax(-1))
        out.log_probs[:, 0].sum().backward()
        assert all(p.grad is not None for p in policy.action_heads.parameters())
        assert policy.llm.get_input_embeddings().weight.grad.abs().sum() > 0


def test_standardized_value_head_reads_its_inputs_standardised_per_feature():
    import copy

    from glamrl.llm.heads import ValueHead

    torch.manual_seed(0)
    head = ValueHead(8)
    hidden = torch.randn(32, 8) * torch.linspace(0.01, 3, 8) + torch.linspace(-5, 5, 8)   # (B, H)
    reference = copy.deepcopy(head)
    head.standardize_input(hidden)
    probe = torch.randn(5, 8) * 2
    mean, std = hidden.mean(0), hidden.std(0)
    torch.testing.assert_close(head(probe), reference((probe - mean) / std), atol=1e-5, rtol=1e-5)
    # an LLM's last-token states: one large shared vector, small differences between prompts
    similar = torch.randn(8) * 3 + torch.randn(32, 8) * 0.05                                # (B, H)
    fresh = ValueHead(8)
    standardized = copy.deepcopy(fresh)
    standardized.standardize_input(similar)
    assert standardized(similar).std() > 5 * fresh(similar).std()  # the outputs now vary over the batch


def test_value_head_init_standardized_in_a_training_run(tmp_path):
    from glamrl.config import load_train_config
    from glamrl.trainers.ppo import train_ppo

    torch.set_num_threads(1)
    overrides = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=4", "model.name=tiny-llama", "model.device=cpu",
                 "prompt.nbr_obs=1", "ppo.num_steps=8", "ppo.minibatch_size=16", "ppo.epochs=1", "run.eval_episodes=0",
                 "run.tensorboard=false", "model.value_head_init=standardized", "ppo.value_norm=true"]
    cfg = load_train_config(None, [*overrides, "ppo.total_frames=64"])  # 2 updates
    torch.manual_seed(cfg.env.seed)
    fresh = LLMPolicy(cfg.model).value_head.mlp[0].weight
    run = tmp_path / "run"
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    trained = RunDir(run).load_checkpoint().policy["value_head.mlp.0.weight"]
    assert trained.abs().mean() > 3 * fresh.abs().mean()  # rescaled by 1 / (per-feature std) after rollout 1
    # a run started from it keeps the critic it learned: one update at a negligible learning rate leaves it as it was
    # (rescaled again, its weights would grow by another 1 / std), and its value statistics go on from the source's
    # 2 updates (their debiasing weight 1 - decay^3, not a fresh 1 - decay)
    cfg = load_train_config(None, [*overrides, "ppo.total_frames=32", "ppo.lr=1e-9", f"agent.init_from={run}"])
    train_ppo(cfg, tmp_path / "next", progress=False, say=lambda _: None)
    kept = RunDir(tmp_path / "next").load_checkpoint()
    torch.testing.assert_close(kept.policy["value_head.mlp.0.weight"], trained, atol=1e-6, rtol=0)
    decay = cfg.ppo.value_norm_decay
    assert kept.extra["value_norm"]["weight"].item() == pytest.approx(1 - decay ** 3)
