"""Text description of one BabyAI observation, read straight from its 7x7x3 image.

The image is minigrid's egocentric encoding (type, colour, state) of the partial
view: cell (x, y), the agent at (3, 6) facing up (towards y = 0), the carried object
(if any) encoded at the agent's own cell. Reading the image instead of rebuilding
the view grid keeps a description at a few tens of microseconds.

>>> import numpy as np
>>> image = np.zeros((7, 7, 3), dtype=np.uint8); image[3, :] = (1, 0, 0)
>>> image[3, 3] = (6, 1, 0)                     # a green ball three cells ahead
>>> image[1, 6] = (2, 5, 0)                     # a wall two cells to the left
>>> describe(image)
['You see a wall 2 steps left', 'You see a green ball 3 steps forward']
>>> describe(image, language="fr")
['Tu vois un mur à 2 pas à gauche', 'Tu vois une balle verte à 3 pas devant']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX

LANGUAGES = ("en", "fr")

VIEW = 7
AGENT_X, AGENT_Y = VIEW // 2, VIEW - 1  # the agent's cell in view coordinates

UNSEEN, EMPTY, WALL, DOOR = (OBJECT_TO_IDX[name] for name in ("unseen", "empty", "wall", "door"))
IDX_TO_STATE = {0: "open", 1: "closed", 2: "locked"}


class UnknownLanguageError(ValueError):
    """A language other than those in `LANGUAGES` was asked for."""


# ------------------------------------------------------------------------- French words
FRENCH_NOUNS: dict[str, tuple[str, str]] = {  # English type -> (French noun, gender)
    "door": ("porte", "f"), "key": ("clef", "f"), "ball": ("balle", "f"), "box": ("boîte", "f"),
    "wall": ("mur", "m"), "floor": ("sol", "m"), "goal": ("but", "m"), "lava": ("lave", "f"),
    "agent": ("agent", "m"), "object": ("objet", "m"),
}
FRENCH_COLORS: dict[str, dict[str, str]] = {  # English colour -> {gender: French adjective}
    "red": {"m": "rouge", "f": "rouge"}, "green": {"m": "vert", "f": "verte"},
    "blue": {"m": "bleu", "f": "bleue"}, "purple": {"m": "violet", "f": "violette"},
    "yellow": {"m": "jaune", "f": "jaune"}, "grey": {"m": "gris", "f": "grise"},
}
FRENCH_STATES: dict[str, dict[str, str]] = {
    "open": {"m": "ouvert", "f": "ouverte"}, "closed": {"m": "fermé", "f": "fermée"},
    "locked": {"m": "fermé à clef", "f": "fermée à clef"},
}


def french_noun_phrase(obj_type: str, color: str | None, state: str | None = None) -> tuple[str, str]:
    """`("balle verte", "f")`: noun, then colour, then state, agreeing in gender."""
    noun, gender = FRENCH_NOUNS[obj_type]
    words = [noun]
    if color is not None:
        words.append(FRENCH_COLORS[color][gender])
    if state is not None:
        words.append(FRENCH_STATES[state][gender])
    return " ".join(words), gender


# ---------------------------------------------------------------------------- sentences
@dataclass(frozen=True)
class _Phrasing:
    """How one language (and wording option) turns cells into sentences."""

    language: str
    faithful: bool

    def steps(self, n: int, direction: str) -> str:
        if self.language == "en":
            return f"{n} step{'s' if n > 1 else ''} {direction}"
        return f"{n} pas {direction}"

    def wall(self, n: int, direction: str) -> str:
        if self.language == "en":
            return f"You see a wall {self.steps(n, direction)}"
        return f"Tu vois un mur à {self.steps(n, direction)}"

    def carrying(self, obj_type: str, color: str) -> str:
        if self.language == "en":
            return f"You carry a {color} {obj_type}"
        phrase, gender = french_noun_phrase(obj_type, color)
        return f"Tu portes {'une' if gender == 'f' else 'un'} {phrase}"

    def seen(self, obj_type: str, color: str, state: str | None, distances: list[str]) -> str:
        if self.language == "en":
            words = f"{state} {color} {obj_type}" if state else f"{color} {obj_type}"
            article = "an" if words[0] in "aeiou" and not self.faithful else "a"
            return f"You see {article} {words} {' and '.join(distances)}"
        phrase, gender = french_noun_phrase(obj_type, color, state)
        where = " et ".join(distances) if self.faithful else "à " + " et ".join(distances)
        return f"Tu vois {'une' if gender == 'f' else 'un'} {phrase} {where}"


_DIRECTIONS = {
    "en": {"forward": "forward", "left": "left", "right": "right"},
    "fr": {"forward": "devant", "left": "à gauche", "right": "à droite"},
}
_PHRASINGS = {(lang, f): _Phrasing(lang, f) for lang in LANGUAGES for f in (False, True)}


def describe(image: np.ndarray, language: str = "en", faithful: bool = False) -> list[str]:
    """Sentences describing what the agent sees (and carries) in one 7x7x3 view.

    Order: what the agent carries; the first wall straight forward, then left, then
    right (only if nothing else stands in between); every visible door, key, ball or
    box, column by column of the view (x, then y).

    `faithful=True` keeps GLAM's exact wording ("a open door"; in French, no "à"
    before an object's distance); the default writes correct English and French.
    """
    if language not in LANGUAGES:
        raise UnknownLanguageError(f"language must be one of {LANGUAGES}, got {language!r}")
    phrasing = _PHRASINGS[language, faithful]
    words = _DIRECTIONS[language]
    cells = image.tolist()  # cells[x][y] == [type, colour, state]; lists are faster to index
    sentences = []

    carried = cells[AGENT_X][AGENT_Y]
    if carried[0] > WALL:
        sentences.append(phrasing.carrying(IDX_TO_OBJECT[carried[0]], IDX_TO_COLOR[carried[1]]))

    for direction, ray in (
        ("forward", [cells[AGENT_X][y] for y in range(AGENT_Y - 1, -1, -1)]),
        ("left", [cells[x][AGENT_Y] for x in range(AGENT_X - 1, -1, -1)]),
        ("right", [cells[x][AGENT_Y] for x in range(AGENT_X + 1, VIEW)]),
    ):
        for distance, cell in enumerate(ray, start=1):
            if cell[0] in (UNSEEN, EMPTY):
                continue
            if cell[0] == WALL:
                sentences.append(phrasing.wall(distance, words[direction]))
            break

    for x, column in enumerate(cells):
        for y, (obj, color, state) in enumerate(column):
            if obj <= WALL or (x == AGENT_X and y == AGENT_Y):
                continue
            dx, dy = x - AGENT_X, AGENT_Y - y
            side = phrasing.steps(abs(dx), words["left" if dx < 0 else "right"])
            ahead = phrasing.steps(dy, words["forward"])
            distances = [ahead] if dx == 0 else [side] if dy == 0 else [side, ahead]
            sentences.append(phrasing.seen(
                IDX_TO_OBJECT[obj], IDX_TO_COLOR[color], IDX_TO_STATE[state] if obj == DOOR else None, distances,
            ))
    return sentences
