"""What the training loops share (PPO, DRRN, behavioural cloning): open or resume a run, record its config,
restore a checkpoint into the model and optimizer, open the log, evaluate before and after.

Each loop (`glamrl/train/ppo.py`, `drrn.py`, `bc.py`) reads top to bottom as its own algorithm and calls
these in the same order: `open_run` → build envs, model, optimizer → `restore_training` (resuming) →
`record_config` → `report_success` ("before") → `open_logger` → its loop → `report_success` ("after").
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from glamrl.agents.factory import make_agent
from glamrl.config import TrainConfig
from glamrl.errors import GlamrlError
from glamrl.parallel import distributed, sharding
from glamrl.rollout import run_episodes, summarize
from glamrl.run.checkpoint import checkpoint_dir, load_checkpoint, restoring, set_rng_state
from glamrl.run.dir import write_config
from glamrl.run.log import RunLogger

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training ones
@dataclass
class TrainResult:
    run_dir: Path
    updates: int
    frames: int
    success_before: float | None
    success_after: float | None


def default_run_dir(cfg: TrainConfig) -> Path:
    """runs/{env}-{model}-seed{seed} (llm) or runs/{env}-{kind}-seed{seed}: the one place run ids are made."""
    model = Path(cfg.model.name).stem.replace("/", "_") if cfg.agent.kind == "llm" else cfg.agent.kind
    return Path("runs") / f"{cfg.env.id}-{model}-seed{cfg.env.seed}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class TrainerMismatchError(GlamrlError, ValueError):
    """A run directory resumed by another training loop than the one that wrote it."""


def open_run(cfg: TrainConfig, run_dir: Path, resume: bool, trainer: str) -> dict[str, Any] | None:
    """Seed everything and, resuming, return RUN_DIR's last checkpoint (None for a new run).

    `trainer` (ppo, drrn, bc) must be the loop that wrote the checkpoint, stored under "trainer"
    in it. Under torchrun rank 0 reads the checkpoint and the other ranks receive it (or its refusal).
    The config is written by the loop once its envs and model could be built and the checkpoint
    restored into them (`record_config`): a start that fails leaves the run directory as it was.
    """
    state = distributed.from_main(lambda: load_checkpoint(run_dir) if resume else None)
    if state is not None and state.get("trainer", "ppo") != trainer:
        raise TrainerMismatchError(
            f"{run_dir} was trained by {state.get('trainer', 'ppo')}, not {trainer}: start a new run from it "
            f"with agent.init_from={run_dir} and another --run-dir")
    seed_everything(cfg.env.seed)  # the same initial weights on every rank
    return state


def resuming_from(cfg: TrainConfig, run_dir: Path, state: dict[str, Any]) -> contextlib.AbstractContextManager:
    """A block whose loads from RUN_DIR's checkpoint `state` become one error line when they do not fit `cfg`."""
    return restoring(f"the checkpoint in {checkpoint_dir(run_dir)}", state.get("config"), cfg.to_dict(),
                     "resume with the values it was saved with, or start afresh with --overwrite or another --run-dir")


def record_config(cfg: TrainConfig, run_dir: Path, model: torch.nn.Module | None, say: Callable[[str], None]) -> None:
    """Write RUN_DIR/config.yaml once the envs and model could be built (and restored), with what the model's
    `auto` settings became on this machine (an LLM policy's `resolved`), and say those."""
    resolved = getattr(model, "resolved", {})
    for key, r in resolved.items():
        say(f"{key}: {r.value} ({r.why})")
    write_config(cfg, run_dir, resolved)


def restore_training(cfg: TrainConfig, run_dir: Path, state: dict[str, Any], model: torch.nn.Module,
                     optimizer: torch.optim.Optimizer) -> None:
    """Load a checkpoint's trained weights, optimizer and RNG states (every training loop stores these three)."""
    with resuming_from(cfg, run_dir, state):
        sharding.load_state(model, optimizer, state["policy"], state["optimizer"])
    set_rng_state(state["rng"])


def open_logger(cfg: TrainConfig, run_dir: Path, state: dict[str, Any] | None) -> RunLogger:
    """RUN_DIR's log, cut back to the checkpoint being resumed (`state`) or started afresh."""
    return RunLogger(run_dir, resume_after_update=state["update"] if state is not None else None,
                     tensorboard=cfg.run.tensorboard)


def report_success(cfg: TrainConfig, model: torch.nn.Module, when: str, say: Callable[[str], None]) -> float | None:
    """Success rate on `cfg.run.eval_episodes` evaluation episodes, said aloud; None when that is 0."""
    if not cfg.run.eval_episodes:
        return None
    summary = evaluate_policy(cfg, model)
    lo, hi = summary["success_ci"]
    say(f"success rate {when}: {summary['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) in "
        f"{summary['mean_length']:.1f} steps on average ({cfg.run.eval_episodes} episodes)")
    return summary["success_rate"]


def evaluate_policy(cfg: TrainConfig, policy: torch.nn.Module) -> dict[str, Any]:
    """The policy's success on fresh evaluation episodes (seeds apart from training), shared among the ranks."""
    ranks = distributed.current()
    share = cfg.run.eval_episodes // ranks.world_size + (ranks.rank < cfg.run.eval_episodes % ranks.world_size)
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, envs, greedy=cfg.run.eval_greedy)
    try:
        seed = cfg.env.seed + EVAL_SEED_OFFSET + ranks.rank * cfg.env.num_envs
        with sharding.gathered(policy):  # ranks play different episodes: a sharded policy acts on whole weights
            results = run_episodes(envs, agent, share, seed=seed)
    finally:
        envs.close()
    return summarize([e for rank_results in distributed.gather_objects(results) for e in rank_results])
