"""The agents that `glamrl eval`, `eval --suite`, `play` and `demos` run, built through the agent factory.

An `AgentSpec` (built once by the CLI from its options) names the agent. `load_eval_model(spec)`
does the slow and fallible work once, before any episode: it reads a run (`run`, any agent kind),
or describes a fresh agent (`kind`: llm zero-shot from `model`, a `glamrl export` directory
included; random; bot). `eval_env` gives the env settings it is evaluated under (a run's own by
default), `make_agent` builds it for one level's envs, and `builder` (or `agent_builder`, which
loads the model too) returns a function that builds it for one suite test's envs: the same
network, with the test's action names, language and goal header.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from gymnasium.vector import SyncVectorEnv
from torch import nn

from glamrl.agents.base import Agent
from glamrl.agents.factory import make_agent, make_model, restore_model
from glamrl.agents.registry import AgentKindError, agent_kind, kinds_where
from glamrl.config import AgentConfig, EnvConfig, ModelConfig, PromptConfig, TrainConfig
from glamrl.envs.actions import action_names
from glamrl.eval.suite import AgentBuilder, SuiteTest
from glamrl.memory import bound_kernel_caches
from glamrl.run.checkpoint import Progress

ZERO_SHOT_NBR_OBS = 3  # GLAM's prompt keeps three observations


@dataclass(frozen=True)
class AgentSpec:
    """The agent a command runs: a trained one (`run`), or a fresh one (`kind`, with `model` for llm)."""

    kind: str | None = None
    """a kind that runs fresh (`AgentKind.runs_fresh`: llm, random, bot) for a fresh agent; with `run`, the kind
    the run must hold (None: the run's own)."""
    model: str = ModelConfig.name
    """llm: a model name or path (a `glamrl export` directory too)."""
    run: Path | None = None
    """a run directory whose trained agent (any kind) is run."""
    dtype: str = ModelConfig.dtype
    """llm: the storage dtype of a fresh model's weights."""
    device: str | None = None
    """llm: cpu, cuda, cuda:N or auto; None: a run's own model.device, auto for a fresh model."""
    greedy: bool = False
    """argmax actions instead of sampling."""
    temperature: float = 1.0
    """sample from the policy's probabilities at this temperature (`AgentRequest.temperature`)."""


def load_eval_model(spec: AgentSpec, seed: int = 1,
                    language: str | None = None) -> tuple[TrainConfig, nn.Module | None, str, Progress | None]:
    """(config, network or None, label, the run's checkpoint progress or None) of the agent `spec` names; its kind
    is `config.agent.kind`.

    A fresh agent's `config.env` is `EnvConfig`'s defaults with `seed` and `language` (default en), a run's is
    the run's own (`language` does not change it: see `eval_env`).

    The process's bf16 matmul kernels are capped as in training (`run.kernel_cache`: the run's, a fresh agent's
    default), before the agent's first matmul: a long evaluation meets as many prompt lengths as a run.
    """
    if spec.run is not None:
        cfg, model, state = restore_model(spec.run, kind=spec.kind, device=spec.device)  # loads; runs no bf16 matmul
        bound_kernel_caches(cfg.run.kernel_cache)
        return cfg, model, f"run {run_label(spec.run)}", state.progress
    language = language or EnvConfig.language
    if spec.kind is None:
        raise AgentKindError("give --agent (a fresh agent) or --run (a trained one)")
    if not agent_kind(spec.kind).runs_fresh:
        raise AgentKindError(f"a fresh {spec.kind} agent is untrained: give --run with a trained {spec.kind} run "
                             f"(fresh agents: {', '.join(kinds_where(lambda k: k.runs_fresh))})")
    prompt = PromptConfig(nbr_obs=ZERO_SHOT_NBR_OBS, actions=list(action_names(language)))
    model, label = ModelConfig(), spec.kind
    if spec.kind == "llm":
        from glamrl.llm.exported import read_manifest

        model = ModelConfig(name=spec.model, dtype=spec.dtype, device=spec.device or ModelConfig.device)
        label = f"llm {Path(spec.model).name} zero-shot"
        exported = read_manifest(spec.model)
        if exported is not None:  # a `glamrl export` directory: its actions and prompt settings
            prompt = PromptConfig(nbr_obs=exported.nbr_obs, actions=list(exported.action_names))
            model = dataclasses.replace(model, normalize_by_length=exported.normalize_by_length,
                                        use_action_heads=exported.use_action_heads,
                                        score=exported.score, critic_reads_step=exported.critic_reads_step)
            label = f"llm {Path(spec.model).name}"
    cfg = TrainConfig(env=EnvConfig(seed=seed, language=language), prompt=prompt, model=model,
                      agent=AgentConfig(kind=spec.kind))
    bound_kernel_caches(cfg.run.kernel_cache)
    return cfg, make_model(cfg), label, None


def eval_env(trained: EnvConfig, level: str | None = None, task: str | None = None,
             language: str | None = None) -> EnvConfig:
    """The env settings an agent is evaluated under: `trained` (a run's `env`; a fresh agent's, the defaults),
    except those given: `level` moves to another level, with that level's own tasks and step limit; `task` and
    `language` replace the run's."""
    env = trained
    if level is not None and level != env.id:
        env = dataclasses.replace(env, id=level, task=None, max_steps=None)
    return dataclasses.replace(env, task=env.task if task is None else task, language=language or env.language)


def builder(cfg: TrainConfig, model: nn.Module | None, greedy: bool = False,
            temperature: float = 1.0) -> AgentBuilder:
    """Builds the agent of `cfg` (from `load_eval_model`) for one suite test's envs."""

    def build(envs: SyncVectorEnv, test: SuiteTest) -> Agent:
        """The agent reading the test's language, words, action names and goal header (text agents)."""
        return make_agent(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, language=test.language)),
                          model, envs, greedy, action_names=test.action_names(cfg.prompt.actions),
                          goal_header=test.goal_header, temperature=temperature)

    return build


def agent_builder(spec: AgentSpec, seed: int = 1) -> tuple[str, AgentBuilder]:
    """(label, builder of the agent for one suite test's envs) for the agent `spec` names."""
    cfg, model, label, _ = load_eval_model(spec, seed)
    return label, builder(cfg, model, spec.greedy, spec.temperature)


def run_label(run_dir: Path) -> str:
    """A run's name without its seed suffix, so that seeds of one experiment share a label."""
    name = Path(run_dir).resolve().name
    head, sep, tail = name.rpartition("-seed")
    return head if sep and tail.isdigit() else name
