"""BabyAI-Text: the text view of any minigrid BabyAI level, as a gymnasium wrapper."""

from __future__ import annotations

import contextlib
import string
import sys
from typing import Any, TextIO

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from glamrl.envs.actions import ACTION_NAMES, action_names
from glamrl.envs.describe import LANGUAGES, UnknownLanguageError, describe
from glamrl.envs.missions import french_mission
from glamrl.errors import GlamrlError

CHARSET = frozenset(string.ascii_letters + string.digits + " ,.'-" + "àâçéèêëîïôûùüœÀÂÇÉÈÊ")
"""Characters of missions and descriptions (gymnasium's Text default is alphanumeric only)."""
MAX_MISSION_CHARS = 512
MAX_SENTENCE_CHARS = 128
MAX_STEPS = 2**31 - 1
"""Bound of the observation's "step" and "max_steps" (the levels' limits are far below it)."""


class InvalidActionError(GlamrlError, ValueError):
    """An action outside the text env's `Discrete(6)` action space."""


def text_observation_space() -> spaces.Dict:
    """Observation space of the text env; the 7x7 view fixes it whatever the grid size."""
    return spaces.Dict({
        "image": spaces.Box(0, 255, (7, 7, 3), dtype=np.uint8),
        "direction": spaces.Discrete(4),
        "mission": spaces.Text(MAX_MISSION_CHARS, min_length=1, charset=CHARSET),
        "descriptions": spaces.Sequence(spaces.Text(MAX_SENTENCE_CHARS, min_length=1, charset=CHARSET)),
        "step": spaces.Box(0, MAX_STEPS, (), dtype=np.int64),
        "max_steps": spaces.Box(1, MAX_STEPS, (), dtype=np.int64),
    })


class BabyAITextEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """
    ## Description

    Wraps a minigrid BabyAI level (the Mixed levels, `BabyAI-GoToLocal-v0`, ...) so
    that the agent reads its observation as sentences (see `glamrl.envs.describe`)
    and its mission in English or French.

    ## Mission Space

    The level's missions; with `language="fr"`, translated (`glamrl.envs.missions`).

    ## Action Space

    `Discrete(6)`: turn left, turn right, go forward, pick up, drop, toggle (minigrid
    0..5, no `done`). `action_names` holds their names for prompts; replace it for
    synonyms or another language.

    ## Observation

    A dict: "image" (uint8 7x7x3, minigrid's egocentric encoding, for symbolic agents),
    "direction" (int 0..3), "mission" (str), "descriptions" (tuple of sentences), "step" (the
    steps the episode has taken before this observation: 0 after reset, minigrid's `step_count`)
    and "max_steps" (the episode's limit, which a BabyAI level may set per episode), both 0-d
    int64 arrays: what a critic that reads the step count reads (`model.critic_reads_step`).

    ## Rewards

    The level's: `1 - 0.9 * (step_count / max_steps)` on success, 0 otherwise.
    `info` carries "task" (task kind of a Mixed level, else the level's class name) at
    every step and, when the episode ends, "success" (reward > 0), "episode_return"
    and "episode_length".

    ## Termination

    The level's: success or failure of the mission; truncation at `max_steps`.

    ## Registered Configurations

    `BabyAI-Text-<Level>` for every BabyAI level `BabyAI-<Level>` (minigrid's and
    glamrl's), registered on `import glamrl`: `gym.make("BabyAI-Text-MixedTrainLocal-v0")`.
    Or build it with `glamrl.envs.make_env(env_id, ...)`.
    """

    def __init__(self, env: gym.Env, language: str = "en", faithful: bool = False) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, language=language, faithful=faithful)
        gym.Wrapper.__init__(self, env)
        if language not in LANGUAGES:
            raise UnknownLanguageError(f"language must be one of {LANGUAGES}, got {language!r}")
        self.language = language
        self.faithful = faithful
        self.observation_space = text_observation_space()
        self.action_space = spaces.Discrete(len(ACTION_NAMES))
        self.action_names: tuple[str, ...] = action_names(language)
        self._mission = ""
        self._return = 0.0
        self._length = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        with contextlib.redirect_stdout(_DropRejections(sys.stdout)):
            obs, info = self.env.reset(seed=seed, options=options)
        level = self.env.unwrapped
        self._mission = french_mission(level.instrs) if self.language == "fr" else obs["mission"]
        self._return, self._length = 0.0, 0
        return self._text_obs(obs), {**info, "task": self._task()}

    def step(self, action: int):
        if not self.action_space.contains(action):
            raise InvalidActionError(f"action {action!r} is not in the action space {self.action_space} "
                                     f"({', '.join(f'{i}: {n}' for i, n in enumerate(ACTION_NAMES))})")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += 1
        info = {**info, "task": self._task()}
        if terminated or truncated:
            info.update(success=bool(reward > 0), episode_return=self._return, episode_length=self._length)
        return self._text_obs(obs), reward, terminated, truncated, info

    def _text_obs(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {
            "image": obs["image"],
            "direction": int(obs["direction"]),
            "mission": self._mission,
            "descriptions": tuple(describe(obs["image"], self.language, self.faithful)),
            "step": np.array(self.env.unwrapped.step_count, dtype=np.int64),
            "max_steps": np.array(self.env.unwrapped.max_steps, dtype=np.int64),
        }

    def _task(self) -> str:
        level = self.env.unwrapped
        return getattr(level, "task", None) or type(level).__name__


class _DropRejections:
    """A stdout that swallows minigrid's "Sampling rejected: ..." lines and passes the rest."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._dropping = False  # inside a rejection line (print writes it in pieces)

    def write(self, text: str) -> int:
        if text.startswith("Sampling rejected"):
            self._dropping = True
        if self._dropping:
            self._dropping = not text.endswith("\n")
            return len(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()
