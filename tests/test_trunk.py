"""Frozen-trunk training (model.train_layers): the cached path is the full forward, only the top trains."""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm.policy import LLMPolicy
from glamrl.llm.trunk import FrozenTrunk, TrunkError, top_block_tail, top_block_tail_matches

PROMPTS = [
    "Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, "
    "You see a red ball 1 step left and 2 steps forward, \n Action 0: turn left \n "
    "Observation 1: You see a red ball 2 steps forward, \n Action 1: ",
    "Goal of the agent: pick up the blue key \n Observation 0: You see a wall 1 step left, \n Action 0: ",
    "Goal of the agent: open the door \n Action 0: ",
]


pytestmark = pytest.mark.usefixtures("one_thread")


def _policy(name: str, train_layers: int = 1, **kw) -> LLMPolicy:
    torch.manual_seed(0)
    return LLMPolicy(ModelConfig(name=name, device="cpu", train_layers=train_layers, cache_dtype="float32", **kw))


def _outputs_and_grads(policy: LLMPolicy, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, dict]:
    policy.zero_grad(set_to_none=True)
    out = policy(prompts, ACTION_NAMES)
    (out.log_probs[:, 2].sum() + out.values.sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}
    return out.log_probs.detach(), out.values.detach(), grads


@pytest.mark.parametrize("name,train_layers", [("tiny-llama", 1), ("tiny-llama", 2), ("tiny-t5", 1)])
def test_cached_path_matches_the_full_forward_with_gradients(name, train_layers):
    """Llama with 2 trained blocks: the lower one runs as `llama_block`, the top one as its tail."""
    policy = _policy(name, train_layers, inference_batching=None)  # the collection batched as the full pass
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
    if name == "tiny-llama":  # the run's first lines say how the top block runs
        assert policy.trunk.tail_exact and lora.trunk.tail_exact
        assert policy.resolved["model.train_layers"].why.startswith("the top block runs at the last prompt token")
    else:
        assert not policy.trunk.tail_exact and "model.train_layers" not in policy.resolved


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


TINY_DECODERS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM),
                 "phi3": (Phi3Config, Phi3ForCausalLM)}  # phi3: one fused q, k, v projection


def _decoder(family: str):
    config, model = TINY_DECODERS[family]
    torch.manual_seed(0)
    return model(config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=100, pad_token_id=0, eos_token_id=1, bos_token_id=2))


def _left_padded(lengths: list[int], S: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, 1, S, S) bool mask of causal rows left-padded to S (a padding row sees itself), (B, S) positions."""
    real = torch.arange(S)[None, :] >= S - torch.tensor(lengths)[:, None]            # (B, S)
    visible = torch.ones(S, S, dtype=torch.bool).tril() & real[:, None, :] | torch.eye(S, dtype=torch.bool)
    return visible[:, None], (real.long().cumsum(-1) - 1).clamp(min=0)


def _top_block_case(model, additive: bool):
    """The top block of `model`, its input (3, 9, 64) with gradients, a left-padded mask (bool or additive),
    the rotary (cos, sin) and the positions."""
    layer, backbone = model.model.layers[-1], model.model
    mask, pos = _left_padded([9, 5, 7], S=9)
    if additive:
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    hidden = torch.randn(3, 9, 64, requires_grad=True)
    return layer, hidden, mask, backbone.rotary_emb(hidden, position_ids=pos), pos


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("additive", [False, True])
def test_the_top_block_at_the_read_positions_gives_the_blocks_outputs_and_gradients(family, additive):
    model = _decoder(family)
    layer, hidden, mask, rope, pos = _top_block_case(model, additive)
    grads = []
    for run in (lambda: layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=pos)[:, 6:],
                lambda: top_block_tail(layer, hidden, mask, rope, start=6)):
        out = run()
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        grads.append((out.detach(), hidden.grad.clone(), [p.grad.clone() for p in layer.parameters()]))
        hidden.grad = None
        layer.zero_grad(set_to_none=True)
    (full, full_input, full_weights), (tail, tail_input, tail_weights) = grads
    assert tail.shape == (3, 3, 64)
    torch.testing.assert_close(tail, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tail_input, full_input, atol=1e-5, rtol=1e-5)
    assert (tail_input[:, :6] != 0).any()  # earlier positions reach the tail through the keys and values
    for t, f in zip(tail_weights, full_weights):
        torch.testing.assert_close(t, f, atol=1e-5, rtol=1e-4)
    assert top_block_tail_matches(model)


@pytest.mark.parametrize("additive", [False, True])
def test_under_bf16_autocast_on_a_cpu_the_tail_runs_in_fp32_and_matches_the_block(additive):
    layer, hidden, mask, rope, pos = _top_block_case(_decoder("llama"), additive)
    runs = {"fp32 block": lambda: layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=pos),
            "bf16 block": lambda: layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=pos),
            "bf16 tail": lambda: top_block_tail(layer, hidden, mask, rope, start=6)}
    out, grads = {}, {}
    for name, run in runs.items():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name != "fp32 block"):
            y = run()[:, -3:]
        y.float().sum().backward()
        out[name], grads[name] = y.detach(), hidden.grad.clone()
        hidden.grad = None
    assert out["bf16 tail"].dtype == out["bf16 block"].dtype  # the block's own output dtype under autocast
    # fp32 rows: closer to the fp32 block than the bf16 block is (only the keys and values carry bf16 rounding)
    tail_error = (out["bf16 tail"].float() - out["fp32 block"]).abs().max()
    assert tail_error < (out["bf16 block"].float() - out["fp32 block"]).abs().max()
    torch.testing.assert_close(out["bf16 tail"].float(), out["fp32 block"], atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(grads["bf16 tail"], grads["fp32 block"], atol=5e-2, rtol=5e-2)
    assert (grads["bf16 tail"][:, :6] != 0).any()


def test_a_top_block_the_tail_does_not_fit_runs_at_every_position():
    model = _decoder("phi3")
    assert not top_block_tail_matches(model)
    trunk = FrozenTrunk(model, False, split=1, cache_dtype=torch.float32)
    assert not trunk.tail_exact
    mask, pos = _left_padded([8, 4], S=8)
    ids = torch.randint(3, 100, (2, 8))
    with torch.inference_mode():
        full = model.model(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
        tail = trunk.causal(ids, mask, pos, torch.tensor([8, 4]), ["a", "b"], start=5)
    torch.testing.assert_close(tail, full[:, 5:], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------- the prefix store
HEADER = ("Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \n "
          "Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, \n Action 0: ")
ROLLOUTS = [  # each prompt begins as some earlier one does, except the last of the second rollout
    [HEADER, HEADER.replace("red ball", "blue key")],
    [HEADER + "turn left \n Observation 1: You see a red ball 2 steps forward, \n Action 1: ",
     HEADER.replace("wall 2", "wall 3"), "Goal of the agent: open the door \n Action 0: "],
    [HEADER + "turn left \n Observation 1: You see a red ball 1 step forward, \n Action 1: ",
     HEADER.replace("red ball", "blue key")
     + "go forward \n Observation 1: You see a wall 1 step forward, \n Action 1: "],
]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_new_prompts_run_the_frozen_blocks_after_their_kept_prefix_and_score_as_the_model_does(attn):
    """Scores and values with the prefix store equal the full forward's (reference_log_likelihoods, and the trunk
    without the store), rollout after rollout, with the actions packed after the prompt and without them."""
    from glamrl.llm import reference_log_likelihoods

    kept, whole = _policy("tiny-llama", prefix_cache_mb=16), _policy("tiny-llama", prefix_cache_mb=0)
    assert whole.trunk.prefixes is None
    for policy in (kept, whole):
        policy.scorer.model.config._attn_implementation = attn
    store = kept.trunk.prefixes
    tokens = lambda prompts: sum(len(kept.scorer.tokenizer(kept.scorer.prompt_text(p)).input_ids) for p in prompts)
    with torch.inference_mode():
        for rollout in ROLLOUTS:
            reused = store.reused
            with kept.collecting(), whole.collecting():
                fast, full = kept(rollout, ACTION_NAMES), whole(rollout, ACTION_NAMES)
            torch.testing.assert_close(fast.log_probs, full.log_probs, atol=1e-5, rtol=0)
            torch.testing.assert_close(fast.values, full.values, atol=1e-5, rtol=0)
            reference = reference_log_likelihoods(kept.scorer, rollout, ACTION_NAMES)
            torch.testing.assert_close(kept.scorer(rollout, ACTION_NAMES).log_likelihoods, reference, atol=1e-4,
                                       rtol=0)  # now trunk-cache hits: the stored rows score as the model does
            assert (store.reused > reused) == (rollout is not ROLLOUTS[0])
        assert store.reused + store.computed == tokens([p for r in ROLLOUTS for p in r])
        # values only (no actions packed): a new trunk key, each prompt now kept but for its last token
        computed = store.computed
        values = kept.values(ROLLOUTS[2])
        torch.testing.assert_close(values, whole.values(ROLLOUTS[2]), atol=1e-5, rtol=0)
        assert store.computed == computed + len(ROLLOUTS[2]) and len(store) == sum(map(len, ROLLOUTS))
        kept.values(["Goal of the agent: go to the green box \n Action 0: "])  # outside a collection too
        assert len(store) == sum(map(len, ROLLOUTS)) + 1


def test_the_prefix_store_finds_the_longest_shared_prefix_and_keeps_its_budget_least_recently_used_out():
    from glamrl.llm.trunk import PrefixStore

    rng = np.random.default_rng(0)
    entry = lambda n: (torch.zeros(1, 2, 1, n, 4), torch.zeros(n, 8))  # (split, 2, Hkv, n, D), (n, H)
    per_token = sum(t.nbytes for t in entry(1))
    store, kept = PrefixStore(budget_bytes=1000 * per_token), []
    for _ in range(200):
        base = kept[rng.integers(len(kept))] if kept and rng.random() < 0.7 else np.array([], dtype=np.int64)
        tokens = np.concatenate([base[:rng.integers(0, len(base) + 1)], rng.integers(0, 3, rng.integers(1, 8))])
        limit = len(tokens) - 1
        common = [next((i for i, (a, b) in enumerate(zip(tokens, k)) if a != b), min(len(tokens), len(k)))
                  for k in kept]  # the brute force: each kept prompt's prefix shared with `tokens`
        expected = min(limit, max(common, default=0))
        found, shared = store.longest(tokens, limit)
        assert shared == expected and (found is None) == (shared == 0)
        if found is not None:
            assert np.array_equal(found.tokens[:shared], tokens[:shared])
        store.add(tokens, *entry(len(tokens)))
        kept.append(tokens)
    small = PrefixStore(budget_bytes=3 * 5 * per_token)  # three prompts of 5 tokens
    prompts = [np.arange(5) + 10 * i for i in range(4)]
    for p in prompts[:3]:
        small.add(p, *entry(5))
    small.longest(prompts[0], 4)  # prompts[0] used: prompts[1] is now the least recently used
    small.add(prompts[3], *entry(5))
    assert len(small) == 3 and small.nbytes <= small.budget_bytes
    assert small.longest(prompts[1], 4) == (None, 0) and small.longest(prompts[0], 4)[1] == 4


def test_collection_metrics_give_the_share_of_new_prompts_tokens_read_from_the_prefix_store():
    policy = _policy("tiny-llama", prefix_cache_mb=16)
    with torch.inference_mode():
        with policy.collecting():
            policy(ROLLOUTS[0], ACTION_NAMES)
        first = policy.collection_metrics()
        store = policy.trunk.prefixes
        reused, computed = store.reused, store.computed
        with policy.collecting():
            policy(ROLLOUTS[1], ACTION_NAMES)
        second = policy.collection_metrics()
    shared = store.reused - reused
    # a batch reads the prompts kept before it only: the first found the store empty
    assert first["trunk_prefix_share"] == 0 < second["trunk_prefix_share"] < 1
    assert second["trunk_prefix_share"] == pytest.approx(shared / (shared + store.computed - computed))
    assert "trunk_prefix_share" not in _policy("tiny-llama", prefix_cache_mb=0).collection_metrics()
