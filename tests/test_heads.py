"""Value head and NPAE action heads, computed in the same pass as the scores; gradients reach every part."""

import torch

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.llm import ActionHeads, LLMPolicy, ValueHead

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
