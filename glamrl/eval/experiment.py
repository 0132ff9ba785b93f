"""An experiment: several agents trained on one level at equal frames, compared in plots and a table.

    glamrl experiment configs/experiments/cpu_paper.yaml              # train what is missing, then report
    glamrl experiment configs/experiments/cpu_paper.yaml --report     # the plots and table only
    glamrl experiment configs/experiments/cpu_paper.yaml --sbatch runs/cpu_paper.sbatch   # a SLURM array

The file names the runs (a config and overrides, one or more seeds) and what they share: the
output folder, the training frames of every run and an optional wall-clock cap. Each run lives
in its own run directory, OUT/NAME-seedS, trained by `glamrl train` in a process of its own.
A run whose checkpoint has all its frames (or its time) is skipped; an unfinished one resumes;
so the experiment can be spread over sittings or machines, and each SLURM array task trains one
run (`--task I`). Evaluation-only agents (random, bot) are evaluated once, with `glamrl eval`.

The report (OUT/report.md, OUT/success_frames.png, OUT/success_minutes.png): success rate and
mean episode length of the training episodes against frames and against wall-clock minutes, and
a table of the frames and minutes each agent took to reach `target` success (the first update
whose training episodes reached it) and the frames and minutes each trained in all (a capped run
stops short of the experiment's frames): the IQM over seeds (`--aggregate mean`: the mean; the IQM
of fewer than 4 seeds is their mean) with rliable's 95% bootstrap interval over the seeds, where
there are several. Evaluation-only agents get theirs over seeds and episodes (one seed: over its
episodes), as in `glamrl results`.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from glamrl.config import ConfigError, EnvConfig, load_train_config
from glamrl.stats import AGGREGATE_TITLES, BOOTSTRAP_REPS, METRICS, interval_over_seeds
from glamrl.files import write_text
from glamrl.run.dir import LOG_FILE
from glamrl.run.log import read_log

EVAL_ONLY = ("random", "bot")


class ExperimentError(ConfigError):
    """A run of the experiment failed."""


@dataclass(frozen=True)
class RunSpec:
    """One entry of the experiment file."""

    name: str
    """label of the agent in plots and the table; its run directories are OUT/NAME-seedS."""
    config: str | None = None
    """the YAML config of `glamrl train` (training agents)."""
    overrides: tuple[str, ...] = ()
    """dotted overrides on top of `config` (and of the experiment's frames, cap and env)."""
    seeds: tuple[int, ...] = (1,)
    """one run per seed (env.seed)."""
    agent: str | None = None
    """random or bot: evaluated only, no training (then `env` and `episodes` apply)."""
    episodes: int = 200
    """evaluation episodes of an evaluation-only agent."""


@dataclass(frozen=True)
class Experiment:
    out: Path
    """folder of every run directory and of the report."""
    runs: tuple[RunSpec, ...]
    frames: int | None = None
    """training frames of every run (ppo.total_frames or drrn.total_frames); null: each config's own."""
    minutes: float | None = None
    """wall-clock cap of each PPO run (run.max_minutes); a run that used it up counts as finished."""
    env: str | None = None
    """the level of every run (env.id); null: each config's own."""
    target: float = 0.9
    """the success rate the table measures the time to."""
    tasks: list[tuple[RunSpec, int]] = field(default_factory=list)
    """(spec, seed) of every run in order: the SLURM array's task ids."""


def load_experiment(path: str | Path) -> Experiment:
    """The experiment file `path`, checked: unknown keys, missing configs and bad values stop here."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read experiment file {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict) or not data["runs"]:
        raise ConfigError(f"{path}: expected a mapping with 'out' and a non-empty mapping 'runs' (name: spec)")
    known = {"out", "runs", "frames", "minutes", "env", "target"}
    if unknown := set(data) - known:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    if "out" not in data:
        raise ConfigError(f"{path}: give 'out', the folder of the experiment's runs")
    specs = tuple(_run_spec(path, name, spec) for name, spec in data["runs"].items())
    target = data.get("target", 0.9)
    if not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise ConfigError(f"{path}: target must be a success rate in (0, 1], got {target!r}")
    for key in ("frames", "minutes"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise ConfigError(f"{path}: {key} must be a positive number or null, got {value!r}")
    experiment = Experiment(Path(data["out"]), specs, data.get("frames"), data.get("minutes"), data.get("env"),
                            float(target))
    experiment.tasks.extend((spec, seed) for spec in specs for seed in spec.seeds)
    for spec, seed in experiment.tasks:  # every config builds (keys, types, cross-field checks) before any run
        if spec.agent is None:
            load_train_config(spec.config, train_overrides(experiment, spec, seed))
    return experiment


def _run_spec(path: Path, name: str, spec: Any) -> RunSpec:
    where = f"{path}: runs.{name}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping (config, overrides, seeds | agent, episodes)")
    known = {"config", "overrides", "seeds", "agent", "episodes"}
    if unknown := set(spec) - known:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    agent, config = spec.get("agent"), spec.get("config")
    if agent is not None and agent not in EVAL_ONLY:
        raise ConfigError(f"{where}: agent must be one of {', '.join(EVAL_ONLY)} (trained agents take a config)")
    if (agent is None) == (config is None):
        raise ConfigError(f"{where}: give either config (a trained agent) or agent (random, bot)")
    if config is not None and not Path(config).is_file():
        raise ConfigError(f"{where}: config file {config} not found")
    seeds = spec.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers >= 0, got {seeds!r}")
    overrides = spec.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise ConfigError(f"{where}: overrides must be a list of key=value strings, got {overrides!r}")
    episodes = spec.get("episodes", 200)
    if not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"{where}: episodes must be an integer >= 1, got {episodes!r}")
    return RunSpec(name, config, tuple(overrides), tuple(seeds), agent, episodes)


def run_dir(experiment: Experiment, spec: RunSpec, seed: int) -> Path:
    return experiment.out / f"{spec.name}-seed{seed}"


def train_overrides(experiment: Experiment, spec: RunSpec, seed: int) -> list[str]:
    """The experiment's shared settings, then the run's own overrides (which win)."""
    cfg = load_train_config(spec.config, spec.overrides)
    shared = [f"env.seed={seed}"]
    if experiment.env is not None:
        shared.append(f"env.id={experiment.env}")
    if experiment.frames is not None:
        shared.append(f"{'drrn' if cfg.agent.kind == 'drrn' else 'ppo'}.total_frames={experiment.frames}")
    if experiment.minutes is not None and cfg.agent.kind != "drrn":
        shared.append(f"run.max_minutes={experiment.minutes}")
    return [*shared, *spec.overrides]


def is_finished(experiment: Experiment, spec: RunSpec, seed: int) -> bool:
    """Whether the run has nothing left to do: its results file (evaluation-only agents), or a last log
    row at its total frames or past its time cap."""
    directory = run_dir(experiment, spec, seed)
    if spec.agent is not None:
        return (directory / "eval.json").exists()
    if not (directory / LOG_FILE).exists():
        return False
    rows = read_log(directory)
    if not rows:
        return False
    cfg = load_train_config(spec.config, train_overrides(experiment, spec, seed))
    total = cfg.drrn.total_frames if cfg.agent.kind == "drrn" else cfg.ppo.total_frames
    capped = cfg.run.max_minutes is not None and rows[-1].get("duration", 0) >= 60 * cfg.run.max_minutes
    return rows[-1]["frames"] >= total or capped


def task_command(experiment: Experiment, spec: RunSpec, seed: int) -> list[str]:
    """The `glamrl` command line that trains (or resumes) or evaluates one run."""
    directory = run_dir(experiment, spec, seed)
    glamrl = [sys.executable, "-m", "glamrl.cli"]
    if spec.agent is not None:
        env = experiment.env or EnvConfig.id
        return [*glamrl, "eval", "--agent", spec.agent, "--env", env, "--episodes", str(spec.episodes),
                "--seed", str(seed), "--out", str(directory / "eval.json")]
    return [*glamrl, "train", "--config", spec.config, "--run-dir", str(directory), "--no-progress",
            *train_overrides(experiment, spec, seed)]


def run_tasks(experiment: Experiment, indices: list[int] | None = None, say=print) -> None:
    """Train or evaluate the runs not yet finished (all, or the task ids `indices`), one after another."""
    chosen = range(len(experiment.tasks)) if indices is None else indices
    for i in chosen:
        if not 0 <= i < len(experiment.tasks):
            raise ConfigError(f"task {i} does not exist: the experiment has tasks 0..{len(experiment.tasks) - 1}")
        spec, seed = experiment.tasks[i]
        name = run_dir(experiment, spec, seed).name
        if is_finished(experiment, spec, seed):
            say(f"[{i}] {name}: finished, skipped")
            continue
        say(f"[{i}] {name}: {shlex.join(task_command(experiment, spec, seed)[1:])}")
        done = subprocess.run(task_command(experiment, spec, seed))
        if done.returncode != 0:
            raise ExperimentError(f"run {name} failed (exit {done.returncode}); rerun the experiment to resume it")


def write_sbatch(experiment: Experiment, experiment_file: Path, out: Path, time: str = "24:00:00",
                 cpus: int = 8) -> Path:
    """A SLURM array job, one task per run: each task runs `glamrl experiment FILE --task $SLURM_ARRAY_TASK_ID`
    (skipping a finished run, resuming an unfinished one). `glamrl experiment FILE --report` afterwards."""
    n = len(experiment.tasks)
    names = "\n".join(f"#   {i}: {run_dir(experiment, spec, seed).name}" for i, (spec, seed) in
                      enumerate(experiment.tasks))
    script = f"""#!/bin/bash
# glamrl experiment {experiment_file}: one SLURM array task per run ({n} runs).
#   sbatch {out}
# then, when all have ended: glamrl experiment {experiment_file} --report
# Resubmitting resumes unfinished runs and skips finished ones. Tasks:
{names}
#SBATCH --job-name=glamrl-{experiment.out.name}
#SBATCH --array=0-{n - 1}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
#SBATCH --output={experiment.out}/slurm-%A_%a.out
set -euo pipefail
cd {shlex.quote(str(Path.cwd()))}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
{shlex.quote(sys.executable)} -m glamrl.cli experiment {shlex.quote(str(experiment_file))} --task "$SLURM_ARRAY_TASK_ID"
"""
    return write_text(out, script)


# -------------------------------------------------------------------------------- report
def time_to_target(rows: list[dict[str, float]], target: float) -> tuple[float, float] | None:
    """(frames, minutes) at the first log row whose training episodes reached `target` success; None if none did."""
    for row in rows:
        if row.get("success_rate", math.nan) >= target:
            return row["frames"], row["duration"] / 60
    return None


def report(experiment: Experiment, aggregate: str = "iqm", reps: int = BOOTSTRAP_REPS) -> Path:
    """The plots and the table of every run trained so far (unfinished runs are drawn as far as they got), with
    `aggregate` ("iqm" or "mean") over seeds and `reps` bootstrap resamples for the intervals."""
    from glamrl.eval.plot import plot_runs
    from glamrl.eval.results import estimate

    trained = [(spec, [run_dir(experiment, spec, s) for s in spec.seeds
                       if (run_dir(experiment, spec, s) / LOG_FILE).exists()]) for spec in experiment.runs
               if spec.agent is None]
    evaluated = {}  # {name: (seeds, success estimate, length estimate)}
    for spec in experiment.runs:
        if spec.agent is not None:
            results = [json.loads((run_dir(experiment, spec, s) / "eval.json").read_text()) for s in spec.seeds
                       if (run_dir(experiment, spec, s) / "eval.json").exists()]
            if results:
                evaluated[spec.name] = (len(results), *(estimate(results, METRICS[m], aggregate, reps)
                                                        for m in ("success", "length")))
    baselines = {name: {"success_rate": success.point, "num_frames_mean": length.point}
                 for name, (_, success, length) in evaluated.items()}
    dirs = [d for _, group in trained for d in group]
    labels = {d: spec.name for spec, group in trained for d in group}
    metrics = ("success_rate", "num_frames_mean")
    if dirs:
        plot_runs(dirs, experiment.out / "success_frames.png", x="frames", metrics=metrics, labels=labels,
                  baselines=baselines)
        plot_runs(dirs, experiment.out / "success_minutes.png", x="minutes", metrics=metrics, labels=labels,
                  baselines=baselines)
    lines = [f"{AGGREGATE_TITLES[aggregate]} [95% interval: "
             f"rliable's bootstrap over the seeds, {reps} resamples; evaluated agents: over the seeds and their "
             f"episodes, or one seed's episodes]; one seed: its value.", "",
             f"| agent | seeds | frames to {experiment.target:g} | minutes to {experiment.target:g} | "
             f"frames trained | minutes trained | last success | last mean length |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def over_seeds(values: list[float], runs: int, metric: str) -> str:
        return _over_seeds(values, runs, metric, aggregate, reps)

    for spec, group in trained:
        logs = [read_log(d) for d in group]
        reached = [time_to_target(rows, experiment.target) for rows in logs]
        hits = [r for r in reached if r is not None]
        last = [next((r for r in reversed(rows) if "success_rate" in r), {}) for rows in logs]
        lines.append(f"| {spec.name} | {len(group)} | {over_seeds([h[0] for h in hits], len(group), 'frames')} | "
                     f"{over_seeds([h[1] for h in hits], len(group), 'minutes')} | "
                     f"{over_seeds([rows[-1]['frames'] for rows in logs if rows], len(group), 'frames')} | "
                     f"{over_seeds([rows[-1]['duration'] / 60 for rows in logs if rows], len(group), 'minutes')} | "
                     f"{over_seeds([r['success_rate'] for r in last if r], len(group), 'success')} | "
                     f"{over_seeds([r['num_frames_mean'] for r in last if r], len(group), 'length')} |")
    for name, (seeds, success, length) in evaluated.items():
        lines.append(f"| {name} (evaluated) | {seeds} | | | | | {success.format(METRICS['success'].fmt)} | "
                     f"{length.format(METRICS['length'].fmt)} |")
    return write_text(experiment.out / "report.md", "\n".join(lines) + "\n")


def _over_seeds(values: list[float], runs: int, metric: str, aggregate: str, reps: int) -> str:
    """"value [low, high]" over the finite `values`, one per seed (rliable's `aggregate` and interval over seeds;
    a single value alone), and how many of the `runs` got one when not all did."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "not reached" if runs else ""
    text = interval_over_seeds(values, METRICS[metric], aggregate, reps).format(METRICS[metric].fmt)
    return text + (f" ({len(values)} of {runs})" if len(values) < runs else "")
