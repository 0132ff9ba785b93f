"""DRRN's subword tokenizer: a unigram model (SentencePiece's kind) over BabyAI-Text's words and every character.

GLAM's DRRN read its text with a SentencePiece unigram model of 8,000 pieces, so a word it had
never seen (the generalisation suite's "vermilion", "dax", "chaise") still read as pieces of its
own. The closed word vocabulary (`glamrl.envs.vocabulary`) reads every such word as the same
`<unk>`. This model reads BabyAI-Text as the word vocabulary does and spells out the rest:

- Text is NFKC-normalised, lower-cased and split SentencePiece-style: a word after a space starts
  with "▁"; punctuation marks and digits are pieces of their own, digits one by one as the word
  vocabulary reads them: "You see a wall 12 steps left, l'agent" -> ▁you ▁see ▁a ▁wall ▁1 2
  ▁steps ▁left , ▁l ' agent.
- The pieces are the words of the text the envs and the prompt builder write (seeded random play
  of `CORPUS_LEVELS` in English and French, GLAM's prompts with the default action names), each
  scored by its log-frequency there, plus "▁" and every character of `ALPHABET` at the lowest word
  score. A known word is always one piece (any split of it scores lower), so on BabyAI-Text's own
  text a prompt has as many pieces as words and `drrn.max_tokens` keeps its meaning. Any other word
  reads as its fewest pieces, mostly letter by letter ("golden" -> ▁go l d e n, "chaise" -> ▁ c h
  a i s e), and no word written in the alphabet reads `<unk>`.
- Why the scores are written rather than trained by `tokenizers`' `UnigramTrainer`: that trainer
  seeds its pieces with the substrings that recur, with different continuations, among its distinct
  words. BabyAI-Text has about a hundred words, most of them no other word's prefix, so it keeps
  almost none whole: its model of this text reads a prompt in about twice as many pieces as words.
  Shown each word once more, doubled ("▁you▁you"), so that every word seeds, its EM keeps every word
  whole and no other piece than characters it never uses: the model above, but with the
  characters' scores in hash-map order, so that no two rebuilds write the same file. With every
  word one piece, EM's estimate of a piece's probability is its word's frequency: the scores here.
- Why not the LLM's tokenizer: DRRN would carry a 49k-piece BPE vocabulary (a 6M-parameter
  embedding table at width 128) for a text of a hundred words, and depend on a model it never runs.

The model ships as `subwords.json` (the `tokenizers` format: `Tokenizer.from_file`, or transformers'
`PreTrainedTokenizerFast`); `python -m glamrl.envs.subwords --rebuild` writes it again from the envs,
and tests/test_subwords.py checks that the shipped file is what a rebuild writes. DRRN encodes
every step: `subword_ids` reuses the ids of each whitespace-separated chunk, which the model reads
alone, so a prompt costs a few dictionary look-ups per word.
"""

from __future__ import annotations

import argparse
import functools
import math
import string
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from glamrl.envs.vocabulary import UNK, pack_ids

SUBWORDS_FILE = Path(__file__).with_name("subwords.json")
"""The shipped model."""
SPECIAL_TOKENS = ("<pad>", "<unk>")
"""Ids 0 and 1, `PAD` and `UNK` as in the word vocabulary."""
WORD_START = "▁"
"""SentencePiece's mark of a word that follows a space."""
ALPHABET = (string.ascii_lowercase + string.digits + string.punctuation
            + "".join(c for c in map(chr, range(0xDF, 0x100)) if c.isalpha()) + "œ")
"""Characters that are pieces of their own: ASCII letters, digits and punctuation, Latin-1's lower-case
letters (French's accents among them) and œ; text is lower-cased first. Any other character reads `<unk>`."""
CORPUS_LEVELS = ("BabyAI-MixedTrainLocal-v0", "BabyAI-MixedTestLocal-v0", "BabyAI-TurnToObject-v0",
                 "BabyAI-Synth-v0", "BabyAI-UnlockLocal-v0")
"""The levels whose text makes the word pieces: glamrl's, plus minigrid's with doors, locks and "put next to"."""
CORPUS_EPISODES = 30
"""episodes of random play per level and language."""
CORPUS_STEPS = 16
"""steps per episode at most (short episodes: more missions)."""


def _pipeline() -> Tokenizer:
    """A tokenizer with the normalizer, word splitter and decoder, on an empty model."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Lowercase(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip(),
    ])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(WORD_START, prepend_scheme="always"),
        pre_tokenizers.Split(Regex(rf"{WORD_START}?\d|[^\w{WORD_START}]"), behavior="isolated"),
    ])
    tokenizer.decoder = decoders.Metaspace(WORD_START, prepend_scheme="always")
    return tokenizer


def random_play_prompts(level: str, language: str, episodes: int, steps: int, seed: int = 0) -> Iterator[str]:
    """GLAM's prompts (3 observations) along seeded random play of `level`: episodes seed, seed + 1, ..., each cut
    after `steps` steps."""
    from glamrl.config import PromptConfig
    from glamrl.envs.actions import action_names
    from glamrl.envs.factory import make_env
    from glamrl.prompts import PromptHistory

    env, names, rng = make_env(level, language=language), action_names(language), np.random.default_rng(seed)
    try:
        for episode in range(episodes):
            history = PromptHistory(PromptConfig.nbr_obs)
            obs, _ = env.reset(seed=seed + episode)
            for _ in range(steps):
                yield history.prompt(names, obs["mission"], obs["descriptions"], language)
                action = int(rng.integers(len(names)))
                history.record(obs["descriptions"], names[action])
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()


def corpus_texts() -> Iterator[str]:
    """GLAM's prompts along seeded random play of `CORPUS_LEVELS`, in English and French."""
    for level in CORPUS_LEVELS:
        for language in ("en", "fr"):
            yield from random_play_prompts(level, language, CORPUS_EPISODES, CORPUS_STEPS)


def build_subwords() -> Tokenizer:
    """The model of the module docstring, over the words of `corpus_texts()`."""
    tokenizer = _pipeline()
    split = tokenizer.pre_tokenizer.pre_tokenize_str
    counts = Counter(word for text in corpus_texts() for word, _ in split(tokenizer.normalizer.normalize_str(text)))
    total = sum(counts.values())
    # rounded: a last-bit difference between two machines' log() must not change the file
    scores = {word: round(math.log(n / total), 6) for word, n in sorted(counts.items())}
    lowest = min(scores.values())
    characters = {c: scores.get(c, lowest) for c in WORD_START + ALPHABET}
    vocab = [(token, 0.0) for token in SPECIAL_TOKENS] + list({**characters, **scores}.items())
    tokenizer.model = models.Unigram(vocab, unk_id=UNK, byte_fallback=False)
    return tokenizer


@functools.cache
def subword_tokenizer() -> Tokenizer:
    """The shipped model (`SUBWORDS_FILE`), loaded once."""
    return Tokenizer.from_file(str(SUBWORDS_FILE))


@functools.cache
def word_start_ids() -> frozenset[int]:
    """The ids of the pieces that begin a word (those written with "▁")."""
    return frozenset(i for piece, i in subword_tokenizer().get_vocab().items() if piece.startswith(WORD_START))


@functools.lru_cache(maxsize=1 << 16)
def _chunk_ids(chunk: str) -> tuple[int, ...]:
    return tuple(subword_tokenizer().encode(chunk, add_special_tokens=False).ids)


def subword_ids(text: str) -> list[int]:
    """`subword_tokenizer().encode(text).ids`, fast: the model reads each whitespace-separated chunk of text
    alone, so the ids of a chunk are computed once and reused (a prompt repeats the same few dozen)."""
    return [i for chunk in text.split() for i in _chunk_ids(chunk)]


def encode_subwords(texts: Sequence[str], max_tokens: int, heads: Sequence[str] | None = None) -> torch.Tensor:
    """(len(texts), max_tokens) int64 piece ids, `PAD`-padded on the right; `encode_texts`'s contract in pieces.

    With `heads`, row i reads heads[i] then texts[i]: the whole head always (up to max_tokens), then
    the newest words of the text that fit, whole: a cut removes the oldest words of the text.
    """
    return pack_ids([subword_ids(text) for text in texts], max_tokens,
                    None if heads is None else [subword_ids(head) for head in heads], word_start_ids())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m glamrl.envs.subwords", description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help=f"write {SUBWORDS_FILE.name} again from the envs")
    args = parser.parse_args(argv)
    built = build_subwords().to_str(pretty=True)
    if args.rebuild:
        SUBWORDS_FILE.write_text(built, encoding="utf-8")
    current = SUBWORDS_FILE.exists() and SUBWORDS_FILE.read_text(encoding="utf-8") == built
    print(f"{SUBWORDS_FILE}: {Tokenizer.from_str(built).get_vocab_size()} pieces, "
          + ("what a rebuild writes" if current else "differs from a rebuild: run with --rebuild"))
    return 0 if current else 1


if __name__ == "__main__":
    raise SystemExit(main())
