"""Uniformly random actions: the lower baseline (GLAM's random agent reached 0.15 success)."""

from __future__ import annotations

from typing import Any

import numpy as np

from glamrl.agents.base import Decision
from glamrl.envs.actions import ACTION_NAMES


class RandomAgent:
    """Draws each env's action uniformly among the 6 BabyAI-Text actions."""

    def __init__(self, num_envs: int, seed: int | None = None) -> None:
        self.num_envs = num_envs
        self.rng = np.random.default_rng(seed)

    def act(self, obs: dict[str, Any]) -> Decision:
        return Decision(actions=self.rng.integers(0, len(ACTION_NAMES), size=self.num_envs, dtype=np.int64))

    def end_episodes(self, done: np.ndarray) -> None:
        """Nothing to forget."""
