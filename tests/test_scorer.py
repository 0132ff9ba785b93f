"""The fast action scorer matches the naive full-sequence computation, with and without gradients."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm import ActionScorer, load_model, reference_log_likelihoods
from glamrl.llm.diagnostics import attention_kernels
from glamrl.llm.trunk import FrozenTrunk, freeze_trunk

PROMPTS = [
    "Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \n "
    "Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, "
    "You see a red ball 1 step left and 2 steps forward, \n Action 0: turn left \n "
    "Observation 1: You see a red ball 2 steps forward, \n Action 1: ",
    "Goal of the agent: pick up the blue key \n Observation 0: You see a wall 1 step left, \n Action 0: ",
    "Goal of the agent: open the door \n Action 0: ",
]
ACTIONS = [*ACTION_NAMES, "go to the purple box then pick up"]  # single- and multi-token candidates


BATCHING = ["padded", "bucketed", "cached"]  # cached: bucketed, lower blocks from the frozen-trunk cache


def _scorer(name: str, normalize: bool = False, attn: str | None = None, batching: str = "padded",
            score: str = "log_softmax") -> ActionScorer:
    torch.manual_seed(0)
    loaded = load_model(ModelConfig(name=name, device="cpu"))
    if attn is not None:
        loaded.model.config._attn_implementation = attn
    trunk = None
    if batching == "cached":
        split = freeze_trunk(loaded.model, loaded.is_seq2seq, train_layers=1)[0]
        trunk = FrozenTrunk(loaded.model, loaded.is_seq2seq, split, torch.float32)
    return ActionScorer(loaded.model, loaded.tokenizer, loaded.is_seq2seq, normalize_by_length=normalize,
                        batching="padded" if batching == "padded" else "bucketed", max_padding=0.1, trunk=trunk,
                        score=score)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("batching", BATCHING)
def test_fast_scores_match_naive(name, normalize, attn, batching):
    scorer = _scorer(name, normalize, attn, batching)
    with torch.inference_mode():
        if scorer.trunk is not None:
            with scorer.trunk.record():  # fills the cache; the second call reads it
                torch.testing.assert_close(scorer(PROMPTS, ACTIONS).log_likelihoods,
                                           reference_log_likelihoods(scorer, PROMPTS, ACTIONS), atol=1e-4, rtol=0)
            assert len(scorer.trunk) == len(PROMPTS)
        fast = scorer(PROMPTS[::-1] + PROMPTS[:1], ACTIONS).log_likelihoods
        naive = reference_log_likelihoods(scorer, PROMPTS[::-1] + PROMPTS[:1], ACTIONS)
    assert fast.shape == (len(PROMPTS) + 1, len(ACTIONS))
    torch.testing.assert_close(fast, naive, atol=1e-4, rtol=0)
    assert (fast < 0).all()


def _one_pair_by_hand(scorer: ActionScorer, prompt: str, action: str) -> torch.Tensor:
    """The score of one (prompt, action) from one plain forward of the whole sequence: the raw logit (or its
    log-softmax) that predicts each action token, summed (or averaged)."""
    prompt_ids = scorer.tokenizer(scorer.prompt_text(prompt)).input_ids
    action_ids = scorer.action_token_ids(action)
    if scorer.is_seq2seq:
        start = scorer.model.config.decoder_start_token_id
        logits = scorer.model(input_ids=torch.tensor([prompt_ids]),
                              decoder_input_ids=torch.tensor([[start, *action_ids[:-1]]])).logits[0]  # (n, V)
    else:
        logits = scorer.model(input_ids=torch.tensor([prompt_ids + action_ids])).logits[0, len(prompt_ids) - 1:-1]
    if scorer.score == "log_softmax":
        logits = logits.log_softmax(-1)
    total = logits[torch.arange(len(action_ids)), torch.tensor(action_ids)].sum()
    return total / len(action_ids) if scorer.normalize_by_length else total


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize("score", ["log_softmax", "sum_logits"])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("batching", ["padded", "cached"])
def test_both_scores_match_the_naive_references(name, score, normalize, batching):
    scorer = _scorer(name, normalize, batching=batching, score=score)
    with torch.inference_mode():
        if scorer.trunk is not None:
            with scorer.trunk.record():
                scorer(PROMPTS, ACTIONS)  # fills the cache: the call below reads the frozen blocks' outputs
        fast = scorer(PROMPTS, ACTIONS).log_likelihoods                                   # (B, A)
        torch.testing.assert_close(fast, reference_log_likelihoods(scorer, PROMPTS, ACTIONS), atol=1e-4, rtol=0)
        by_hand = torch.tensor([[_one_pair_by_hand(scorer, p, a) for a in ACTIONS] for p in PROMPTS])
    torch.testing.assert_close(fast, by_hand, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_sum_of_logits_is_another_policy_not_a_shift_of_the_log_likelihoods(name):
    plain, logits = _scorer(name), _scorer(name, score="sum_logits")
    with torch.no_grad():
        gap = logits(PROMPTS, ACTIONS).log_likelihoods - plain(PROMPTS, ACTIONS).log_likelihoods    # (B, A)
    # the gap is each action's sum of per-token log-sum-exps over the vocabulary: it varies between actions,
    # so softmax over the actions (the policy) differs between the two scores
    assert not torch.allclose(gap, gap[:, :1].expand_as(gap), atol=1e-3)


def test_the_policy_samples_from_softmax_over_the_configured_score():
    from glamrl.llm import LLMPolicy

    torch.manual_seed(0)
    policy = LLMPolicy(ModelConfig(name="tiny-t5", device="cpu", score="sum_logits"))
    model, tokenizer = policy.scorer.model, policy.scorer.tokenizer
    with torch.no_grad():
        out = policy(PROMPTS, ACTION_NAMES)
        logits = reference_log_likelihoods(ActionScorer(model, tokenizer, True, score="sum_logits"), PROMPTS,
                                           ACTION_NAMES)                                  # (B, A) raw-logit sums
        ll = reference_log_likelihoods(ActionScorer(model, tokenizer, True), PROMPTS, ACTION_NAMES)
    torch.testing.assert_close(out.log_probs, logits.log_softmax(-1), atol=1e-4, rtol=0)
    assert not torch.allclose(out.log_probs, ll.log_softmax(-1), atol=1e-3)


def test_an_unknown_score_is_refused():
    from glamrl.config import ConfigError, load_train_config
    from glamrl.llm.scorer import ScoringError

    with pytest.raises(ConfigError, match="model.score must be one of log_softmax, sum_logits"):
        load_train_config(None, ["model.score=logits"])
    with pytest.raises(ScoringError, match="score must be one of"):
        ActionScorer(model=None, tokenizer=None, is_seq2seq=False, score="logits")


def test_bucketing_bounds_padding_and_keeps_every_prompt_once():
    scorer = _scorer("tiny-llama", batching="bucketed")
    lengths = [50, 12, 48, 13, 100, 45, 12]
    groups = scorer.batches(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert len(groups) == 3
    for g in groups:
        padded, real = max(lengths[i] for i in g) * len(g), sum(lengths[i] for i in g)
        assert padded - real <= 0.1 * padded
    scorer.batching = "padded"
    assert scorer.batches(lengths) == [list(range(len(lengths)))]


def test_inference_batching_applies_to_passes_without_gradients_only():
    scorer = _scorer("tiny-llama", batching="bucketed")
    scorer.inference_batching = "padded"
    lengths = [50, 12, 48, 13, 100, 45, 12]
    assert len(scorer.batches(lengths)) == 3                                     # with gradients: bucketed
    with torch.no_grad():
        assert scorer.batches(lengths) == [list(range(len(lengths)))]
    with torch.inference_mode():
        assert scorer.batches(lengths) == [list(range(len(lengths)))]
        padded = scorer(PROMPTS, ACTIONS).log_likelihoods
    bucketed = scorer(PROMPTS, ACTIONS).log_likelihoods.detach()
    torch.testing.assert_close(padded, bucketed, atol=1e-5, rtol=0)


def test_auto_inference_batching_pads_one_observation_prompts_and_follows_model_batching_otherwise():
    from glamrl.llm.policy import LLMPolicy
    from glamrl.llm.scorer import choose_inference_batching

    assert ModelConfig().inference_batching == "auto"
    assert choose_inference_batching("auto", "bucketed", 1)[0] == "padded"
    assert choose_inference_batching("auto", "bucketed", 3) == (
        "bucketed", "auto: 3 observations per prompt, so model.batching (bucketed)")
    assert choose_inference_batching("auto", "padded", 2)[0] == "padded"
    assert choose_inference_batching(None, "bucketed", 1) == ("bucketed", "null: model.batching (bucketed)")
    assert choose_inference_batching("bucketed", "padded", 1) == ("bucketed", "model.inference_batching=bucketed")
    config = ModelConfig(name="tiny-llama", device="cpu", train_layers=1, compile=False)
    one, three = LLMPolicy(config), LLMPolicy(config, observations=3)
    assert (one.scorer.inference_batching, three.scorer.inference_batching) == ("padded", "bucketed")
    assert one.resolved["model.inference_batching"].value == "padded"
    assert three.resolved["model.inference_batching"].why.startswith("auto: 3 observations")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_normalisation_divides_by_token_count(name):
    plain, normalized = _scorer(name), _scorer(name, normalize=True)
    lengths = torch.tensor([len(plain.action_token_ids(a)) for a in ACTIONS], dtype=torch.float32)
    assert lengths.max() > 1
    with torch.no_grad():
        torch.testing.assert_close(normalized(PROMPTS, ACTIONS).log_likelihoods,
                                   plain(PROMPTS, ACTIONS).log_likelihoods / lengths)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_gradients_after_inference_mode(name):
    scorer = _scorer(name)
    with torch.inference_mode():  # caches the packed actions, which must still serve the grad pass
        scorer(PROMPTS, ACTIONS)
    scores = scorer(PROMPTS, ACTIONS)
    (scores.log_likelihoods.sum() + scores.hidden.sum()).backward()
    grads = [p.grad for p in scorer.model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert scorer.model.get_input_embeddings().weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_hidden_only_matches_scoring_pass(name):
    scorer = _scorer(name)
    with torch.no_grad():
        torch.testing.assert_close(scorer(PROMPTS, None).hidden, scorer(PROMPTS, ACTIONS).hidden)
        assert scorer(PROMPTS, None).log_likelihoods is None


@pytest.mark.parametrize("batching", BATCHING)
def test_scores_do_not_depend_on_batch_padding(batching):
    scorer = _scorer("tiny-llama", batching=batching)
    with torch.no_grad():
        batched = scorer(PROMPTS, ACTIONS).log_likelihoods
        alone = torch.cat([scorer([p], ACTIONS).log_likelihoods for p in PROMPTS])
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)


def _bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE trained offline on prompt-like text: the space merges into the next word."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = [p + a for p in PROMPTS for a in ACTION_NAMES] * 20
    core.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>")


def test_bpe_boundary_moves_the_space_onto_the_action():
    tokenizer = _bpe_tokenizer()
    scorer = ActionScorer(model=None, tokenizer=tokenizer, is_seq2seq=False)
    prompt = PROMPTS[1]
    for action in ACTION_NAMES:
        naive_split = tokenizer(prompt).input_ids + tokenizer(action).input_ids
        joined = tokenizer(prompt + action).input_ids
        ours = tokenizer(scorer.prompt_text(prompt)).input_ids + scorer.action_token_ids(action)
        assert ours == joined
        assert tokenizer.convert_ids_to_tokens(scorer.action_token_ids(action))[0].startswith("Ġ")
    assert naive_split != joined  # the trap the scorer avoids: "Ġ" + "turn" instead of "Ġturn"


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_a_repeated_prompt_runs_once_and_its_gradients_add_up(name):
    scorer = _scorer(name, batching="bucketed")
    weights = torch.arange(1.0, 1.0 + len(ACTIONS))                          # (A,) any loss of the scores

    def grads(*calls: list[str]) -> dict[str, torch.Tensor]:
        scorer.model.zero_grad(set_to_none=True)
        sum((scorer(prompts, ACTIONS).log_likelihoods * weights).sum() for prompts in calls).backward()
        return {n: p.grad.clone() for n, p in scorer.model.named_parameters() if p.grad is not None}

    repeated = [PROMPTS[1], PROMPTS[0], PROMPTS[1], PROMPTS[1]]
    once = grads(repeated)                               # one forward of PROMPTS[1], gathered three times
    apart = grads([PROMPTS[1]], [PROMPTS[0]], [PROMPTS[1]], [PROMPTS[1]])  # four separate forwards
    assert once.keys() == apart.keys() and len(once) > 0
    for key, grad in apart.items():
        torch.testing.assert_close(once[key], grad, atol=1e-5, rtol=1e-4, msg=key)


@pytest.mark.parametrize("name,calls", [("tiny-llama", 2), ("tiny-t5", 6)])  # layers; T5: encoder + self/cross
def test_attention_kernels_report_the_dispatchers_choice(name, calls, one_thread):
    scorer = _scorer(name)
    with torch.inference_mode(), attention_kernels() as kernels:
        expected = scorer(PROMPTS, ACTIONS).log_likelihoods
    assert len(kernels) == calls and "ERROR" not in kernels
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), attention_kernels() as forced:
        scores = scorer(PROMPTS, ACTIONS).log_likelihoods
    assert forced == ["MATH"] * calls
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)  # recording changes no result


def test_attention_kernels_record_nothing_without_sdpa(one_thread):
    scorer = _scorer("tiny-llama", attn="eager")
    with torch.inference_mode(), attention_kernels() as kernels:
        scorer(PROMPTS, ACTIONS)
    assert kernels == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("normalize", [True, False])
def test_target_log_probs_match_autograd_of_the_plain_formula(dtype, normalize):
    """The fused log-softmax at the targets (rows through fp32 a chunk at a time, its own backward) gives the
    values and gradients of the plain formula under autograd, over rows that do not fill the last chunk."""
    from glamrl.llm.scorer import _ROWS, _TargetLogProbs
    generator = torch.Generator().manual_seed(0)
    N, V = 2 * _ROWS + 7, 301
    logits = (3 * torch.randn(N, V, generator=generator)).to(dtype)             # (N, V)
    targets = torch.randint(0, V, (N,), generator=generator)                     # (N,)
    weights = torch.randn(N, generator=generator)                                # (N,) any loss of the scores

    def run(fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
        x = logits.clone().requires_grad_(True)
        if fused:
            picked = _TargetLogProbs.apply(x, targets, normalize)
        else:
            full = x.float()
            picked = full.gather(-1, targets[:, None]).squeeze(-1)
            picked = picked - full.logsumexp(-1) if normalize else picked
        (picked * weights).sum().backward()
        return picked.detach(), x.grad

    (fused, fused_grad), (plain, plain_grad) = run(True), run(False)
    assert fused.dtype == torch.float32 and fused_grad.dtype == dtype
    torch.testing.assert_close(fused, plain, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(fused_grad, plain_grad, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
@pytest.mark.parametrize("score", ["log_softmax", "sum_logits"])
def test_gradients_match_the_naive_reference(name, score):
    """The scorer's gradients (bucketed prompts, one LM head over every group) are those of the full-sequence
    reference, for both scores."""
    scorer = _scorer(name, batching="bucketed", score=score)
    weights = torch.linspace(-1.0, 2.0, len(PROMPTS) * len(ACTIONS)).view(len(PROMPTS), len(ACTIONS))

    def grads(scores) -> dict[str, torch.Tensor]:
        scorer.model.zero_grad(set_to_none=True)
        (scores() * weights).sum().backward()
        return {n: p.grad.clone() for n, p in scorer.model.named_parameters() if p.grad is not None}

    fast = grads(lambda: scorer(PROMPTS, ACTIONS).log_likelihoods)
    naive = grads(lambda: reference_log_likelihoods(scorer, PROMPTS, ACTIONS))
    assert fast.keys() == naive.keys() and len(fast) > 0
    for key, grad in naive.items():
        torch.testing.assert_close(fast[key], grad, atol=1e-5, rtol=1e-4, msg=key)
