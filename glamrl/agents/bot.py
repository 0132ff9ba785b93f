"""The BabyAI bot (minigrid's `BabyAIBot`): the expert baseline and source of demonstrations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import SyncVectorEnv
from minigrid.utils.baby_ai_bot import BabyAIBot

from glamrl.agents.base import Decision
from glamrl.agents.registry import AgentRequest
from glamrl.envs.actions import ACTION_NAMES


class BotAgent:
    """One BabyAI bot per env copy, planning from the level's internal state.

    A bot reads its env's current episode, so it is created at the first `act` of an
    episode and dropped by `end_episodes`. It needs the envs in this process
    (a `SyncVectorEnv`), and assumes every action it suggested was taken.
    """

    def __init__(self, envs: SyncVectorEnv, action_names: Sequence[str] = ACTION_NAMES) -> None:
        self.levels = [env.unwrapped for env in envs.envs]
        self.action_names = tuple(action_names)  # labels only: the bot plans from the level, not from text
        self.bots: list[BabyAIBot | None] = [None] * len(self.levels)

    def act(self, obs: dict[str, Any]) -> Decision:
        actions = np.empty(len(self.levels), dtype=np.int64)
        for i, level in enumerate(self.levels):
            if self.bots[i] is None:
                self.bots[i] = BabyAIBot(level)
            actions[i] = self.bots[i].replan()
        return Decision(actions, probs=np.eye(len(ACTION_NAMES))[actions])  # the bot is deterministic

    def end_episodes(self, done: np.ndarray) -> None:
        for i in np.flatnonzero(done):
            self.bots[i] = None


def build_agent(r: AgentRequest) -> BotAgent:
    """agent.kind=bot's agent (the registry's entry point): it has no network and reads no config."""
    return BotAgent(r.envs, r.action_names)
