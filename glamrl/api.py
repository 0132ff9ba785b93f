"""glamrl from Python: train a run, load its policy (or an export's), act in a BabyAI-Text env.

    run = glamrl.train("configs/turn_to_object.yaml", ["ppo.total_frames=4096"])
    policy = glamrl.load_policy(run)                      # a run directory or a `glamrl export` directory
    env = glamrl.make_env("BabyAI-TurnToObject-v0")
    obs, _ = env.reset(seed=1)
    (action,) = policy.act(obs, greedy=True)              # an index into policy.action_names
    log_probs = policy.scores(["...a prompt..."])         # (1, A) log pi(a | prompt)

Each is a thin door onto what the command line runs: `load_policy` reads runs and exports as
`glamrl eval --run` / `--model` do (`glamrl.eval.agents.load_eval_model`), `Policy.act` is the
GLAM agent (`glamrl.agents.llm.LLMAgent`) with its prompt histories, and `train` is `glamrl train`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from glamrl.agents.llm import LLMAgent
from glamrl.config import TrainConfig, apply_overrides, from_dict, load_train_config
from glamrl.envs.factory import make_env
from glamrl.llm.exported import read_manifest
from glamrl.llm.policy import LLMPolicy

__all__ = ["Policy", "load_policy", "make_env", "train"]

Observations = dict[str, Any] | Sequence[dict[str, Any]]
"""One env's observation ({"mission": str, "descriptions": [str, ...]}), a list of them (one per env), or a vector
env's batched observation."""


class Policy:
    """A trained LLM policy that acts on BabyAI-Text observations and scores actions.

    It keeps a prompt history (the run's `prompt.nbr_obs` last observations and actions) per env, as training
    did: call `reset()` when an episode ends (all envs) or `end_episodes(done)` (a vector env's). Another number
    of envs, other action names or the other `greedy` start from empty histories."""

    def __init__(self, cfg: TrainConfig, model: LLMPolicy) -> None:
        self.cfg = cfg
        self.model = model
        self._agent: LLMAgent | None = None

    @property
    def action_names(self) -> tuple[str, ...]:
        """The run's action names (minigrid order): what `act` returns indices into unless given others."""
        return tuple(self.cfg.prompt.actions)

    def act(self, observations: Observations, action_names: Sequence[str] | None = None,
            greedy: bool = False) -> np.ndarray:
        """The action of each env (indices into `action_names`, default the run's): sampled from pi(a | prompt),
        the argmax with `greedy`. Each env's prompt history records the observation and the action."""
        batch = _batched(observations)
        return self._agent_for(len(batch["mission"]), action_names, greedy).act(batch).actions

    def scores(self, prompts: Sequence[str] | Observations, action_names: Sequence[str] | None = None) -> torch.Tensor:
        """log pi(a | prompt) over `action_names` (default the run's), (B, A): of prompts (strings), or of
        observations with each env's prompt history (not recorded: `act` records)."""
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if isinstance(prompts, Sequence) and prompts and all(isinstance(p, str) for p in prompts):
            with torch.inference_mode():
                return self.model(list(prompts), tuple(action_names or self.action_names)).log_probs.float().cpu()
        batch = _batched(prompts)
        agent = self._agent_for(len(batch["mission"]), action_names)
        with torch.inference_mode():
            return self.model(agent.prompts(batch, range(len(batch["mission"]))),
                              agent.action_names).log_probs.float().cpu()

    def reset(self) -> None:
        """Forget every env's prompt history (new episodes)."""
        self._agent = None

    def end_episodes(self, done: np.ndarray) -> None:
        """Forget the prompt history of the envs whose episode ended (`done`: (N,) bools)."""
        if self._agent is not None:
            self._agent.end_episodes(done)

    def _agent_for(self, num_envs: int, action_names: Sequence[str] | None, greedy: bool | None = None) -> LLMAgent:
        """The GLAM agent acting for `num_envs` envs with these names (and `greedy`, None: either); another count,
        other names or the other `greedy` start from empty prompt histories."""
        names = tuple(action_names or self.action_names)
        agent = self._agent
        if (agent is None or len(agent.histories) != num_envs or agent.action_names != names
                or greedy not in (None, agent.greedy)):
            agent = self._agent = LLMAgent(self.model, num_envs, names, self.cfg.prompt.nbr_obs,
                                           self.cfg.env.language, bool(greedy))
        return agent


def _batched(observations: Observations) -> dict[str, Any]:
    """{"mission": [...], "descriptions": [...]}, one entry per env."""
    if isinstance(observations, dict):
        if isinstance(observations["mission"], str):  # one env's observation
            return {"mission": [observations["mission"]], "descriptions": [observations["descriptions"]]}
        return observations
    return {"mission": [o["mission"] for o in observations], "descriptions": [o["descriptions"] for o in observations]}


def load_policy(path: str | Path, device: str | None = "cpu") -> Policy:
    """The LLM policy of a run directory (its last checkpoint) or of a `glamrl export` directory, on `device`
    (cpu, cuda, cuda:N, auto; None: a run's own model.device)."""
    from glamrl.eval.agents import AgentSpec, load_eval_model

    exported = read_manifest(path) is not None
    spec = AgentSpec(kind="llm", model=str(path), device=device) if exported else \
        AgentSpec(kind="llm", run=Path(path), device=device)
    cfg, model, _, _ = load_eval_model(spec)
    return Policy(cfg, model)


def train(config: TrainConfig | str | Path, overrides: Sequence[str] = (), run_dir: str | Path | None = None,
          overwrite: bool = False, progress: bool = False) -> Path:
    """`glamrl train`: train (or resume) a run from a `TrainConfig` or a YAML file, with dotted `overrides`
    (e.g. "ppo.lr=1e-5"), in `run_dir` (default runs/{env}-{model}-seed{seed}-{hash}). Returns the run directory."""
    from glamrl.cli import train_run

    if isinstance(config, TrainConfig):
        cfg = from_dict(TrainConfig, apply_overrides(config.to_dict(), overrides)) if overrides else config
    else:
        cfg = load_train_config(config, overrides)
    args = argparse.Namespace(run_dir=None if run_dir is None else Path(run_dir), overrides=list(overrides),
                              overwrite=overwrite, no_progress=not progress)
    return train_run(args, cfg)
