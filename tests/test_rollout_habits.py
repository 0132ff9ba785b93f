"""benchmarks/rollout_habits.py: the habits of hand-made episodes, counted by hand."""

import json

import pytest

from benchmarks.rollout_habits import episodes, goal_place, habits, main
from glamrl.envs.actions import ACTION_NAMES

PROMPT = ("Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \n "
          "Goal of the agent: go to the red ball \n Observation 0: {first} \n Action 0: turn left \n "
          "Observation 1: {latest} \n Action 1: ")


def record(episode, step, action, latest, success, first="You see a wall 1 step forward,"):
    return {"prompt": PROMPT.format(first=first, latest=latest), "action": action,
            "action_index": ACTION_NAMES.index(action), "episode": episode, "step": step, "success": success}


FREE = "You see a wall 3 steps forward, You see a red key 1 step left and 1 step forward,"
RECORDS = [  # out of step order, as files need not be sorted
    record(0, 1, "turn right", FREE, False),
    record(0, 0, "turn left", "You see a wall 1 step forward,", False, first=FREE),
    record(0, 2, "turn right", "You see a grey box 1 step forward,", False),
    record(0, 3, "go forward", "You see a grey box 1 step forward,", False),
    record(1, 0, "pick up", "You see a closed red door 1 step forward,", True),
    record(1, 1, "pick up", FREE, True),
    record(1, 2, "go forward", "You see a red ball 2 steps forward,", True),
]


def test_habits_counted_by_hand():
    played = episodes(RECORDS)
    assert [[r["action"] for r in steps] for steps in played] == [
        ["turn left", "turn right", "turn right", "go forward"], ["pick up", "pick up", "go forward"]]
    h = habits(played)
    # 5 consecutive pairs: L-R (reversal), R-R (repeat), R-F, P-P (repeat, pick-up repeat), P-F
    assert h["episodes"] == 2 and h["steps"] == 7
    assert h["repeat"] == pytest.approx(2 / 5) and h["reversal"] == pytest.approx(1 / 5)
    assert h["pick_up_repeat"] == pytest.approx(1 / 5)
    # the latest observation alone counts (episode 0's step 1 has a wall ahead in its first one), a door does not:
    # a wall at step 0, the box at steps 2 and 3; forward there once
    assert h["cell_ahead_taken"] == pytest.approx(3 / 7) and h["forward_blocked"] == pytest.approx(1 / 3)
    empty = habits([])
    assert empty["episodes"] == 0 and all(empty[k] != empty[k] for k in ("repeat", "forward_blocked"))  # nan


def test_the_goal_in_sight_counted_by_hand():
    ball = "You see a wall 2 steps left, You see a red ball 3 steps forward,"
    key = "You see a red key 2 steps right,"
    pick_up = record(2, 0, "turn left", ball, False)
    pick_up["prompt"] = pick_up["prompt"].replace("go to the red ball", "pick up the red ball")
    played = episodes([
        record(0, 0, "turn left", key, False), record(0, 1, "turn right", ball, False),  # the ball seen second
        record(1, 0, "turn right", key, False), record(1, 1, "turn left", FREE, False),  # no ball: a search
        record(1, 2, "go forward", ball, False),
        record(1, 3, "turn left", "You see a grey box 1 step forward, You see a red ball 3 steps forward,", False),
        pick_up, {**pick_up, "step": 1, "action": "turn right"},  # not a GoTo mission: not counted
        record(3, 0, "go forward", "You see a red ball 1 step left and 2 steps forward,", False),  # to one side
    ])
    h = habits(played)
    assert h["reversal"] == pytest.approx(3 / 5)  # 5 pairs: L-R, R-L, L-F, F-L, L-R
    assert h["reversal_in_view"] == pytest.approx(1 / 2)  # of the two GoTo reversals, episode 0's
    assert habits([played[1]])["reversal_in_view"] == 0 and habits([played[2]])["reversal_in_view"] != 0.0  # nan
    # the ball straight ahead with the cell ahead free: episode 0's step 1 (turned) and episode 1's step 2 (forward);
    # not behind the box, not to one side, not in a pick-up mission
    assert h["forward_to_goal"] == pytest.approx(1 / 2)
    assert goal_place(played[3][0]["prompt"]) == "1 step left and 2 steps forward"
    assert goal_place(played[0][0]["prompt"]) == "" and goal_place(pick_up["prompt"]) is None


def test_main_prints_all_and_failed_rows_and_refuses_a_missing_file(tmp_path, capsys):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    main([str(path)])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| rollouts")]
    assert rows == ["| rollouts.jsonl | all | 2 | 0.500 | 3.5 | 0.400 | 0.200 | 0.000 | 0.200 | 0.429 | 0.333 | 1.000 |",
                    "| rollouts.jsonl | failed | 1 | 0 | 4.0 | 0.333 | 0.333 | 0.000 | 0.000 | 0.750 | 0.333 | nan |"]
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.jsonl")])
    assert "no such records file" in capsys.readouterr().err
