"""BabyAI-Text's closed vocabulary (English and French prompts) and a word-level encoder over it.

The symbolic agent's mission encoder, the tiny test models and DRRN with `drrn.tokenizer=word`
share it; nothing is downloaded. Words outside it (the suite's invented words) map to `<unk>`
(DRRN's default subword tokenizer, `glamrl.envs.subwords`, spells them out instead).
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence

import torch

SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
PAD, UNK = 0, 1

_WORDS = """
possible action actions of the agent goal observation you see a an wall step steps forward left right and
carry turn go pick up drop toggle done rotate move ahead take release switch to then after put next open
closed locked door key ball box red green blue purple yellow grey gray first
tu vois un une mur à pas devant gauche droite et portes clef clé balle boîte porte rouge vert verte bleu
bleue violet violette jaune gris grise ouverte fermée verrouillée tourner aller tout droit prendre lâcher
basculer va vers la le les ramasse ouvre puis après mets côté de action objectif observation possible
attraper attrapé avoir être allé ouvrir ouvert mettre mis toi ta derrière au du objet d l
"""
PUNCTUATION = (",", ":", ".", "'", "-")
VOCABULARY: tuple[str, ...] = tuple(dict.fromkeys(
    [*SPECIAL_TOKENS, *_WORDS.split(), *(str(d) for d in range(10)), *PUNCTUATION]
))
"""Every known token, in id order (digits are split one by one)."""

WORD_IDS = {word: i for i, word in enumerate(VOCABULARY)}
_TOKEN = re.compile(r"\d|[^\W\d_]+|[^\w\s]")


def word_ids(text: str) -> list[int]:
    """The ids of `text`'s lower-cased words, digits and punctuation marks; unknown ones are `UNK`."""
    return [WORD_IDS.get(token, UNK) for token in _TOKEN.findall(text.lower())]


def encode_texts(texts: Sequence[str], max_tokens: int, heads: Sequence[str] | None = None) -> torch.Tensor:
    """(len(texts), max_tokens) int64 ids, `PAD`-padded on the right; longer texts keep their last words.

    With `heads`, row i reads heads[i] then texts[i]: the whole head always (up to max_tokens),
    then the newest words of the text that fit, so a cut removes the oldest words of the text.
    """
    return pack_ids([word_ids(text) for text in texts], max_tokens,
                    None if heads is None else [word_ids(head) for head in heads])


def pack_ids(texts: Sequence[Sequence[int]], max_tokens: int, heads: Sequence[Sequence[int]] | None = None,
             word_starts: Container[int] | None = None) -> torch.Tensor:
    """(len(texts), max_tokens) int64 rows, `PAD`-padded on the right, of ids already encoded (`encode_texts`'s rule).

    Row i holds heads[i] whole (up to max_tokens), then the newest ids of texts[i] that fit: a cut removes
    the oldest. With `word_starts` (the ids of the pieces that begin a word), a cut keeps no part of a word;
    without, every id is a word. An empty row reads one `UNK`.
    """
    out = torch.full((len(texts), max_tokens), PAD, dtype=torch.long)
    for row, ids in enumerate(texts):
        head = list(heads[row][:max_tokens]) if heads is not None else []
        start = max(len(ids) - (max_tokens - len(head)), 0)
        if word_starts is not None and start:
            while start < len(ids) and ids[start] not in word_starts:
                start += 1
        kept = (head + list(ids[start:])) or [UNK]
        out[row, : len(kept)] = torch.tensor(kept)
    return out
