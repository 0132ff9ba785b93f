"""Text description of one BabyAI observation, read straight from its 7x7x3 image.

The image is minigrid's egocentric encoding (type, colour, state) of the partial
view: cell (x, y), the agent at (3, 6) facing up (towards y = 0), the carried object
(if any) encoded at the agent's own cell. Reading the image instead of rebuilding
the view grid keeps a description at about ten microseconds.

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

import functools

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX

from glamrl.errors import GlamrlError

LANGUAGES = ("en", "fr")

VIEW = 7
AGENT_X, AGENT_Y = VIEW // 2, VIEW - 1  # the agent's cell in view coordinates

UNSEEN, EMPTY, WALL, DOOR = (OBJECT_TO_IDX[name] for name in ("unseen", "empty", "wall", "door"))
IDX_TO_STATE = {0: "open", 1: "closed", 2: "locked"}


class UnknownLanguageError(GlamrlError, ValueError):
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
# Every sentence part depends on a few small integers only: build each once, then look it up.
_DIRECTIONS = {
    "en": {"forward": "forward", "left": "left", "right": "right"},
    "fr": {"forward": "devant", "left": "à gauche", "right": "à droite"},
}


def _steps(language: str, n: int, direction: str) -> str:
    word = _DIRECTIONS[language][direction]
    if language == "en":
        return f"{n} step{'s' if n > 1 else ''} {word}"
    return f"{n} pas {word}"


@functools.cache
def _wall(language: str, n: int, direction: str) -> str:
    if language == "en":
        return f"You see a wall {_steps(language, n, direction)}"
    return f"Tu vois un mur à {_steps(language, n, direction)}"


@functools.cache
def _carrying(language: str, obj: int, color: int) -> str:
    obj_type, color_name = IDX_TO_OBJECT[obj], IDX_TO_COLOR[color]
    if language == "en":
        return f"You carry a {color_name} {obj_type}"
    phrase, gender = french_noun_phrase(obj_type, color_name)
    return f"Tu portes {'une' if gender == 'f' else 'un'} {phrase}"


@functools.cache
def _seen(language: str, faithful: bool, obj: int, color: int, state: int, x: int, y: int) -> str:
    """The sentence for one object of the view at cell (x, y)."""
    dx, dy = x - AGENT_X, AGENT_Y - y
    side = _steps(language, abs(dx), "left" if dx < 0 else "right")
    ahead = _steps(language, dy, "forward")
    distances = [ahead] if dx == 0 else [side] if dy == 0 else [side, ahead]
    obj_type, color_name = IDX_TO_OBJECT[obj], IDX_TO_COLOR[color]
    state_name = IDX_TO_STATE[state] if obj == DOOR else None
    if language == "en":
        words = f"{state_name} {color_name} {obj_type}" if state_name else f"{color_name} {obj_type}"
        article = "an" if words[0] in "aeiou" and not faithful else "a"
        return f"You see {article} {words} {' and '.join(distances)}"
    phrase, gender = french_noun_phrase(obj_type, color_name, state_name)
    where = " et ".join(distances) if faithful else "à " + " et ".join(distances)
    return f"Tu vois {'une' if gender == 'f' else 'un'} {phrase} {where}"


def _index(x: int, y: int) -> int:
    """Position of cell (x, y)'s type in the flattened 7x7x3 image (colour and state follow)."""
    return (x * VIEW + y) * 3


_AGENT = _index(AGENT_X, AGENT_Y)
_RAYS = (  # (direction, cells from the agent outwards)
    ("forward", [_index(AGENT_X, y) for y in range(AGENT_Y - 1, -1, -1)]),
    ("left", [_index(x, AGENT_Y) for x in range(AGENT_X - 1, -1, -1)]),
    ("right", [_index(x, AGENT_Y) for x in range(AGENT_X + 1, VIEW)]),
)
_CELLS = [(_index(x, y), x, y) for x in range(VIEW) for y in range(VIEW) if (x, y) != (AGENT_X, AGENT_Y)]


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
    cells = image.ravel().tolist()  # one Python list of ints: much faster to index than the array
    sentences = []

    if cells[_AGENT] > WALL:  # the carried object is encoded at the agent's cell
        sentences.append(_carrying(language, cells[_AGENT], cells[_AGENT + 1]))

    for direction, ray in _RAYS:
        for distance, i in enumerate(ray, start=1):
            if cells[i] not in (UNSEEN, EMPTY):
                if cells[i] == WALL:
                    sentences.append(_wall(language, distance, direction))
                break

    for i, x, y in _CELLS:
        if cells[i] > WALL:
            sentences.append(_seen(language, faithful, cells[i], cells[i + 1], cells[i + 2], x, y))
    return sentences
