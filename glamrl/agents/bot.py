"""The BabyAI bot (minigrid's `BabyAIBot`): the expert baseline and source of demonstrations."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import SyncVectorEnv
from minigrid.utils.baby_ai_bot import BabyAIBot

from glamrl.agents.base import Decision


class BotAgent:
    """One BabyAI bot per env copy, planning from the level's internal state.

    A bot reads its env's current episode, so it is created at the first `act` of an
    episode and dropped by `end_episodes`. It needs the envs in this process
    (a `SyncVectorEnv`), and assumes every action it suggested was taken.
    """

    def __init__(self, envs: SyncVectorEnv) -> None:
        self.levels = [env.unwrapped for env in envs.envs]
        self.bots: list[BabyAIBot | None] = [None] * len(self.levels)

    def act(self, obs: dict[str, Any]) -> Decision:
        actions = np.empty(len(self.levels), dtype=np.int64)
        for i, level in enumerate(self.levels):
            if self.bots[i] is None:
                self.bots[i] = BabyAIBot(level)
            actions[i] = self.bots[i].replan()
        return Decision(actions=actions)

    def end_episodes(self, done: np.ndarray) -> None:
        for i in np.flatnonzero(done):
            self.bots[i] = None
