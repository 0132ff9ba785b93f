"""Uniformly random actions: the lower baseline (GLAM's random agent reached 0.15 success)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from glamrl.agents.base import Decision
from glamrl.envs.actions import ACTION_NAMES


class RandomAgent:
    """Draws each env's action uniformly among the 6 BabyAI-Text actions."""

    def __init__(self, num_envs: int, action_names: Sequence[str] = ACTION_NAMES, seed: int | None = None) -> None:
        self.num_envs = num_envs
        self.action_names = tuple(action_names)  # labels only: reads nothing
        self.rng = np.random.default_rng(seed)

    def act(self, obs: dict[str, Any]) -> Decision:
        actions = self.rng.integers(0, len(ACTION_NAMES), size=self.num_envs, dtype=np.int64)
        return Decision(actions, probs=np.full((self.num_envs, len(ACTION_NAMES)), 1 / len(ACTION_NAMES)))

    def end_episodes(self, done: np.ndarray) -> None:
        """Nothing to forget."""
