"""Does a trained LLM policy read where its goal is? pi(a | prompt) on the BabyAI bot's own frames, by where the
mission's goal object is.

    python -m benchmarks.bot_agreement runs/goto_local_cpu                 # 200 bot episodes of the run's level
    python -m benchmarks.bot_agreement runs/goto_local_cpu --start         # the same run before training
    python -m benchmarks.bot_agreement runs/goto_local_cpu --episodes 500 --num-envs 16

The bot plays `--episodes` episodes of the run's level from the run's evaluation seeds (episodes it never trained
on). Each of its decisions becomes the prompt the run's policy would read there (its history length and action
names), and the policy scores every action on it, without acting. The frames are grouped by where the goal is
for the agent, from the env's state: straight ahead (the goal in view, in the agent's column), ahead to one side,
on the left or on the right (level with the agent: a turn that way is due), out of view, or no single goal object
(missions with two objects, sequences). Per group the table gives the bot's actions, the policy's mean probability of each
action, how often the policy's most likely action is the bot's, and its mean probability of the bot's action.

A policy that has grounded the mission goes forward where the goal is straight ahead and turns towards it where it
is beside: its probabilities move with the group as the bot's actions do. One that has learnt a walk that does
not depend on the words (turn one way, go forward) keeps the same probabilities in every group. The success rate
does not tell the two apart on a small room, where a walk finds the goal in time.

--start scores the run's starting model instead: its config's pretrained weights (or its agent.init_from),
untrained by this run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import SyncVectorEnv
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX

from glamrl.agents.factory import make_agent, make_model, read_run, restore_model
from glamrl.api import Policy
from glamrl.config import AgentConfig, TrainConfig
from glamrl.demos import record_demos
from glamrl.errors import GlamrlError

SITUATIONS = ("goal straight ahead", "goal ahead to one side", "goal on the left", "goal on the right",
              "goal out of view", "no single goal object")
"""Where the mission's goal is for the agent (`situation`), in the table's order."""

SCORE_BATCH = 32
"""Prompts the policy scores at once."""


def situation(env: Any, image: np.ndarray) -> str:
    """Where the goal object of `env`'s mission is for its agent (one of `SITUATIONS`), as the agent's view `image`
    (view, view, 3: minigrid's encoding, cells behind walls blank) shows it. Of several objects that fit the
    mission (go to a red ball), the nearest one in view in steps counts."""
    u = env.unwrapped
    desc = getattr(u.instrs, "desc", None)  # go to, pick up, open: one described object; put next to, sequences: none
    if desc is None:
        return SITUATIONS[5]
    view = image.shape[0]
    nearest = None  # (steps, lateral, forward) of the nearest goal object in view
    for pos in desc.obj_poss:
        obj = u.grid.get(*pos)
        cell = u.relative_coords(*pos)
        if obj is None or cell is None:  # picked up, or outside the view's square
            continue
        vx, vy = cell
        if tuple(image[vx, vy, :2]) != (OBJECT_TO_IDX[obj.type], COLOR_TO_IDX[obj.color]):  # hidden behind a wall
            continue
        lateral, forward = vx - view // 2, view - 1 - vy  # right of the agent, ahead of it, in cells
        candidate = (abs(lateral) + forward, lateral, forward)
        nearest = candidate if nearest is None else min(nearest, candidate)
    if nearest is None:
        return SITUATIONS[4]
    _, lateral, forward = nearest
    if lateral == 0:
        return SITUATIONS[0]
    return SITUATIONS[1] if forward > 0 else SITUATIONS[2] if lateral < 0 else SITUATIONS[3]


def bot_frames(cfg: TrainConfig, episodes: int, num_envs: int) -> list[dict[str, Any]]:
    """The bot's decisions in `episodes` episodes of `cfg`'s level (its evaluation seeds, on `num_envs` envs) as
    demonstration records (`glamrl.demos`) in the prompts of `cfg`'s policy, each with its `situation`."""
    env = dataclasses.replace(cfg.env, num_envs=num_envs)
    envs: SyncVectorEnv = env.make_vector_env()
    bot = make_agent(dataclasses.replace(cfg, agent=AgentConfig(kind="bot")), None, envs)
    try:
        records, _ = record_demos(envs, bot, episodes, env.eval_seed, cfg.prompt.actions, cfg.prompt.nbr_obs,
                                  env.language, annotate=lambda i, obs: {
                                      "situation": situation(envs.envs[i], obs["image"][i])})
    finally:
        envs.close()
    return records


def add_frame_arguments(parser: argparse.ArgumentParser, episodes: int) -> None:
    """--episodes (default `episodes`) and --num-envs: how many bot episodes `bot_frames` records, on how many envs."""
    parser.add_argument("--episodes", type=int, default=episodes, help="bot episodes")
    parser.add_argument("--num-envs", type=int, default=None, help="envs the bot plays on (default: the config's)")


def check_frame_arguments(args: argparse.Namespace) -> None:
    """Refuse an --episodes or --num-envs below 1 (a GlamrlError)."""
    for flag, value in (("--episodes", args.episodes), ("--num-envs", args.num_envs)):
        if value is not None and value < 1:
            raise GlamrlError(f"{flag} {value}: give an integer >= 1")


def action_probs(policy: Policy, prompts: Sequence[str]) -> np.ndarray:
    """pi(a | prompt) of each prompt over the run's actions, (len(prompts), A)."""
    return np.concatenate([policy.scores(prompts[i:i + SCORE_BATCH]).exp().numpy()
                           for i in range(0, len(prompts), SCORE_BATCH)])


def agreement(situations: Sequence[str], bot_actions: np.ndarray, probs: np.ndarray) -> list[dict[str, Any]]:
    """Per situation seen (`SITUATIONS`' order), then over all frames ("all"): frames, the bot's action shares (A,),
    the policy's mean probabilities (A,), the share of frames whose most likely action is the bot's, and the mean
    probability of the bot's action. `bot_actions` (n,) indexes `probs` (n, A)'s columns."""
    situations = np.asarray(situations)
    rows = []
    for name in [s for s in SITUATIONS if s in situations] + ["all"]:
        keep = np.ones(len(situations), bool) if name == "all" else situations == name
        a, p = bot_actions[keep], probs[keep]
        rows.append({"situation": name, "frames": int(keep.sum()),
                     "bot": np.bincount(a, minlength=probs.shape[1]) / len(a), "policy": p.mean(0),
                     "argmax_is_bot": float((p.argmax(1) == a).mean()), "p_bot": float(p[np.arange(len(a)), a].mean())})
    return rows


def report(run: Path, episodes: int, num_envs: int | None, start: bool) -> None:
    """Score `run`'s policy (its starting model with `start`) on the bot's frames and print the table."""
    if start:  # built as training built it before its first update (glamrl.agents.factory.restore_model)
        cfg, _ = read_run(run, kind="llm")
        torch.manual_seed(cfg.env.seed)
        model = make_model(cfg).eval()
    else:
        cfg, model, _ = restore_model(run, kind="llm")
    records = bot_frames(cfg, episodes, num_envs or cfg.env.num_envs)
    names = list(cfg.prompt.actions)
    probs = action_probs(Policy(cfg, model), [r["prompt"] for r in records])
    rows = agreement([r["situation"] for r in records], np.array([r["action_index"] for r in records]), probs)
    print(f"{run}{' before training' if start else ''} on {cfg.env.id}: {len(records)} decisions of the bot in "
          f"{episodes} episodes (evaluation seeds from {cfg.env.eval_seed})")
    print("each action: the policy's mean probability / the bot's share of the frames")
    print(f"{'where the goal is':24s} {'frames':>6s} " + " ".join(f"{n:>11s}" for n in names)
          + f" {'argmax=bot':>10s} {'pi(bot)':>7s}")
    for r in rows:
        print(f"{r['situation']:24s} {r['frames']:6d} " + " ".join(
            f"{p:>5.2f}/{b:<5.2f}" for p, b in zip(r["policy"], r["bot"]))
            + f" {r['argmax_is_bot']:10.3f} {r['p_bot']:7.3f}")


def main(argv: list[str] | None = None) -> int:
    """Print the table; bad input (a GlamrlError) prints one line and exits 2."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a trained llm run directory")
    add_frame_arguments(parser, episodes=200)
    parser.add_argument("--start", action="store_true", help="score the run's starting model, not its trained one")
    args = parser.parse_args(argv)
    try:
        check_frame_arguments(args)
        report(args.run, args.episodes, args.num_envs, args.start)
    except GlamrlError as err:
        print(f"bot_agreement: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
