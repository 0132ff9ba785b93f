"""The Mixed levels: registry, exclusions, per-episode task draw, geometry, reproducibility."""

from collections import Counter

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from minigrid.envs.babyai.core.verifier import ObjDesc

from glamrl.envs import LEVEL_IDS, make_env
from glamrl.envs.levels import (
    HELD_OUT_PAIRS,
    TEST_TASKS,
    TRAIN_TASKS,
    MixedTestLocal,
    MixedTrainLocal,
    UnknownTaskError,
)

NUM_SEEDS = 1000
HELD_OUT_TEXT = ("yellow box", "red key", "red door", "green ball", "grey door")


def descs(instr) -> list[ObjDesc]:
    """Every object description in an instruction tree."""
    if hasattr(instr, "instr_a"):
        return descs(instr.instr_a) + descs(instr.instr_b)
    if hasattr(instr, "desc_move"):
        return [instr.desc_move, instr.desc_fixed]
    return [instr.desc]


def objects(level) -> list:
    return [c for c in level.grid.grid if c is not None and c.type != "wall"]


@pytest.fixture(scope="module")
def episodes():
    """(task, mission, description tuples) of NUM_SEEDS resets of each Mixed level."""
    out = {}
    for cls in (MixedTrainLocal, MixedTestLocal):
        level = cls()
        rows = []
        for seed in range(NUM_SEEDS):
            level.reset(seed=seed)
            rows.append((level.task, level.mission, [(d.type, d.color) for d in descs(level.instrs)]))
        out[cls] = rows
    return out


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
@pytest.mark.parametrize("env_id", sorted(LEVEL_IDS))
def test_check_env_on_every_registered_id(env_id):
    # a step budget above 1: the checker refuses an env that truncates after its first step
    check_env(gym.make(env_id, max_steps=100).unwrapped, skip_render_check=True)
    check_env(make_env(env_id, max_steps=100), skip_render_check=True)


def test_train_missions_never_mention_a_held_out_pair(episodes):
    for task, mission, pairs in episodes[MixedTrainLocal]:
        assert not any(text in mission for text in HELD_OUT_TEXT), mission
        assert not HELD_OUT_PAIRS.intersection(pairs), mission


def test_test_missions_are_made_of_held_out_pairs(episodes):
    for task, mission, pairs in episodes[MixedTestLocal]:
        assert any(text in mission for text in HELD_OUT_TEXT), mission
        assert set(pairs) <= HELD_OUT_PAIRS, mission


def test_task_drawn_per_episode_covers_every_kind(episodes):
    train = Counter(task for task, _, _ in episodes[MixedTrainLocal])
    test = Counter(task for task, _, _ in episodes[MixedTestLocal])
    assert set(train) == set(TRAIN_TASKS) and "pick_up_seq_pick_up" not in train
    assert set(test) == set(TEST_TASKS)
    for counts, kinds in ((train, TRAIN_TASKS), (test, TEST_TASKS)):
        assert min(counts.values()) > 0.6 * NUM_SEEDS / len(kinds)  # roughly uniform


def test_missions_match_their_task(episodes):
    starts = {
        "go_to": ("go to ",), "pick_up": ("pick up ",), "open": ("open the ",), "put_next": ("put ",),
        "pick_up_seq_go_to": ("pick up ", "go to "), "pick_up_seq_pick_up": ("pick up ",),
    }
    for rows in episodes.values():
        for task, mission, _ in rows:
            assert mission.startswith(starts[task]), (task, mission)
            if task.startswith("pick_up_seq"):
                assert ", then " in mission or " after you " in mission
    open_missions = {m for t, m, _ in episodes[MixedTrainLocal] if t == "open"}
    assert "open the door" in open_missions and any(m != "open the door" for m in open_missions)


@pytest.mark.parametrize("task, num_objects", [
    ("go_to", 9), ("pick_up", 9), ("put_next", 10), ("pick_up_seq_go_to", 10), ("open", 10),
])
def test_object_counts_and_room_geometry(task, num_objects):
    level = MixedTrainLocal(task=task)
    for seed in range(20):
        level.reset(seed=seed)
        assert len(objects(level)) == num_objects  # open: 8 distractors, the key and the locked door
        assert level.width == (15 if task == "open" else 8) and level.height == 8
        assert level.max_steps == 64 * (1 if task in ("go_to", "pick_up") else 2)


def test_open_task_locks_the_agent_out():
    for cls, colors in ((MixedTrainLocal, {"yellow", "green", "blue", "purple"}), (MixedTestLocal, {"red", "grey"})):
        level = cls(task="open")
        for seed in range(30):
            level.reset(seed=seed)
            (door,) = [o for o in objects(level) if o.type == "door"]
            assert door.is_locked and door.color in colors and door.cur_pos[0] == 7
            assert any(o.type == "key" and o.color == door.color for o in objects(level))
            locked_side = 0 if level.room_from_pos(*level.agent_pos).top[0] == 7 else 1
            assert all((o.cur_pos[0] < 7) == (locked_side == 1) for o in objects(level) if o is not door)


def test_same_seed_same_episode():
    a, b = make_env("BabyAI-MixedTestLocal-v0"), make_env("BabyAI-MixedTestLocal-v0")
    b.reset(seed=123)
    for seed in (7, 8, 7):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, info_b = b.reset(seed=seed)
        assert obs_a["mission"] == obs_b["mission"] and info_a["task"] == info_b["task"]
        assert obs_a["descriptions"] == obs_b["descriptions"]
        assert (obs_a["image"] == obs_b["image"]).all()
        for action in (2, 0, 2, 1, 3):
            obs_a, *_ = a.step(action)
            obs_b, *_ = b.step(action)
            assert obs_a["descriptions"] == obs_b["descriptions"]


def test_task_restriction():
    level = MixedTestLocal(task="pick_up_seq_pick_up")
    for seed in range(10):
        level.reset(seed=seed)
        assert level.task == "pick_up_seq_pick_up" and level.mission.count("pick up") == 2
    with pytest.raises(UnknownTaskError, match="pick_up_seq_pick_up"):
        MixedTrainLocal(task="pick_up_seq_pick_up")
    with pytest.raises(UnknownTaskError):
        make_env("BabyAI-GoToLocal-v0", task="go_to")


def test_rejections_are_not_printed(capsys):
    level = MixedTrainLocal(task="put_next")
    for seed in range(100):
        level.reset(seed=seed)
    env = make_env("BabyAI-PutNextLocal-v0")
    for seed in range(30):
        env.reset(seed=seed)
    print("other output")
    assert capsys.readouterr().out == "other output\n"
