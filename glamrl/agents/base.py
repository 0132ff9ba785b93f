"""The one interface every agent shares: act on a batch of observations, forget finished episodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch


@dataclass
class Decision:
    """What an agent chose for a batch of N environments."""

    actions: np.ndarray                    # (N,) int64, minigrid action indices 0..5
    probs: np.ndarray                      # (N, A) float, the distribution each action was drawn from
    log_probs: torch.Tensor | None = None  # (N,) log pi(action | observation), learning agents only
    values: torch.Tensor | None = None     # (N,) value estimates, learning agents only
    prompts: list[str] | None = None       # (N,) the text the policy read, kept to re-score in PPO


class Agent(Protocol):
    """An agent acting in a vector env of N BabyAI-Text copies.

    `obs` is the vector env's batched observation: a dict with "mission" (N strings),
    "descriptions" (N tuples of sentences), "image" (N, 7, 7, 3) and "direction" (N,).
    """

    action_names: tuple[str, ...]
    """the names of actions 0..5 as this agent knows them: agents that read text (llm, drrn) list
    them in their prompts and score or encode exactly these; the others carry them as labels."""

    def act(self, obs: dict[str, Any]) -> Decision:
        """Choose one action per environment."""
        ...

    def end_episodes(self, done: np.ndarray) -> None:
        """Forget the memory of the environments whose episode just ended (`done`: (N,) bool)."""
        ...
