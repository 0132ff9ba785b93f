"""The one place agents are built: any kind, fresh from a config or restored from a run directory.

    model = make_model(cfg)                      # the trainable network of cfg.agent.kind (None: random, bot)
    source = init_source(cfg)                    # agent.init_from's checkpoint (None: none), read once
    model = start_model(cfg, source)             # a kind that trains, started from it (PPO takes its critic too)
    agent = make_agent(cfg, model, envs)         # the agent acting in `envs` with it
    cfg, model, state = restore_model(run_dir)   # a run's trained network, exactly as training left it
    agent, cfg = restore_agent(run_dir, envs)    # a run's trained agent, its kind read from its config.yaml

Training loops, `glamrl eval`, the evaluation suite, behavioural cloning and `glamrl export`
all go through here. What each kind builds is its entry in `glamrl.agents.registry`: a new agent kind
plugs in there, with no change here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch
from gymnasium.vector import SyncVectorEnv
from torch import nn

from glamrl.agents.base import Agent
from glamrl.agents.registry import AgentKindError, AgentRequest, agent_kind, kinds_where
from glamrl.config import TrainConfig
from glamrl.errors import GlamrlError
from glamrl.run.checkpoint import Checkpoint, CheckpointError, restoring
from glamrl.run.dir import RunDir


def read_run(run_dir: Path, kind: str | None = None) -> tuple[TrainConfig, Checkpoint]:
    """A run's config and last checkpoint; `kind`: the agent kind expected (another one is an AgentKindError)."""
    run = RunDir(run_dir)
    cfg = run.read_config()
    if cfg is None:
        raise CheckpointError(f"{run_dir} is not a glamrl run directory (no {run.config.name}); "
                              f"give a directory written by glamrl train")
    if kind is not None and cfg.agent.kind != kind:
        raise AgentKindError(f"{run_dir} is a run of agent kind {cfg.agent.kind!r}, not {kind!r}")
    state = run.load_checkpoint()
    if state is None:
        raise CheckpointError(f"{run_dir} has no checkpoint (no {run.last_checkpoint}); "
                              f"train it first: glamrl train --run-dir {run_dir}")
    return cfg, state


def restore_model(run_dir: Path, kind: str | None = None,
                  device: str | None = None) -> tuple[TrainConfig, nn.Module, Checkpoint]:
    """A run's config, its trained network exactly as training left it (in eval mode), and its checkpoint.

    `device` overrides the run's model.device (llm runs).
    """
    cfg, state = read_run(run_dir, kind)
    if not agent_kind(cfg.agent.kind).trains:
        raise AgentKindError(f"{run_dir} holds a {cfg.agent.kind!r} agent, which has no weights to restore")
    model_cfg = dataclasses.replace(cfg.model, device=device) if device else cfg.model
    cfg = dataclasses.replace(cfg, model=model_cfg, agent=dataclasses.replace(cfg.agent, init_from=None))
    torch.manual_seed(cfg.env.seed)  # untrained weights (tiny models, LoRA bases) drawn as training drew them
    model = make_model(cfg)
    run = RunDir(run_dir)
    with restoring(f"the checkpoint in {run.checkpoints}", state.config, cfg.to_dict(),
                   f"restore those values in {run.config}"):
        model.load_trainable_state_dict(state.policy)
    return cfg, model.eval(), state


def make_model(cfg: TrainConfig, load_init: bool = True) -> nn.Module | None:
    """The trainable network of `cfg.agent.kind`, started from `cfg.agent.init_from` if given; None: nothing to train.

    `load_init=False` leaves `agent.init_from` unread: a resumed run's own checkpoint holds its weights.
    """
    if not agent_kind(cfg.agent.kind).trains:
        return None
    return start_model(cfg, init_source(cfg) if load_init else None)


def init_source(cfg: TrainConfig) -> Checkpoint | None:
    """The last checkpoint of the run `cfg.agent.init_from` (None without one), of this run's agent kind; a run it
    cannot start from is refused in one line that names the field."""
    if not cfg.agent.init_from:
        return None
    try:
        _, state = read_run(Path(cfg.agent.init_from), agent_kind(cfg.agent.kind).name)
    except GlamrlError as err:  # its kind, same message, naming the field that led there
        raise type(err)(f"agent.init_from={cfg.agent.init_from} cannot start this run: {err}") from None
    return state


def start_model(cfg: TrainConfig, source: Checkpoint | None) -> nn.Module:
    """The network of `cfg.agent.kind`, a kind that trains, started from `source`, the checkpoint of
    `agent.init_from` (`init_source`), or freshly built where `source` is None."""
    model = agent_kind(cfg.agent.kind).build_model(cfg)
    if source is not None:
        with restoring(f"agent.init_from={cfg.agent.init_from}", source.config, cfg.to_dict(),
                       "give this run the values of that run, or train it from scratch without agent.init_from"):
            model.load_trainable_state_dict(initial_state(model, source))
    return model


def inherited_critic(source: Checkpoint | None) -> dict[str, object] | None:
    """What `source`, the checkpoint of `agent.init_from` (`init_source`), keeps beside a trained value head, its
    `extra` entries (the value statistics of ppo.value_norm), when its run trained one: a PPO run did, a clone did
    not (glamrl bc trains none). None: no trained critic to inherit (or no source)."""
    return None if source is None or source.trainer == "bc" else source.extra


VALUE_HEAD = "value_head."
"""The prefix of an LLM policy's value head parameters in its trainable state."""


def initial_state(model: nn.Module, state: Checkpoint) -> dict[str, torch.Tensor]:
    """The trainable state that `agent.init_from`'s checkpoint `state` gives `model`: all of it, except that a clone's
    value head, which BC does not train, is left at `model`'s own initialisation where the two heads' shapes differ
    (this run's critic reads other inputs, `model.critic_reads_step`). Any other difference is left for the load
    to refuse."""
    if state.trainer != "bc":
        return state.policy
    own = model.trainable_state_dict()
    head = [name for name in state.policy if name.startswith(VALUE_HEAD)]
    if all(name in own and own[name].shape == state.policy[name].shape for name in head):
        return state.policy
    return {**{k: v for k, v in state.policy.items() if not k.startswith(VALUE_HEAD)},
            **{k: v for k, v in own.items() if k.startswith(VALUE_HEAD)}}


def make_agent(cfg: TrainConfig, model: nn.Module | None, envs: SyncVectorEnv, greedy: bool = False,
               action_names: Sequence[str] | None = None, goal_header: str | None = None,
               temperature: float = 1.0) -> Agent:
    """The agent of `cfg.agent.kind` acting in `envs` with `model` (from `make_model`); `greedy`: argmax actions;
    `temperature`: sampling from the policy sharpened (below 1) or flattened, for the kinds that draw from one
    (`AgentKind.tempers`; another kind is an `AgentKindError`).

    Agents that read text (llm, drrn) list `action_names` in their prompts and score or encode
    exactly those names (default `cfg.prompt.actions`); `goal_header` replaces the prompt's
    "Goal of the agent" before its colon (None keeps it). The suite's tests change both.
    """
    names = tuple(cfg.prompt.actions if action_names is None else action_names)
    kind = agent_kind(cfg.agent.kind)
    if temperature != 1.0 and not kind.tempers:
        raise AgentKindError(f"a temperature applies to agents that sample from a policy "
                             f"({', '.join(kinds_where(lambda k: k.tempers))}), not to {kind.name}")
    return kind.build_agent(AgentRequest(cfg, model, envs, names, greedy=greedy, temperature=temperature,
                                           goal_header=goal_header))


def restore_agent(run_dir: Path, envs: SyncVectorEnv, language: str | None = None, greedy: bool = False,
                  kind: str | None = None) -> tuple[Agent, TrainConfig]:
    """The trained agent of `run_dir` acting in `envs` (observations in `language`, default the run's).

    `kind`: the agent kind the caller expects; a run of another kind is an `AgentKindError`.
    """
    cfg, model, _ = restore_model(run_dir, kind)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, language=language or cfg.env.language))
    return make_agent(cfg, model, envs, greedy), cfg
