"""The one place agents are built: any kind, fresh from a config or restored from a run directory.

    model = make_model(cfg)                      # the trainable network of cfg.agent.kind (None: random, bot)
    agent = make_agent(cfg, model, envs)         # the agent acting in `envs` with it
    agent, cfg = restore_agent(run_dir, envs)    # a run's trained agent, its kind read from its config.yaml

Training loops, `glamrl eval` and behavioural cloning all go through here; a new agent
kind plugs in by adding a branch to `make_model` and `make_agent`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml
from gymnasium.vector import SyncVectorEnv
from torch import nn

from glamrl.agents.base import Agent
from glamrl.checkpoint import CheckpointError, load_checkpoint
from glamrl.config import AGENT_KINDS, ConfigError, TrainConfig, from_dict
from glamrl.errors import GlamrlError
from glamrl.rundir import CONFIG_FILE

TRAINABLE_KINDS = ("llm", "drrn", "symbolic")


class AgentKindError(GlamrlError, ValueError):
    """An agent kind that does not fit: unknown, untrainable, or not the kind of the run given."""


def read_run_config(run_dir: Path) -> TrainConfig:
    """RUN_DIR/config.yaml as a `TrainConfig` (runs saved before `agent.kind` existed read as llm)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a glamrl run directory (no {CONFIG_FILE})")
    return from_dict(TrainConfig, yaml.safe_load(path.read_text()) or {})


def read_run_weights(run_dir: Path, kind: str | None = None) -> tuple[TrainConfig, dict[str, Any]]:
    """A run's config and its trained weights (the last checkpoint's "policy"); `kind`: the kind expected."""
    cfg = read_run_config(run_dir)
    if kind is not None and cfg.agent.kind != kind:
        raise AgentKindError(f"{run_dir} is a run of agent kind {cfg.agent.kind!r}, not {kind!r}")
    state = load_checkpoint(run_dir)
    if state is None:
        raise CheckpointError(f"{run_dir} has no checkpoint yet: train it first")
    return cfg, state["policy"]


def make_model(cfg: TrainConfig) -> nn.Module | None:
    """The trainable network of `cfg.agent.kind`, started from `cfg.agent.init_from` if given; None: nothing to train."""
    kind = cfg.agent.kind
    if kind == "llm":
        from glamrl.llm.policy import LLMPolicy

        model = LLMPolicy(cfg.model, cfg.prompt.actions)
    elif kind == "drrn":
        from glamrl.agents.drrn import DRRNetwork

        model = DRRNetwork(cfg.drrn, cfg.prompt.actions)
    elif kind == "symbolic":
        from glamrl.agents.symbolic import ACModel

        model = ACModel(cfg.symbolic)
    elif kind in AGENT_KINDS:
        return None
    else:
        raise AgentKindError(f"unknown agent kind {kind!r}; known kinds: {', '.join(AGENT_KINDS)}")
    if cfg.agent.init_from:
        _, weights = read_run_weights(Path(cfg.agent.init_from), kind)
        model.load_trainable_state_dict(weights)
    return model


def make_agent(cfg: TrainConfig, model: nn.Module | None, envs: SyncVectorEnv, greedy: bool = False) -> Agent:
    """The agent of `cfg.agent.kind` acting in `envs` with `model` (from `make_model`); `greedy`: argmax actions."""
    kind, n = cfg.agent.kind, envs.num_envs
    if kind == "llm":
        from glamrl.agents.llm import LLMAgent

        return LLMAgent(model, n, cfg.prompt.nbr_obs, cfg.env.language, greedy)
    if kind == "drrn":
        from glamrl.agents.drrn import DRRNAgent

        epsilon = 0.0 if greedy else cfg.drrn.eval_epsilon  # the training loop sets its own schedule
        return DRRNAgent(model, n, cfg.prompt.nbr_obs, cfg.env.language, epsilon=epsilon, seed=cfg.env.seed)
    if kind == "symbolic":
        from glamrl.agents.symbolic import SymbolicAgent

        return SymbolicAgent(model, n, greedy)
    if kind == "random":
        from glamrl.agents.random import RandomAgent

        return RandomAgent(n, seed=cfg.env.seed)
    if kind == "bot":
        from glamrl.agents.bot import BotAgent

        return BotAgent(envs)
    raise AgentKindError(f"unknown agent kind {kind!r}; known kinds: {', '.join(AGENT_KINDS)}")


def restore_agent(run_dir: Path, envs: SyncVectorEnv, language: str | None = None, greedy: bool = False,
                  kind: str | None = None) -> tuple[Agent, TrainConfig]:
    """The trained agent of `run_dir` acting in `envs` (observations in `language`, default the run's).

    `kind`: the agent kind the caller expects; a run of another kind is an `AgentKindError`.
    """
    cfg, weights = read_run_weights(run_dir, kind)
    if cfg.agent.kind not in TRAINABLE_KINDS:
        raise AgentKindError(f"{run_dir} holds a {cfg.agent.kind!r} agent, which has no weights to restore")
    env = dataclasses.replace(cfg.env, language=language or cfg.env.language)
    cfg = dataclasses.replace(cfg, env=env, agent=dataclasses.replace(cfg.agent, init_from=None))
    model = make_model(cfg)
    model.load_trainable_state_dict(weights)
    return make_agent(cfg, model, envs, greedy), cfg
