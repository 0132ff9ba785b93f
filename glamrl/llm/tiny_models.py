"""Tiny random Llama and T5 models with an offline word-level tokenizer, for tests and smoke runs.

Nothing here touches the network: the vocabulary is the BabyAI-Text prompt vocabulary
(English and French), the weights are drawn from the torch RNG (seed it first).
"""

from __future__ import annotations

from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

from glamrl.envs.vocabulary import SPECIAL_TOKENS, VOCABULARY  # noqa: F401  (re-exported)


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A lower-casing word-level tokenizer over `VOCABULARY`; unknown words map to `<unk>`."""
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(VOCABULARY)}, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def build_tiny_model(name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, bool]:
    """`tiny-llama` or `tiny-t5`: (random model, tokenizer, is_seq2seq); deterministic given the torch seed."""
    tokenizer = build_tiny_tokenizer()
    ids = dict(pad_token_id=0, bos_token_id=2, eos_token_id=3, vocab_size=len(VOCABULARY))
    if name == "tiny-llama":
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False, **ids)
        return LlamaForCausalLM(config), tokenizer, False
    if name == "tiny-t5":
        config = T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                          decoder_start_token_id=0, dropout_rate=0.0, **ids)
        return T5ForConditionalGeneration(config), tokenizer, True
    raise ValueError(f"unknown tiny model {name!r}; use tiny-llama or tiny-t5")
