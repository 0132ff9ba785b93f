"""Build BabyAI-Text envs: one text env, a vector of them, and what finished in a vector step."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from glamrl.errors import GlamrlError
from glamrl.envs import TEXT_PREFIX
from glamrl.envs.levels import UnknownTaskError
from glamrl.envs.text_env import BabyAITextEnv


class UnknownEnvError(GlamrlError, ValueError):
    """An env id that is not a registered BabyAI level."""


@dataclass
class EpisodeResult:
    """One episode that ended during a vector step."""

    env_index: int
    success: bool
    episode_return: float
    episode_length: int
    task: str


def known_env_ids() -> list[str]:
    """Every BabyAI level the text env can wrap (glamrl's and minigrid's)."""
    return sorted(i for i in gym.registry if i.startswith("BabyAI-") and not i.startswith(TEXT_PREFIX))


def task_kinds(env_id: str, task: str | None = None) -> tuple[str, ...]:
    """The task kinds that the episodes of level `env_id` (restricted to `task`) are drawn from, as
    `EpisodeResult.task` names them: a Mixed level's kinds (go_to, pick_up, ...), one for any other level."""
    spec = gym.spec(env_id.replace(TEXT_PREFIX, "BabyAI-", 1))
    fixed = task or spec.kwargs.get("task")
    if fixed is not None:
        return (fixed,)
    module, _, name = str(spec.entry_point).partition(":")
    return tuple(getattr(getattr(importlib.import_module(module), name), "tasks", None) or (name,))


def make_env(env_id: str, *, task: str | None = None, language: str = "en", faithful: bool = False,
             max_steps: int | None = None, render_mode: str | None = None) -> BabyAITextEnv:
    """A BabyAI-Text env over the level `env_id` (see `BabyAITextEnv`).

    `env_id` is a level (`BabyAI-GoToLocal-v0`) or its text id (`BabyAI-Text-GoToLocal-v0`).
    `task` restricts a Mixed level to one task kind; `max_steps` replaces the level's limit.
    """
    if env_id.startswith(TEXT_PREFIX):
        env_id = "BabyAI-" + env_id.removeprefix(TEXT_PREFIX)
    known = known_env_ids()
    if env_id not in known:
        close = difflib.get_close_matches(env_id, known, n=5, cutoff=0.5) or known[:5]
        raise UnknownEnvError(f"unknown env id {env_id!r}; did you mean one of {close}? "
                              f"({len(known)} BabyAI ids are known, e.g. BabyAI-MixedTrainLocal-v0)")
    kwargs: dict[str, Any] = {"render_mode": render_mode}
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    if task is not None:
        if not str(gym.spec(env_id).entry_point).startswith("glamrl.envs.levels:"):
            raise UnknownTaskError(f"task={task!r} needs a Mixed level (e.g. BabyAI-MixedTrainLocal-v0), not {env_id}")
        kwargs["task"] = task
    return BabyAITextEnv(gym.make(env_id, **kwargs), language=language, faithful=faithful)


def make_vector_env(env_id: str, num_envs: int, *, task: str | None = None, language: str = "en",
                    faithful: bool = False, max_steps: int | None = None, render_mode: str | None = None,
                    wrapper: Callable[[BabyAITextEnv], gym.Env] | None = None) -> SyncVectorEnv:
    """`num_envs` copies of `make_env(...)` (each wrapped by `wrapper`, if given), auto-reset in the same step.

    After an episode ends, the returned observation is the new episode's first one
    and the ended episode's info is in `infos["final_info"]` (see `finished_episodes`).
    `reset(seed=s)` seeds copy i with s + i.
    """
    def thunk() -> gym.Env:
        env = make_env(env_id, task=task, language=language, faithful=faithful,
                       max_steps=max_steps, render_mode=render_mode)
        return env if wrapper is None else wrapper(env)

    make_env(env_id, task=task, language=language)  # fail here, not inside the vector env
    return SyncVectorEnv([thunk] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


def finished_episodes(infos: dict[str, Any]) -> list[EpisodeResult]:
    """The episodes that ended in the vector step that returned `infos`."""
    if "final_info" not in infos:
        return []
    final = infos["final_info"]
    return [
        EpisodeResult(
            env_index=int(i),
            success=bool(final["success"][i]),
            episode_return=float(final["episode_return"][i]),
            episode_length=int(final["episode_length"][i]),
            task=str(final["task"][i]),
        )
        for i in np.flatnonzero(infos["_final_info"])
    ]
