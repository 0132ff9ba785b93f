"""The agents that `glamrl eval`, `eval --suite`, `play` and `demos` run, built through the agent factory.

`load_eval_model(args)` does the slow and fallible work once, before any episode: it
reads a run (`--run`, any agent kind), or describes a fresh agent (`--agent`: llm
zero-shot from `--model`, a `glamrl export` directory included; random; bot). Then
`agent_builder(args)` returns a label and a function that builds the agent for one
suite test's envs: the same network, with the test's action names, language and goal
header.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from gymnasium.vector import SyncVectorEnv
from torch import nn

from glamrl.agents.base import Agent
from glamrl.agents.factory import AgentKindError, make_agent, make_model, restore_model
from glamrl.config import AgentConfig, EnvConfig, ModelConfig, PromptConfig, TrainConfig
from glamrl.envs.actions import action_names
from glamrl.eval.suite import AgentBuilder, SuiteTest

ZERO_SHOT_NBR_OBS = 3  # GLAM's prompt keeps three observations


def load_eval_model(args: argparse.Namespace) -> tuple[TrainConfig, nn.Module | None, str]:
    """(config, network or None, label) of the agent that `args` names; `args.agent` is set to its kind."""
    if getattr(args, "run", None) is not None:
        cfg, model, _ = restore_model(args.run, kind=args.agent)
        args.agent = cfg.agent.kind
        return cfg, model, f"run {run_label(args.run)}"
    if args.agent is None:
        raise AgentKindError("give --agent (a fresh agent) or --run (a trained one)")
    if args.agent in ("drrn", "symbolic"):
        raise AgentKindError(f"a fresh {args.agent} agent is untrained: give --run with a trained {args.agent} run")
    language = getattr(args, "language", "en")
    prompt = PromptConfig(nbr_obs=ZERO_SHOT_NBR_OBS, actions=list(action_names(language)))
    model, label = ModelConfig(), args.agent
    if args.agent == "llm":
        from glamrl.llm.exported import read_manifest

        model = ModelConfig(name=args.model, dtype=args.dtype, device=args.device)
        label = f"llm {Path(args.model).name} zero-shot"
        exported = read_manifest(args.model)
        if exported is not None:  # a `glamrl export` directory: its actions and prompt settings
            prompt = PromptConfig(nbr_obs=exported.nbr_obs, actions=list(exported.action_names))
            model = dataclasses.replace(model, normalize_by_length=exported.normalize_by_length,
                                        use_action_heads=exported.use_action_heads)
            label = f"llm {Path(args.model).name}"
    cfg = TrainConfig(env=EnvConfig(seed=args.seed, language=language), prompt=prompt, model=model,
                      agent=AgentConfig(kind=args.agent))
    return cfg, make_model(cfg), label


def make_eval_agent(args: argparse.Namespace, envs: SyncVectorEnv) -> Agent:
    """The agent `glamrl eval` (one level) and `glamrl demos` run in `envs`."""
    cfg, model, _ = load_eval_model(args)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, language=args.language, seed=args.seed))
    return make_agent(cfg, model, envs, greedy=args.greedy)


def agent_builder(args: argparse.Namespace) -> tuple[str, AgentBuilder]:
    """(label, builder of the agent for one suite test's envs) for the agent `args` names."""
    cfg, model, label = load_eval_model(args)
    greedy = getattr(args, "greedy", False)

    def build(envs: SyncVectorEnv, test: SuiteTest) -> Agent:
        """The agent reading the test's language, words, action names and goal header (text agents)."""
        return make_agent(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, language=test.language)),
                          model, envs, greedy, action_names=test.action_names(cfg.prompt.actions),
                          goal_header=test.goal_header)

    return label, build


def run_label(run_dir: Path) -> str:
    """A run's name without its seed suffix, so that seeds of one experiment share a label."""
    name = Path(run_dir).resolve().name
    head, sep, tail = name.rpartition("-seed")
    return head if sep and tail.isdigit() else name
