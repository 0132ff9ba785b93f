"""The one place the suite, `play` and probes build agents from command-line arguments.

`agent_builder(args)` does all the slow and fallible work (loading a model or a run's
checkpoint) once, before any episode, and returns a label and a function that builds
the agent for one test's envs: the same policy, with the test's action names, language
and goal header. Replace this function to plug in another agent factory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gymnasium.vector import SyncVectorEnv

from glamrl.agents.base import Agent
from glamrl.envs.actions import ACTION_NAMES
from glamrl.eval.suite import AgentBuilder, SuiteTest

ZERO_SHOT_NBR_OBS = 3  # GLAM's prompt keeps three observations


def agent_builder(args: argparse.Namespace) -> tuple[str, AgentBuilder]:
    """(label, builder) for `args.agent` in bot, random, llm (`args.model`, or `args.run` a run dir)."""
    if args.agent == "random":
        from glamrl.agents.random import RandomAgent

        return "random", lambda envs, test: RandomAgent(envs.num_envs, seed=args.seed)
    if args.agent == "bot":
        from glamrl.agents.bot import BotAgent

        return "bot", lambda envs, test: BotAgent(envs)

    from glamrl.agents.llm import LLMAgent

    policy, own_actions, nbr_obs, label = _load_policy(args)

    def build(envs: SyncVectorEnv, test: SuiteTest) -> Agent:
        return LLMAgent(policy, envs.num_envs, test.action_names(own_actions), nbr_obs, test.language,
                        args.greedy, goal_header=test.goal_header)

    return label, build


def _load_policy(args: argparse.Namespace):
    """(policy, its own action names, observations kept in the prompt, label) of a zero-shot model or a run."""
    from glamrl.config import ModelConfig
    from glamrl.llm.policy import LLMPolicy

    if args.run is None:
        policy = LLMPolicy(ModelConfig(name=args.model, dtype=args.dtype, device=args.device), ACTION_NAMES)
        return policy, ACTION_NAMES, ZERO_SHOT_NBR_OBS, f"llm {Path(args.model).name} zero-shot"
    from glamrl.export import load_run_policy

    run = load_run_policy(args.run)
    policy, cfg = run.policy, run.config
    return policy, tuple(cfg.prompt.actions), cfg.prompt.nbr_obs, f"run {run_label(args.run)}"


def run_label(run_dir: Path) -> str:
    """A run's name without its seed suffix, so that seeds of one experiment share a label."""
    name = Path(run_dir).resolve().name
    head, sep, tail = name.rpartition("-seed")
    return head if sep and tail.isdigit() else name
