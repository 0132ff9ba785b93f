"""BabyAI-Text's closed vocabulary (English and French prompts) and a word-level encoder over it.

Word-level agents (DRRN, the symbolic agent's mission encoder) and the tiny test models
share it; nothing is downloaded. Words outside it (the suite's invented words) map to `<unk>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
    out = torch.full((len(texts), max_tokens), PAD, dtype=torch.long)
    for row, text in enumerate(texts):
        head = word_ids(heads[row])[:max_tokens] if heads is not None else []
        room = max_tokens - len(head)
        ids = (head + (word_ids(text)[-room:] if room else [])) or [UNK]
        out[row, : len(ids)] = torch.tensor(ids)
    return out
