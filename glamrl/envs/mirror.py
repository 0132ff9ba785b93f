"""The left-right mirror of BabyAI-Text: what the agent would read in its world reflected about its line of sight.

Reflecting the world swaps left and right in every sentence, in the mission ("the ball on your left") and in
the actions ("turn left" <-> "turn right"). The 7-wide view stays centred on the agent, so it shows the same
cells, only listed in the mirrored world's order (`describe`'s: what the agent carries; walls forward, left,
right; objects column by column). `mirror_sentences(describe(image))` is `describe(image flipped left to
right)` (tests/test_mirror.py), and `mirror_prompt` mirrors a prompt `glamrl.prompts.build_prompt` wrote, its
line of possible actions left as it is. The PPO mirror loss (`ppo.mirror_coef`) reads the mirrored prompts.

>>> mirror_sentences(["You see a wall 2 steps left", "You see a red box 1 step left and 2 steps forward",
...                   "You see a green ball 3 steps forward"])
['You see a wall 2 steps right', 'You see a green ball 3 steps forward', 'You see a red box 1 step right and 2 steps forward']
>>> swap_sides("tourner à gauche, aller tout droit")
'tourner à droite, aller tout droit'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from glamrl.envs.describe import AGENT_X, AGENT_Y
from glamrl.errors import GlamrlError

_SIDES = {"left": "right", "right": "left", "gauche": "droite", "droite": "gauche"}
_SIDE_WORD = re.compile(r"\b(left|right|gauche|droite)\b")
_DISTANCE = re.compile(r"(\d+) (?:steps?|pas) (?:à )?(left|right|gauche|droite|forward|devant)\b")
_WALLS = ("You see a wall ", "Tu vois un mur ")
_WALL_ORDER = {"forward": 0, "devant": 0, "left": 1, "gauche": 1, "right": 2, "droite": 2}
_OBSERVATION = re.compile(r" \n Observation (\d+): ")


class MirrorError(GlamrlError, ValueError):
    """A text that is not BabyAI-Text's prompt layout, or actions without their mirror image."""


def swap_sides(text: str) -> str:
    """`text` with the words left and right (gauche and droite) swapped; "tout droit" is not a side."""
    return _SIDE_WORD.sub(lambda m: _SIDES[m[1]], text)


def _place(sentence: str) -> tuple[int, ...]:
    """Where `describe` lists a sentence: (0,) what the agent carries, (1, ray) a wall on the forward, left or
    right ray, (2, x, y) an object at cell (x, y) of the view."""
    distances = {word: int(n) for n, word in _DISTANCE.findall(sentence)}
    if not distances:
        return (0,)
    if sentence.startswith(_WALLS):
        return (1, *(_WALL_ORDER[word] for word in distances))
    x, y = AGENT_X, AGENT_Y
    for word, n in distances.items():
        if _WALL_ORDER[word] == 0:
            y -= n
        else:
            x += -n if _WALL_ORDER[word] == 1 else n
    return (2, x, y)


def mirror_sentences(sentences: Sequence[str]) -> list[str]:
    """The description (English or French, `describe`'s wording) of the mirrored view: sides swapped, then in
    `describe`'s order for that view."""
    return sorted((swap_sides(s) for s in sentences), key=_place)


def mirror_prompt(prompt: str) -> str:
    """The prompt of the mirrored world: the goal, every observation and every past action mirrored, the
    first line (the possible actions) unchanged, so that both prompts offer the actions in the same order."""
    head, *observations = _OBSERVATION.split(prompt)  # head, then (number, text) for each observation
    actions_line, newline, goal = head.partition(" \n ")
    if not newline or not observations:
        raise MirrorError(f"cannot mirror a text that is not a BabyAI-Text prompt (no goal line or no "
                          f"observation): {prompt[:80]!r}")
    mirrored = actions_line + newline + swap_sides(goal)
    for number, text in zip(observations[::2], observations[1::2]):
        sentences, marker, action = text.partition(f"\n Action {number}: ")
        if not marker or (sentences and not sentences.endswith(", ")):
            raise MirrorError(f"cannot mirror observation {number} of a prompt: {text[:80]!r} is not "
                              f"'sentence, sentence, \\n Action {number}: '")
        mirrored += f" \n Observation {number}: " + "".join(f"{s}, " for s in
                                                             mirror_sentences(sentences.split(", ")[:-1]))
        mirrored += marker + swap_sides(action)
    return mirrored


def mirror_actions(action_names: Sequence[str]) -> list[int]:
    """The permutation of the actions that the mirror makes: entry i is the index of action i's mirror image
    ("turn left" -> "turn right"; an action without a side is its own)."""
    names = list(action_names)
    missing = [name for name in names if swap_sides(name) not in names]
    if missing:
        raise MirrorError(f"the mirror needs every action's mirror image among the actions; "
                          f"{', '.join(map(repr, missing))} has none in {names}")
    return [names.index(swap_sides(name)) for name in names]
