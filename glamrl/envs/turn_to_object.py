"""A one-decision BabyAI level for learning checks: the right action is readable from the text."""

from __future__ import annotations

from minigrid.core.constants import COLOR_NAMES, DIR_TO_VEC
from minigrid.core.world_object import Ball, Box, Key
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import GoToInstr, ObjDesc

OBJECT_TYPES = {"ball": Ball, "box": Box, "key": Key}


class TurnToObjectLevel(RoomGridLevel):
    """
    ## Description
    A 3x3 room. The agent stands in the middle; one object lies in the cell just left
    or just right of it. Facing the object completes the mission, so a single turn in
    the direction the text names ("You see a red ball 1 step left") solves it.

    ## Mission Space
    "go to the {color} {type}", type in ball, box, key.

    ## Action Space
    The six BabyAI-Text actions; only turn left / turn right can succeed.

    ## Rewards
    minigrid's `1 - 0.9 * step_count / max_steps` on success, 0 otherwise.

    ## Termination
    Terminated after the one decision, whether it succeeded or not (never truncated:
    no time limit cuts the episode short, so nothing is bootstrapped). A uniform random
    policy succeeds 1/6 of the time. `max_steps` (default 1) only scales the reward.

    ## Registered Configurations
    - `BabyAI-TurnToObject-v0`
    """

    def __init__(self, max_steps: int = 1, **kwargs) -> None:
        super().__init__(num_rows=1, num_cols=1, room_size=5, max_steps=max_steps, **kwargs)

    def step(self, action: int):
        obs, reward, _terminated, _truncated, info = super().step(action)
        return obs, reward, True, False, info

    def gen_mission(self) -> None:
        self.agent_pos = (2, 2)
        self.agent_dir = self._rand_int(0, 4)
        dx, dy = DIR_TO_VEC[self.agent_dir]
        side = 1 if self._rand_bool() else -1  # +1: right of the agent, -1: left
        x, y = 2 - side * dy, 2 + side * dx
        kind, color = self._rand_elem(sorted(OBJECT_TYPES)), self._rand_elem(COLOR_NAMES)
        self.grid.set(x, y, OBJECT_TYPES[kind](color))
        self.instrs = GoToInstr(ObjDesc(kind, color))
