"""Whole-word substitutions of everything an agent reads, as a wrapper over a BabyAI-Text env.

    env = SubstituteWords(make_env("BabyAI-MixedTrainLocal-v0"), {"key": "dax", "grey": "sil"})
    env.reset(seed=1)[0]["mission"]      # "pick up the sil dax"
    env.action_names                     # the names after substitution

Only the text changes: the level underneath, its reward and its internal state are the
original ones, so the BabyAI bot (which plans from the level) still solves every episode.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from glamrl.envs.text_env import BabyAITextEnv


class WordSubstitution:
    """Replace whole words (or whole multi-word phrases) in one regex pass.

    "grey" does not touch "greyish" and "box" does not touch "boxes". Keys are tried
    longest first, so an identity entry protects a phrase: {"fermée à clef": "fermée à
    clef", "clef": "chaise"} leaves a locked door locked and renames keys.
    """

    def __init__(self, words: Mapping[str, str]) -> None:
        self.words = dict(words)
        keys = sorted(self.words, key=len, reverse=True)
        self.pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, keys)) + r")\b") if keys else None

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda m: self.words[m.group(0)], text)


class SubstituteWords(gym.ObservationWrapper):
    """The text env with `words` substituted in the mission, every description sentence and
    the action names (`action_names`, optionally replaced first by `actions`)."""

    def __init__(self, env: BabyAITextEnv, words: Mapping[str, str],
                 actions: Sequence[str] | None = None) -> None:
        super().__init__(env)
        self.substitute = WordSubstitution(words)
        names = env.get_wrapper_attr("action_names") if actions is None else actions
        self.action_names: tuple[str, ...] = tuple(self.substitute(a) for a in names)

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {
            **observation,
            "mission": self.substitute(observation["mission"]),
            "descriptions": tuple(self.substitute(s) for s in observation["descriptions"]),
        }
