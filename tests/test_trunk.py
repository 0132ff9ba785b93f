"""Frozen-trunk training (model.train_layers): the cached path is the full forward, only the top trains."""

import pytest
import torch

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm.policy import LLMPolicy
from glamrl.llm.trunk import TrunkError

PROMPTS = [
    "Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, "
    "You see a red ball 1 step left and 2 steps forward, \n Action 0: turn left \n "
    "Observation 1: You see a red ball 2 steps forward, \n Action 1: ",
    "Goal of the agent: pick up the blue key \n Observation 0: You see a wall 1 step left, \n Action 0: ",
    "Goal of the agent: open the door \n Action 0: ",
]


pytestmark = pytest.mark.usefixtures("one_thread")


def _policy(name: str, **kw) -> LLMPolicy:
    torch.manual_seed(0)
    return LLMPolicy(ModelConfig(name=name, device="cpu", train_layers=1, cache_dtype="float32", **kw))


def _outputs_and_grads(policy: LLMPolicy, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, dict]:
    policy.zero_grad(set_to_none=True)
    out = policy(prompts, ACTION_NAMES)
    (out.log_probs[:, 2].sum() + out.values.sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}
    return out.log_probs.detach(), out.values.detach(), grads


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_cached_path_matches_the_full_forward_with_gradients(name):
    policy = _policy(name)
    trunk = policy.trunk
    policy.scorer.trunk = None  # the model's own forward, same frozen weights
    full = _outputs_and_grads(policy, PROMPTS)
    policy.scorer.trunk = trunk
    with torch.inference_mode(), policy.collecting():
        collected = policy(PROMPTS, ACTION_NAMES)
    assert len(trunk) == len(PROMPTS)
    cached = _outputs_and_grads(policy, PROMPTS[::-1])  # read from the cache, other batch order
    torch.testing.assert_close(collected.log_probs, full[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(cached[0], full[0].flip(0), atol=1e-6, rtol=0)
    torch.testing.assert_close(cached[1], full[1].flip(0), atol=1e-6, rtol=0)
    assert full[2].keys() == cached[2].keys() and len(full[2]) > 0
    for key, grad in full[2].items():
        torch.testing.assert_close(cached[2][key], grad, atol=1e-6, rtol=1e-5, msg=key)
    assert any(g.abs().sum() > 0 for k, g in cached[2].items() if not k.startswith("value_head"))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_only_the_top_blocks_norm_and_heads_train(name):
    policy = _policy(name)
    trained = {n for n, p in policy.named_parameters() if p.requires_grad}
    top = "decoder.block.1." if name == "tiny-t5" else "layers.1."
    norm = "decoder.final_layer_norm" if name == "tiny-t5" else "model.norm"
    assert any(top in n for n in trained) and any(norm in n for n in trained)
    assert any(n.startswith("value_head") for n in trained)
    for n in trained:
        assert n.startswith("value_head") or top in n or norm in n or "lm_head" in n, n
    lora = _policy(name, lora=True, lora_r=2)
    adapted = {n for n, p in lora.named_parameters() if p.requires_grad and "lora_" in n}
    assert adapted and all(top in n for n in adapted)


def test_train_layers_beyond_the_model_is_a_named_error():
    with pytest.raises(TrunkError, match="1..2"):
        LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", train_layers=3))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_a_reloaded_policy_rebuilds_the_same_cache(name, tmp_path):
    """What a resumed run does: rebuild the policy from its config, load the trained top, collect again."""
    policy = _policy(name)
    with torch.inference_mode(), policy.collecting():
        policy(PROMPTS, ACTION_NAMES)
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    _outputs_and_grads(policy, PROMPTS)
    optimizer.step()
    with torch.inference_mode():
        trained = policy(PROMPTS, ACTION_NAMES).log_probs
    saved = {k: v.clone() for k, v in policy.trainable_state_dict().items()}
    torch.manual_seed(0)  # tiny models: the frozen weights come from the seed, as in `glamrl train`
    resumed = LLMPolicy(policy.config)
    resumed.load_trainable_state_dict(saved)
    assert len(resumed.trunk) == 0
    with torch.inference_mode(), resumed.collecting():
        rebuilt = resumed(PROMPTS, ACTION_NAMES).log_probs
    torch.testing.assert_close(rebuilt, trained, atol=1e-6, rtol=0)
    for key in policy.trunk._cache:
        torch.testing.assert_close(resumed.trunk._cache[key], policy.trunk._cache[key], atol=0, rtol=0)
    with torch.inference_mode():
        assert not torch.allclose(trained, _policy(name)(PROMPTS, ACTION_NAMES).log_probs)  # the step changed the top


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_a_batch_of_hits_and_misses_runs_the_trunk_on_the_misses_only(name):
    policy = _policy(name)
    with torch.inference_mode():
        expected = policy(PROMPTS, ACTION_NAMES).log_probs
        with policy.collecting():
            policy(PROMPTS[:2], ACTION_NAMES)
        before = policy.trunk.misses
        mixed = policy(PROMPTS[::-1], ACTION_NAMES).log_probs  # PROMPTS[2] misses, the other two hit
    assert policy.trunk.misses == before + 1
    torch.testing.assert_close(mixed, expected.flip(0), atol=1e-6, rtol=0)


def test_entries_outlive_their_rollout_within_the_budget_least_recently_used_out():
    policy = _policy("tiny-llama", trunk_cache_mb=1)
    trunk = policy.trunk
    with torch.inference_mode():
        for prompt in PROMPTS:  # three rollouts, one prompt each
            with policy.collecting():
                policy([prompt], ACTION_NAMES)
        assert len(trunk) == 3 and trunk.nbytes < 2**20
        with policy.collecting():  # all three seen before: no trunk pass
            misses = trunk.misses
            policy(PROMPTS, ACTION_NAMES)
            assert trunk.misses == misses
        policy([PROMPTS[2]], ACTION_NAMES)  # use order now: PROMPTS[1], PROMPTS[2], PROMPTS[0]
        policy([PROMPTS[0]], ACTION_NAMES)
        trunk.budget_bytes = trunk.nbytes - 1
        trunk.shrink()
        assert len(trunk) == 2 and PROMPTS[1] not in {key[0] for key in trunk._cache}
        trunk.budget_bytes = 0  # model.trunk_cache_mb=0: the next rollout starts empty
        with policy.collecting():
            assert len(trunk) == 0


def test_collection_metrics_count_the_last_collections_hits_and_the_cache_size():
    policy = _policy("tiny-llama")
    assert policy.collection_metrics() == {}  # nothing collected yet
    with torch.inference_mode():
        with policy.collecting():
            policy(PROMPTS[:2], ACTION_NAMES)  # two misses
        first = policy.collection_metrics()
        policy(PROMPTS, ACTION_NAMES)  # outside a collection: not counted
        with policy.collecting():
            policy(PROMPTS[1:], ACTION_NAMES)  # PROMPTS[1] hits, PROMPTS[2] misses
        second = policy.collection_metrics()
    assert first["trunk_hit_rate"] == 0.0 and second["trunk_hit_rate"] == 0.5
    assert 0 < first["trunk_cache_mb"] < second["trunk_cache_mb"] == policy.trunk.nbytes / 2**20
    assert LLMPolicy(ModelConfig(name="tiny-llama", device="cpu")).collection_metrics() == {}  # no trunk
