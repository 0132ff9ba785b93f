"""Where a result came from: the one record that `glamrl eval`, its suites and a training run's own
evaluations (`eval_before.json`, `eval_after.json`) write under `provenance`.

    {"run_dir": ..., "model": ..., "checkpoint": {"update": ..., "frames": ...}, "greedy": ...,
     "temperature": ..., "num_envs": ..., "episode_seeds": {"first": ..., "count": ...},
     "level": {"id": ..., "task": ..., "language": ..., "max_steps": ..., "faithful": ...},
     "agent": ..., "glamrl_version": ..., "git_commit": ...,
     "machine": {"cpu": ..., "cpu_flags": [...], "cpus": ..., "torch": ...}}

`checkpoint` names a trained agent's checkpoint by its last log row (`Progress.log_rows`, the `update` column of
log.csv) and its frames. `glamrl results` keys its pooling on it (`glamrl.eval.results`): two files that differ in level, agent
or model never become seeds of one cell, and one evaluation is never counted twice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from glamrl.config import EnvConfig, TrainConfig
from glamrl.files import write_text
from glamrl.run.checkpoint import Progress

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the glamrl package: a git checkout in development."""


def provenance(cfg: TrainConfig, *, run_dir: Path | None, progress: Progress | None, greedy: bool, num_envs: int,
               first_seed: int, episodes: int, temperature: float = 1.0) -> dict[str, Any]:
    """The provenance record of `episodes` evaluation episodes of `cfg`'s agent on `cfg.env`, played from
    `first_seed` on `num_envs` envs; `run_dir` and `progress` (its checkpoint) for a trained agent, else None;
    `greedy` or `temperature`: how the actions were drawn from the policy."""
    return {
        "run_dir": None if run_dir is None else str(Path(run_dir).resolve()),
        "model": model_name(cfg),
        "checkpoint": None if progress is None else {"update": progress.log_rows, "frames": progress.frames},
        "greedy": greedy,
        "temperature": temperature,
        "num_envs": num_envs,
        "episode_seeds": {"first": first_seed, "count": episodes},
        "level": level(cfg.env),
        "agent": cfg.agent.kind,
        "glamrl_version": glamrl_version(),
        "git_commit": git_commit(),
        "machine": machine(),
    }


SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The CPU flags that decide glamrl's speed on a CPU (the bf16 choice of `model.compute_dtype=auto`, the vector
width), as /proc/cpuinfo spells them."""


@functools.cache
def machine() -> dict[str, Any]:
    """What ran it: the CPU as /proc/cpuinfo names it, with its family and model numbers (which tell generations
    apart where a virtual machine names only the maker, "AMD EPYC") and its `SPEED_FLAGS`; the CPUs this process
    may use; torch's version."""
    from glamrl.llm.precision import cpu_fields

    cpu = cpu_fields()
    numbers = [f"{key} {cpu[key]}" for key in ("cpu family", "model") if key in cpu]
    name = cpu.get("model name", "unknown CPU") + (f" ({', '.join(numbers)})" if numbers else "")
    return {"cpu": name, "cpu_flags": [f for f in SPEED_FLAGS if f in cpu.get("flags", "").split()],
            "cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__}


def write_evaluation(path: Path, cfg: TrainConfig, summary: dict[str, Any], *, run_dir: Path | None,
                     progress: Progress | None, greedy: bool) -> Path:
    """A training run's evaluation (`glamrl.trainers.common.evaluate_policy`'s summary: episode k from
    env.eval_seed + k) as `glamrl eval --out` writes one: the level, the summary, its provenance."""
    origin = provenance(cfg, run_dir=run_dir, progress=progress, greedy=greedy, num_envs=cfg.env.num_envs,
                        first_seed=cfg.env.eval_seed, episodes=cfg.run.eval_episodes)
    return write_text(path, json.dumps({"agent": cfg.agent.kind, "env": cfg.env.id, **summary,
                                        "provenance": origin}, indent=2))


def level(env: EnvConfig) -> dict[str, Any]:
    """The env settings an episode plays under: `EnvConfig` without the run's seeds (the record's `episode_seeds`
    says which episodes) and env count."""
    return {k: v for k, v in dataclasses.asdict(env).items() if k not in ("seed", "seeding", "num_envs")}


def model_name(cfg: TrainConfig) -> str | None:
    """An llm agent's model name, or its resolved path when it names a local folder (an export); None for
    agents without a language model."""
    if cfg.agent.kind != "llm":
        return None
    path = Path(cfg.model.name).expanduser()
    return str(path.resolve()) if path.exists() else cfg.model.name


@functools.cache
def glamrl_version() -> str | None:
    try:
        return metadata.version("glamrl")
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def git_commit() -> str | None:
    """The commit of the checkout glamrl runs from; None outside a git checkout or without git."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PACKAGE_ROOT, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None
