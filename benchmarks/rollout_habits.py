"""Where an agent's steps go: habits of its own episodes, read from `glamrl demos` records.

    glamrl demos --run RUN --episodes 64 --num-envs 16 --out runs/rollouts.jsonl     # the policy's own play
    glamrl demos --agent bot --env BabyAI-GoToLocal-v0 --episodes 64 --out runs/bot.jsonl
    python -m benchmarks.rollout_habits runs/rollouts.jsonl runs/bot.jsonl

Per file, over consecutive decisions of each episode: how often the action repeats the one before, how often a
turn undoes the turn before (turn left then turn right, or the reverse: a step that leaves the agent where it
was two steps earlier), and how often pick up follows pick up. Of the turns undone, how many were made with the
goal in view (a "go to" mission's object named in the latest observation of either decision): a loop made in
sight of the goal misreads where it is, one made out of view is a search. Of the decisions whose prompt's latest
observation has a wall or an object in the cell ahead ("... 1 step forward," alone: not a door), how often the
agent goes forward there (a step that moves nothing: the cell is taken); on a GoTo level the goal is never in the
cell ahead at a decision (facing it ends the episode), so going forward there is always blocked. Of the
decisions with the goal straight ahead ("N steps forward", no side) and the cell ahead free, how often the agent
goes forward (the bot always does). The same for the failed episodes alone, where a policy that loops shows it.

A policy that reads one observation cannot tell a turn it just made from a first visit, so its reversals are
loops that only sampling breaks; the BabyAI bot makes almost none.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from glamrl.demos import DemoFileError, read_demos
from glamrl.envs.actions import ACTION_NAMES

HABITS = ("repeat", "reversal", "reversal_in_view", "pick_up_repeat", "cell_ahead_taken", "forward_blocked",
          "forward_to_goal")
"""The shares `habits` returns, in the table's order."""

OPPOSITE_TURN = {"turn left": "turn right", "turn right": "turn left"}

CELL_AHEAD_TAKEN = re.compile(r"You see an? (wall|\w+ (ball|box|key)) 1 step forward,")
"""A wall or an object in the cell ahead, as the latest observation of a GLAM prompt says it."""


GO_TO_GOAL = re.compile(r"Goal of the agent: go to (?:the|a) ((?:\w+ )?(?:ball|box|key|door)) \n")
"""The object of a GoTo mission ("go to the red ball", "go to a key"), as a GLAM prompt states it."""


def latest_observation(prompt: str) -> str:
    """The last "Observation k:" of a GLAM prompt (the one the agent acts on)."""
    return prompt.rsplit("Observation", 1)[-1]


def goal_place(prompt: str) -> str | None:
    """Where the latest observation places the GoTo mission's object ("2 steps right and 1 step forward"; the first
    one named, for "go to a key"): "" out of view, None where the mission is not "go to"."""
    goal = GO_TO_GOAL.search(prompt)
    if goal is None:
        return None
    seen = re.search(rf"You see an? (?:\w+ )?{goal.group(1)} ([^,]*),", latest_observation(prompt))
    return seen.group(1) if seen else ""


def straight_ahead(place: str | None) -> bool:
    """A `goal_place` on the agent's line of sight."""
    return bool(place) and "left" not in place and "right" not in place


def episodes(records: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """`glamrl demos` records grouped by episode, each in step order."""
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[record["episode"]].append(record)
    return [sorted(steps, key=lambda r: r["step"]) for _, steps in sorted(grouped.items())]


def habits(played: list[list[dict[str, Any]]]) -> dict[str, float]:
    """The habits of `episodes(...)` as shares (nan where nothing is counted): repeats, reversals and pick-up
    repeats among pairs of consecutive actions, reversals with the goal in view among the reversals of "go to"
    missions, blocked forward steps among decisions with the cell ahead taken, forward steps among decisions with
    the goal straight ahead and the cell ahead free."""
    pairs = repeats = reversals = go_to_reversals = in_view = pickups = taken = blocked = ahead = to_goal = 0
    for steps in played:
        actions = [r["action"] for r in steps]
        places = [goal_place(r["prompt"]) for r in steps]
        for i, (before, after) in enumerate(zip(actions, actions[1:])):
            pairs += 1
            repeats += before == after
            pickups += before == after == "pick up"
            if OPPOSITE_TURN.get(before) == after:
                reversals += 1
                go_to_reversals += None not in places[i:i + 2]
                in_view += None not in places[i:i + 2] and any(places[i:i + 2])
        for record, action, place in zip(steps, actions, places):
            if CELL_AHEAD_TAKEN.search(latest_observation(record["prompt"])):
                taken += 1
                blocked += action == "go forward"
            elif straight_ahead(place):
                ahead += 1
                to_goal += action == "go forward"
    steps = sum(len(s) for s in played)
    return {"episodes": len(played), "steps": steps, "repeat": share(repeats, pairs),
            "reversal": share(reversals, pairs), "reversal_in_view": share(in_view, go_to_reversals),
            "pick_up_repeat": share(pickups, pairs),
            "cell_ahead_taken": share(taken, steps),
            "forward_blocked": share(blocked, taken), "forward_to_goal": share(to_goal, ahead)}


def share(part: int, whole: int) -> float:
    return part / whole if whole else float("nan")


def report(path: Path) -> list[str]:
    """The table's rows for a records file: all its episodes, then its failed ones where there are any."""
    played = episodes(read_demos(path, ACTION_NAMES))
    failed = [steps for steps in played if not steps[0]["success"]]
    rows = []
    for label, group, success in (("all", played, f"{1 - share(len(failed), len(played)):.3f}"),
                                  ("failed", failed, "0")):
        if group:
            h = habits(group)
            cells = [success, f"{h['steps'] / h['episodes']:.1f}", *(f"{h[key]:.3f}" for key in HABITS)]
            rows.append(f"| {path.name} | {label} | {h['episodes']} | {' | '.join(cells)} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("records", nargs="+", type=Path, help="JSONL files written by glamrl demos")
    args = parser.parse_args(argv)
    if missing := [str(path) for path in args.records if not path.is_file()]:
        parser.error(f"no such records file: {', '.join(missing)}")
    print("| records | episodes | n | success | steps | repeat | turn reversal | of which goal in view "
          "| pick-up repeat | cell ahead taken | forward there | goal straight ahead: forward |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in args.records:
        try:
            print("\n".join(report(path)))
        except DemoFileError as error:
            parser.error(str(error))


if __name__ == "__main__":
    main()
