"""The Mixed BabyAI-Text levels: five task kinds in one 8x8 room (two rooms for open).

GLAM drew the task kind once per env instance, before seeding; here it is drawn at
every reset from the seeded RNG, so `reset(seed=s)` reproduces task, layout and
mission, and one instance sees every kind.
"""

from __future__ import annotations

from minigrid.core.constants import COLOR_NAMES
from minigrid.core.roomgrid import RoomGrid
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    Instr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

from glamrl.errors import GlamrlError

TRAIN_TASKS = ("go_to", "pick_up", "open", "put_next", "pick_up_seq_go_to")
TEST_TASKS = TRAIN_TASKS + ("pick_up_seq_pick_up",)
"""Task kinds; `pick_up_seq_pick_up` is the composition never seen in training."""

HELD_OUT_PAIRS = frozenset({("box", "yellow"), ("key", "red"), ("door", "red"), ("ball", "green"), ("door", "grey")})
"""(type, colour) pairs that no training mission mentions and every test mission is made of."""


class UnknownTaskError(GlamrlError, ValueError):
    """A `task=` that the level does not offer."""


class _MixedLocal(RoomGridLevel):
    """Shared generator of the Mixed levels; subclasses choose the split."""

    tasks: tuple[str, ...]
    held_out: bool  # True: missions use only HELD_OUT_PAIRS; False: never

    def __init__(self, task: str | None = None, room_size: int = 8, num_dists: int = 8,
                 max_steps: int | None = None, **kwargs) -> None:
        if task is not None and task not in self.tasks:
            raise UnknownTaskError(f"{type(self).__name__} has no task {task!r}; choose one of {self.tasks}")
        self.fixed_task = task
        self.task = task or self.tasks[0]  # redrawn at every reset
        self.num_dists = num_dists
        self.door_colors = [c for c in COLOR_NAMES if self._allowed("door", c)]
        super().__init__(room_size=room_size, num_rows=1, num_cols=1, max_steps=max_steps, **kwargs)

    def _allowed(self, obj_type: str, color: str | None) -> bool:
        return ((obj_type, color) in HELD_OUT_PAIRS) == self.held_out

    def _gen_grid(self, width: int, height: int) -> None:
        # The task fixes the geometry: one room, or two side by side for open.
        self.task = self.fixed_task or self._rand_elem(self.tasks)
        self.num_cols = 2 if self.task == "open" else 1
        self.width = (self.room_size - 1) * self.num_cols + 1
        super()._gen_grid(self.width, self.height)

    def gen_mission(self) -> None:
        # Rejections are handled here (not by minigrid, which prints each one).
        while True:
            instrs = self._gen_open() if self.task == "open" else self._gen_one_room()
            if instrs is not None:
                self.instrs = instrs
                try:
                    self.validate_instrs(instrs)  # put next: objects not already side by side
                    return
                except RejectSampling:
                    pass
            RoomGrid._gen_grid(self, self.width, self.height)  # start again from empty rooms

    def _gen_open(self) -> Instr | None:
        locked = self._rand_int(0, 2)
        other = 1 - locked
        color = self._rand_elem(self.door_colors)
        self.add_door(locked, 0, 0 if locked == 0 else 2, color=color, locked=True)
        self.add_object(other, 0, "key", color)
        self.add_distractors(other, 0, num_distractors=self.num_dists, all_unique=False)
        self.place_agent(other, 0)
        if not self.check_objs_reachable(raise_exc=False):
            return None
        named = self._rand_elem([None, color]) if not self.held_out else color
        return OpenInstr(ObjDesc("door", named))

    def _gen_one_room(self) -> Instr | None:
        self.place_agent()
        num_objs = self.num_dists + (1 if self.task in ("go_to", "pick_up") else 2)
        objs = self.add_distractors(num_distractors=num_objs, all_unique=False)
        if not self.check_objs_reachable(raise_exc=False):
            return None
        candidates = [o for o in objs if self._allowed(o.type, o.color)]
        if not candidates:
            return None
        a = self._rand_elem(candidates)
        if self.task == "go_to":
            return GoToInstr(_desc(a))
        if self.task == "pick_up":
            return PickupInstr(_desc(a))

        if self.task == "put_next":  # the two descriptions must differ
            others = [o for o in candidates if (o.type, o.color) != (a.type, a.color)]
        else:
            others = [o for o in candidates if o is not a]
        if not others:
            return None
        b = self._rand_elem(others)
        if self.task == "put_next":
            return PutNextInstr(_desc(a), _desc(b))
        second = GoToInstr(_desc(b)) if self.task == "pick_up_seq_go_to" else PickupInstr(_desc(b))
        if self._rand_bool():
            return BeforeInstr(PickupInstr(_desc(a)), second)  # pick up A, then ... B
        return AfterInstr(second, PickupInstr(_desc(a)))  # ... B after you pick up A


def _desc(obj: WorldObj) -> ObjDesc:
    return ObjDesc(obj.type, obj.color)


class MixedTrainLocal(_MixedLocal):
    """
    ## Description

    GLAM's training level. Each episode draws one task kind from the seeded RNG:
    go to an object, pick up an object, open a locked door, put an object next to
    another, or pick up A then go to B (in either word order). go_to / pick_up place
    9 objects in one 8x8 room, put_next and the sequence 10; open builds two rooms
    side by side with a locked door (yellow, green, blue or purple) between them, its
    key and 8 distractors in the agent's room. All objects are reachable.
    No mission mentions a yellow box, red key, red door, green ball or grey door.

    ## Mission Space

    "go to {the|a} {color} {type}", "pick up {the|a} {color} {type}",
    "open the door", "open the {color} door",
    "put {the|a} {color} {type} next to {the|a} {color} {type}",
    "pick up ..., then go to ...", "go to ... after you pick up ..."

    ## Action Space

    minigrid's 7 actions (BabyAI-Text uses the first 6: no `done`).

    ## Observation Encoding

    minigrid's dict: 7x7x3 egocentric "image", "direction", "mission".

    ## Rewards

    `1 - 0.9 * (step_count / max_steps)` on success, 0 otherwise.

    ## Termination

    Success, or a failed sequence (wrong order); truncation at max_steps
    (64 per navigation per room: 64 for go_to / pick_up, 128 for the others).

    ## Registered Configurations

    - `BabyAI-MixedTrainLocal-v0`
    - `BabyAI-PickUpSeqGoToLocal-v0` (task="pick_up_seq_go_to")

    `task=` restricts the level to one kind.
    """

    tasks = TRAIN_TASKS
    held_out = False


class MixedTestLocal(_MixedLocal):
    """
    ## Description

    GLAM's test level: the tasks of `MixedTrainLocal` plus the unseen composition
    "pick up A then pick up B" (absent from GLAM's released code), where every object
    a mission names is one of the held-out pairs: yellow box, red key, green ball, and
    for open a red or grey door (always named by colour).

    ## Mission Space

    As `MixedTrainLocal`, plus "pick up ..., then pick up ..." and
    "pick up ... after you pick up ...".

    ## Action Space

    minigrid's 7 actions (BabyAI-Text uses the first 6: no `done`).

    ## Observation Encoding

    minigrid's dict: 7x7x3 egocentric "image", "direction", "mission".

    ## Rewards

    `1 - 0.9 * (step_count / max_steps)` on success, 0 otherwise.

    ## Termination

    Success, or a failed sequence; truncation at max_steps.

    ## Registered Configurations

    - `BabyAI-MixedTestLocal-v0`
    - `BabyAI-PickUpSeqPickUpLocal-v0` (task="pick_up_seq_pick_up")
    """

    tasks = TEST_TASKS
    held_out = True
