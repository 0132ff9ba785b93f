"""Uniformly random actions: the lower baseline (GLAM's random agent reached 0.15 success)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import SyncVectorEnv

from glamrl.agents.base import Decision
from glamrl.agents.registry import AgentRequest
from glamrl.envs.actions import ACTION_NAMES


class RandomAgent:
    """Draws each env's action uniformly among the 6 BabyAI-Text actions, from that env's level generator.

    A reset with a seed seeds the level's generator, and a BabyAI level draws from it only while it builds an
    episode: so an episode's actions are a function of its seed alone, whatever the batch (`num_envs`) and
    whatever ran before. It needs the envs in this process (a `SyncVectorEnv`).
    """

    def __init__(self, envs: SyncVectorEnv, action_names: Sequence[str] = ACTION_NAMES) -> None:
        self.levels = [env.unwrapped for env in envs.envs]
        self.action_names = tuple(action_names)  # labels only: reads nothing

    def act(self, obs: dict[str, Any]) -> Decision:
        actions = np.array([level.np_random.integers(len(ACTION_NAMES)) for level in self.levels], dtype=np.int64)
        return Decision(actions, probs=np.full((len(self.levels), len(ACTION_NAMES)), 1 / len(ACTION_NAMES)))

    def end_episodes(self, done: np.ndarray) -> None:
        """Nothing to forget."""


def build_agent(r: AgentRequest) -> RandomAgent:
    """agent.kind=random's agent (the registry's entry point): it has no network and reads no config."""
    return RandomAgent(r.envs, r.action_names)
