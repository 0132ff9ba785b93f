"""An experiment: several agents trained on one level at equal frames, compared in plots and a table.

    glamrl experiment configs/experiments/cpu_paper.yaml              # train what is missing, then report
    glamrl experiment configs/experiments/cpu_paper.yaml --report     # the plots and table only
    glamrl experiment configs/experiments/cpu_paper.yaml --sbatch runs/cpu_paper.sbatch   # a SLURM array

The file names the runs (a config and overrides, one or more seeds) and what they share: the
output folder, the training frames of every run and an optional wall-clock cap. Each run lives
in its own run directory, OUT/NAME-seedS, trained by `glamrl train` in a process of its own.
A run whose saved config is the experiment's (but for what a resume may change, `RESUMABLE`) and whose
log has all its frames (or its time) is skipped; an unfinished one resumes; one with another config (another
experiment's run under the same out and name) is reported and left alone, in training and in the report;
so the experiment can be spread over sittings or machines, and each SLURM array task trains one
run (`--task I`). Evaluation-only agents (random, bot) are evaluated once, with `glamrl eval`. A run may start
from another run of the experiment (`init_from`, a curriculum), trained before it, and may be a clone of the
bot (`clone`: `glamrl demos`, then `glamrl bc`), which a later run continues with PPO. A run may also play a
generalisation suite once it is trained (`suite`: `glamrl eval --suite`, RUN/suite.json), and so may the
evaluation-only agents, on the same level and episodes.

The report (OUT/report.md, OUT/success_frames.png, OUT/success_minutes.png): success rate and
mean episode length of the training episodes against frames and against wall-clock minutes (with the
evaluated agents and any published `references` as horizontal lines; on a Mixed level also each task kind's
success, OUT/tasks_frames.png and OUT/tasks_minutes.png; each row's success against frames in a panel of its
own, over the other rows in grey, OUT/rows_frames.png), and
a table of the frames and minutes each agent took to reach `target` success (the first update
whose training episodes reached it) and the frames and minutes each trained in all (a capped run
stops short of the experiment's frames): the IQM over seeds (`--aggregate mean`: the mean; the IQM
of fewer than 4 seeds is their mean) with rliable's 95% bootstrap interval over the seeds, where
there are several. Evaluation-only agents get theirs over seeds and episodes (one seed: over its
episodes), as in `glamrl results`. Where runs played a suite, the report ends with its table over seeds, the one
`glamrl results` makes of their suite.json files (also written as OUT/suite/results.md, .csv and .png).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glamrl.agents.registry import agent_kind, kinds_where
from glamrl.config import ConfigError, EnvConfig, from_dict, identity_changes, load_train_config, load_yaml
from glamrl.errors import GlamrlError
from glamrl.stats import AGGREGATE_TITLES, BOOTSTRAP_REPS, METRICS, interval_over_seeds
from glamrl.files import write_text, writing
from glamrl.run.dir import EVAL_AFTER, LOG_FILE, MARKER, RunDir
from glamrl.seeds import LEGACY_SEEDING, SEEDINGS

SUITE_FILE = "suite.json"
"""A run's generalisation suite (`RunSpec.suite`), in its run directory."""
RUN_NAME = re.compile(r"[A-Za-z0-9._-]+")
"""A run's name: one folder name (its run directories are OUT/NAME-seedS), never a path."""


class ExperimentError(ConfigError):
    """A run of the experiment failed."""


TARGET_EPISODES = 32
"""Training episodes, at least, that `time_to_target` measures a success rate over (`Experiment.target_episodes`)."""


@dataclass(frozen=True)
class RunSpec:
    """One entry of the experiment's `runs` (its key is the run's name)."""

    config: str | None = None
    """the YAML config of `glamrl train` (training agents)."""
    overrides: tuple[str, ...] = ()
    """dotted overrides on top of `config` (and of the experiment's frames, cap and env)."""
    seeds: tuple[int, ...] = (1,)
    """one run per seed (env.seed)."""
    agent: str | None = None
    """an agent kind that is evaluated only, with no training (random, bot; then `env` and `episodes` apply)."""
    episodes: int = 200
    """evaluation episodes of an evaluation-only agent."""
    clone: int | None = None
    """bot episodes to clone: the run is `glamrl bc` (its config a BC config, configs/bc*.yaml) on the bot's
    demonstrations of the experiment's level, recorded first by `glamrl demos` (`demos_file`), in place of
    `glamrl train`; its budget is bc.epochs passes over them (the experiment's frames do not apply)."""
    suite: str | None = None
    """a generalisation suite (`glamrl eval --suite`: paper, french, all) that the run plays once it is trained
    (an evaluation-only agent: once it is evaluated), `suite_episodes` episodes per test on the run's level and
    the evaluation episodes of its seed, into RUN/suite.json (`SUITE_FILE`); null: none."""
    suite_episodes: int = 100
    """episodes per test of `suite`."""
    init_from: str | None = None
    """the name of a trained run listed before this one (a curriculum: a run on an easier level): each seed starts
    from that run's directory of the same seed (agent.init_from), which must be finished first."""
    name: str = ""
    """label of the agent in plots and the table: its key in `runs` (not a key of the entry); its run directories
    are OUT/NAME-seedS."""

    def check(self, where: str) -> None:
        """Refuse what the types alone allow; `where` names the entry (runs.NAME)."""
        evaluated = kinds_where(lambda kind: not kind.trains)
        if self.agent is not None and self.agent not in evaluated:
            raise ConfigError(f"{where}.agent must be one of {', '.join(evaluated)} (trained agents take a config)")
        if (self.agent is None) == (self.config is None):
            raise ConfigError(f"{where}: give either config (a trained agent) or agent ({', '.join(evaluated)})")
        if self.config is not None and not Path(self.config).is_file():
            raise ConfigError(f"{where}.config: config file {self.config} not found")
        if not self.seeds or min(self.seeds) < 0:
            raise ConfigError(f"{where}.seeds must be a non-empty list of integers >= 0, got {list(self.seeds)}")
        if bad := [o for o in self.overrides if "=" not in o]:
            raise ConfigError(f"{where}.overrides must be key=value strings, got {bad[0]!r}")
        if self.episodes < 1:
            raise ConfigError(f"{where}.episodes must be an integer >= 1, got {self.episodes}")
        if self.clone is not None and (self.agent is not None or self.clone < 1):
            raise ConfigError(f"{where}.clone must be a number of bot episodes >= 1 of a trained run (a BC config), "
                              f"got {self.clone}" + (f" with agent {self.agent}" if self.agent else ""))
        if self.agent is not None and self.init_from is not None:
            raise ConfigError(f"{where}.init_from: an evaluation-only agent ({self.agent}) starts from no run")
        from glamrl.eval.suite import SUITES

        if self.suite is not None and self.suite not in SUITES:
            raise ConfigError(f"{where}.suite must be one of {', '.join(SUITES)} or null, got {self.suite!r}")
        if self.suite_episodes < 1:
            raise ConfigError(f"{where}.suite_episodes must be an integer >= 1, got {self.suite_episodes}")


@dataclass(frozen=True)
class Experiment:
    """The experiment file (configs/experiments/*.yaml), loaded by `load_experiment`."""

    out: Path
    """folder of every run directory and of the report."""
    runs: dict[str, RunSpec]
    """name -> run: one run directory per seed, OUT/NAME-seedS (NAME: letters, digits, '.', '_', '-')."""
    frames: int | None = None
    """training frames of every run (ppo.total_frames or drrn.total_frames); null: each config's own."""
    minutes: float | None = None
    """cap on each run's training time, summed over its invocations (run.max_minutes); a run that used it up
    counts as finished (raise it to train further)."""
    env: str | None = None
    """the level of every run (env.id); null: each config's own."""
    seeding: str = EnvConfig.seeding
    """how each seed becomes its episodes' seeds (env.seeding, `glamrl.seeds`), in every run and in the
    evaluation-only agents' episodes: spread (seeds share no episode) or offset, the scheme of runs trained
    before env.seeding existed; an experiment that keeps such runs names offset, so that its new runs play the
    same episodes as those."""
    target: float = 0.9
    """the success rate the table measures the time to: over the training episodes that ended in a log row and
    the rows just before it, target_episodes of them or more."""
    target_episodes: int = TARGET_EPISODES
    """how many training episodes, at least, the success rate that reaches target is measured over (one early
    row ends a few short episodes, mostly successes)."""
    references: dict[str, float] = dataclasses.field(default_factory=dict)
    """published success rates drawn on the success plots as labelled horizontal lines, {label: success rate}
    (a paper's figure, with what it took in its label: "GLAM, Flan-T5-large, 1.5M frames (paper)"); drawn for
    scale, not measured here."""
    smooth: int = 1
    """the report's curves are each run's moving average over this many log rows (1: as logged); the success of
    one task kind of a Mixed level rests on a few episodes per row."""

    def __post_init__(self) -> None:
        if self.seeding not in SEEDINGS:
            raise ConfigError(f"seeding must be one of {', '.join(SEEDINGS)}, got {self.seeding!r}")
        if not self.runs:
            raise ConfigError("runs must name at least one run (name: {config, seeds, overrides} or {agent})")
        for name, spec in self.runs.items():
            if not RUN_NAME.fullmatch(name) or name in (".", ".."):
                raise ConfigError(f"runs: {name!r} is not a run name; use letters, digits, '.', '_' and '-' (it "
                                  f"names the run directories OUT/NAME-seedS)")
            if spec.name not in ("", name):
                raise ConfigError(f"unknown config key 'runs.{name}.name': a run's name is its key in runs")
            spec.check(f"runs.{name}")
        object.__setattr__(self, "runs", {name: dataclasses.replace(spec, name=name)
                                          for name, spec in self.runs.items()})
        names = list(self.runs)
        for position, spec in enumerate(self.runs.values()):
            if spec.init_from is None:
                continue
            source = self.runs.get(spec.init_from)
            if spec.init_from not in names[:position] or source.agent is not None:
                raise ConfigError(f"runs.{spec.name}.init_from must name a trained run listed before "
                                  f"{spec.name}, got {spec.init_from!r}")
            if missing := sorted(set(spec.seeds) - set(source.seeds)):
                raise ConfigError(f"runs.{spec.name}.init_from: {spec.init_from} has no seed {missing[0]} to start "
                                  f"{spec.name}'s seed {missing[0]} from")
        for key in ("frames", "minutes"):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be a positive number or null, got {getattr(self, key)}")
        if not 0 < self.target <= 1:
            raise ConfigError(f"target must be a success rate in (0, 1], got {self.target}")
        for name, value in self.references.items():
            if not name.strip() or not 0 <= value <= 1:
                raise ConfigError(f"references.{name!r} must be a label and a success rate in [0, 1], got {value}")
        if self.smooth < 1:
            raise ConfigError(f"smooth must be a number of log rows >= 1, got {self.smooth}")
        if self.target_episodes < 1:
            raise ConfigError(f"target_episodes must be a positive number of episodes, got {self.target_episodes}")

    @property
    def tasks(self) -> list[tuple[RunSpec, int]]:
        """(spec, seed) of every run in order: the SLURM array's task ids."""
        return [(spec, seed) for spec in self.runs.values() for seed in spec.seeds]


def load_experiment(path: str | Path) -> Experiment:
    """The experiment file `path`, checked before anything is created: its keys and types (as a train config's),
    its run names, every run's config and level."""
    from glamrl.envs import make_env

    path = Path(path)
    data = load_yaml(path)  # one line naming the file: not YAML, a key given twice, not a mapping
    try:
        experiment = from_dict(Experiment, data)
        levels = {experiment.env or EnvConfig.id}
        for spec, seed in experiment.tasks:  # every config builds (keys, types, cross-field checks) before any run
            if spec.agent is None:
                levels.add(load_train_config(spec.config, train_overrides(experiment, spec, seed)).env.id)
        for level in sorted(levels):
            make_env(level).close()  # an unknown level fails here, not in the middle of the runs
    except GlamrlError as err:
        raise ConfigError(f"experiment file {path}: {err}") from None
    return experiment


def run_dir(experiment: Experiment, spec: RunSpec, seed: int) -> Path:
    return experiment.out / f"{spec.name}-seed{seed}"


DEMO_SEEDS = 10_000
"""A clone's demonstrations of seed S play the episodes from seed DEMO_SEEDS x S on: apart from the other seeds'
(up to DEMO_SEEDS episodes each) and from the evaluation episodes (`glamrl.seeds.eval_seed`)."""


def demos_file(experiment: Experiment, spec: RunSpec, seed: int) -> Path:
    """OUT/NAME-seedS-demos.jsonl: the bot's demonstrations that a clone run (`RunSpec.clone`) learns from, beside its
    run directory (a run directory holds only what its run writes)."""
    return experiment.out / f"{spec.name}-seed{seed}-demos.jsonl"


def source_task(experiment: Experiment, spec: RunSpec, seed: int) -> int | None:
    """The task id of the run that this one starts from (`RunSpec.init_from`), or None."""
    if spec.init_from is None:
        return None
    return experiment.tasks.index((experiment.runs[spec.init_from], seed))


def after(experiment: Experiment, spec: RunSpec, seed: int) -> str:
    """" (after task K, which it starts from)" for a run that starts from task K's run, or "" (the SLURM script's
    list of tasks)."""
    source = source_task(experiment, spec, seed)
    return "" if source is None else f" (after task {source}, which it starts from)"


def train_overrides(experiment: Experiment, spec: RunSpec, seed: int) -> list[str]:
    """The experiment's shared settings, then the run's own overrides (which win)."""
    kind = agent_kind(load_train_config(spec.config, spec.overrides).agent.kind)
    if kind.trainer is None:
        raise ConfigError(f"{spec.config} is a config of agent kind {kind.name}, which is evaluated, not trained: "
                          f"give the entry agent: {kind.name} in place of config")
    shared = [f"env.seed={seed}", f"env.seeding={experiment.seeding}"]
    if experiment.env is not None:
        shared.append(f"env.id={experiment.env}")
    if experiment.frames is not None and spec.clone is None:  # ppo.total_frames, drrn.total_frames: the loop's budget
        shared.append(f"{kind.trainer.frames_field}={experiment.frames}")
    if experiment.minutes is not None:
        shared.append(f"run.max_minutes={experiment.minutes}")
    if spec.init_from is not None:
        shared.append(f"agent.init_from={run_dir(experiment, experiment.runs[spec.init_from], seed)}")
    own = {override.split("=", 1)[0] for override in spec.overrides}
    return [*(s for s in shared if s.split("=", 1)[0] not in own), *spec.overrides]


def mismatch(experiment: Experiment, spec: RunSpec, seed: int) -> str | None:
    """Why the run directory holds another run than this one, in one line: its saved config differs from the
    experiment's in keys other than the `RESUMABLE` ones, or (evaluation-only agents) its eval.json names another
    agent or level. None when it holds this run, or none."""
    directory = run_dir(experiment, spec, seed)
    if spec.agent is not None:
        result = directory / "eval.json"
        if not result.exists():
            return None
        data = read_eval(result)
        asked = {"agent": spec.agent, "env": experiment.env or EnvConfig.id, "seeding": experiment.seeding}
        data.setdefault("seeding", LEGACY_SEEDING)  # evaluations written before env.seeding: offset's episodes
        changed = [f"{key} {data[key]!r}, not {value!r}" for key, value in asked.items()
                   if data.get(key, value) != value]
        return (f"{result} holds another evaluation than {spec.name}'s ({', '.join(changed)}): give the experiment "
                f"another out or run name, or move it away") if changed else None
    saved = RunDir(directory).read_config()
    if saved is None:
        return None
    changed = identity_changes(saved.to_dict(),
                               load_train_config(spec.config, train_overrides(experiment, spec, seed)).to_dict())
    if not changed:
        return None
    return (f"{directory} holds a run with another config than {spec.name}'s ({', '.join(changed)} differ): "
            f"give the experiment another out or run name, or move that run away")


def is_finished(experiment: Experiment, spec: RunSpec, seed: int) -> bool:
    """Whether the run has nothing left to do: its results file (evaluation-only agents), or a last log
    row at its total frames or past its time cap (run.max_minutes counts the run's training time, its log's
    `duration`). A run directory holding another run (`mismatch`) is never this run's, finished or not."""
    directory = run_dir(experiment, spec, seed)
    if mismatch(experiment, spec, seed) is not None:
        return False
    if spec.agent is not None:
        return (directory / "eval.json").exists()
    if not (directory / LOG_FILE).exists():
        return False
    rows = RunDir(directory).read_log()
    if not rows:
        return False
    cfg = load_train_config(spec.config, train_overrides(experiment, spec, seed))
    if spec.clone is not None:  # bc.epochs passes over its demonstrations (their records: one per line)
        demos = demos_file(experiment, spec, seed)
        if not demos.exists():
            return False
        with open(demos, "rb") as f:
            total = cfg.bc.epochs * sum(1 for line in f if line.strip())
    else:
        total = agent_kind(cfg.agent.kind).trainer.total_frames(cfg)
    capped = cfg.run.max_minutes is not None and rows[-1].get("duration", 0) >= 60 * cfg.run.max_minutes
    return rows[-1]["frames"] >= total or capped


def task_command(experiment: Experiment, spec: RunSpec, seed: int) -> list[str]:
    """The `glamrl` command line that trains (or resumes) or evaluates one run (a clone: `glamrl bc` on its
    demonstrations, recorded first by `demos_command`)."""
    directory = run_dir(experiment, spec, seed)
    glamrl = [sys.executable, "-m", "glamrl.cli"]
    if spec.agent is not None:
        env = experiment.env or EnvConfig.id
        return [*glamrl, "eval", "--agent", spec.agent, "--env", env, "--episodes", str(spec.episodes),
                "--seed", str(seed), "--seeding", experiment.seeding, "--out", str(directory / "eval.json")]
    command = "train" if spec.clone is None else "bc"
    data = [] if spec.clone is None else ["--data", str(demos_file(experiment, spec, seed))]
    return [*glamrl, command, *data, "--config", spec.config, "--run-dir", str(directory), "--no-progress",
            *train_overrides(experiment, spec, seed)]


def demos_command(experiment: Experiment, spec: RunSpec, seed: int) -> list[str]:
    """The `glamrl demos` command line that records a clone's demonstrations (`demos_file`): the bot on the run's
    level, `spec.clone` episodes from seed DEMO_SEEDS x seed, prompts of the config's prompt.nbr_obs. Recorded
    again, they are the same records (the bot and the seeds are fixed)."""
    cfg = load_train_config(spec.config, train_overrides(experiment, spec, seed))
    return [sys.executable, "-m", "glamrl.cli", "demos", "--agent", "bot", "--env", cfg.env.id,
            "--episodes", str(spec.clone), "--seed", str(DEMO_SEEDS * seed), "--nbr-obs", str(cfg.prompt.nbr_obs),
            "--out", str(demos_file(experiment, spec, seed))]


def suite_command(experiment: Experiment, spec: RunSpec, seed: int) -> list[str]:
    """The `glamrl eval --suite` command line of a run's suite (`RunSpec.suite`): the trained agent of its run
    directory on its own level, or the evaluation-only agent on the experiment's; the evaluation episodes of
    `seed`, so every agent of the experiment plays the same ones."""
    directory = run_dir(experiment, spec, seed)
    agent = (["--agent", spec.agent, "--env", experiment.env or EnvConfig.id, "--seeding", experiment.seeding]
             if spec.agent is not None else ["--run", str(directory)])  # a run: its own env.seeding
    return [sys.executable, "-m", "glamrl.cli", "eval", *agent, "--suite", spec.suite,
            "--episodes", str(spec.suite_episodes), "--seed", str(seed), "--out", str(directory / SUITE_FILE)]


def suite_played(directory: Path) -> bool:
    """Whether RUN/suite.json holds a whole suite of the run as it is: one stopped early (`complete: false`), or
    one of a checkpoint that training has since gone past (the experiment's frames raised), is played again."""
    path = directory / SUITE_FILE
    if not path.exists():
        return False
    data = read_eval(path)
    played = (data.get("provenance") or {}).get("checkpoint") or {}
    rows = RunDir(directory).read_log() if (directory / LOG_FILE).exists() else []
    stale = bool(rows) and "frames" in played and played["frames"] < rows[-1]["frames"]
    return data.get("complete") is True and not stale


def run_tasks(experiment: Experiment, indices: list[int] | None = None, say=print) -> None:
    """Train or evaluate the runs not yet finished (all, or the task ids `indices`), one after another, each
    followed by its suite where it has one not yet played."""
    chosen = range(len(experiment.tasks)) if indices is None else indices
    if missing := [i for i in chosen if not 0 <= i < len(experiment.tasks)]:  # all of them, before any run
        raise ConfigError(f"task {missing[0]} does not exist: the experiment has tasks 0..{len(experiment.tasks) - 1}")
    for position, i in enumerate(chosen):  # a run's init_from is finished, or trained before it by this call
        spec, seed = experiment.tasks[i]
        source = source_task(experiment, spec, seed)
        if source is None:
            continue
        if source not in chosen[:position] and not is_finished(experiment, *experiment.tasks[source]):
            raise ExperimentError(f"task {i} ({run_dir(experiment, spec, seed).name}) starts from "
                                  f"{run_dir(experiment, *experiment.tasks[source]).name}, which is not finished: "
                                  f"run task {source} first")
    mismatched = []
    for i in chosen:
        spec, seed = experiment.tasks[i]
        directory = run_dir(experiment, spec, seed)
        name = directory.name
        why = mismatch(experiment, spec, seed)
        if why is not None:
            say(f"[{i}] {name}: mismatch, not trained: {why}")
            mismatched.append(name)
            continue
        if spec.clone is not None and not demos_file(experiment, spec, seed).exists():
            run_command(name, demos_command(experiment, spec, seed), i, say)  # first: is_finished counts them
        if is_finished(experiment, spec, seed):
            say(f"[{i}] {name}: finished, skipped")
        else:
            run_command(name, task_command(experiment, spec, seed), i, say)
        if spec.suite is None or suite_played(directory):
            continue
        if spec.agent is None and not any(p.exists() for p in (RunDir(directory).last_checkpoint,
                                                                RunDir(directory).backup_checkpoint)):
            say(f"[{i}] {name}: suite not played: the run keeps no checkpoint (a run kept in results/); train it "
                f"under another out to play it")
            continue
        run_command(name, suite_command(experiment, spec, seed), i, say)
    if mismatched:
        raise ExperimentError(f"{', '.join(mismatched)} hold{'s' if len(mismatched) == 1 else ''} another "
                              f"experiment's run (see above): give the experiment another out or run names")


def run_command(name: str, command: list[str], task: int, say=print) -> None:
    """Run one of task `task`'s command lines (`python -m glamrl.cli ...`), said first; a failure is an
    `ExperimentError` naming the run `name`."""
    say(f"[{task}] {name}: {shlex.join(command[1:])}")
    done = subprocess.run(command)
    if done.returncode == 0:
        return
    stopped = {130: "interrupted", 128 + signal.SIGTERM: "terminated", -signal.SIGINT: "interrupted",
               -signal.SIGTERM: "terminated", -signal.SIGKILL: "killed"}.get(done.returncode)
    what = f"was {stopped}" if stopped else "failed"
    raise ExperimentError(f"run {name} {what} (exit {done.returncode}); rerun the experiment to resume it")


SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}")
"""sbatch --time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS."""


def check_slurm_time(time: str) -> None:
    """Refuse a --time that is not one of SLURM's formats (`SLURM_TIME`)."""
    if not SLURM_TIME.fullmatch(time):
        raise ConfigError(f"--time {time!r} is not a SLURM time limit; give MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                          f"D-HH:MM:SS (e.g. 24:00:00)")


def slurm_logs(experiment: Experiment) -> Path:
    """The folder of the array tasks' SLURM logs, OUT/slurm (absolute: sbatch reads it from where it is called)."""
    return experiment.out.resolve() / "slurm"


def write_sbatch(experiment: Experiment, experiment_file: Path, out: Path, time: str = "24:00:00",
                 cpus: int = 8) -> Path:
    """A SLURM array job, one task per run: each task runs `glamrl experiment FILE --task $SLURM_ARRAY_TASK_ID`
    (skipping a finished run, resuming an unfinished one). `glamrl experiment FILE --report` afterwards.
    Creates the folder of the tasks' logs (`slurm_logs`), which SLURM does not."""
    check_slurm_time(time)
    n = len(experiment.tasks)
    names = "\n".join(f"#   {i}: {run_dir(experiment, spec, seed).name}{after(experiment, spec, seed)}"
                      for i, (spec, seed) in enumerate(experiment.tasks))
    file, logs = shlex.quote(str(experiment_file)), slurm_logs(experiment)
    script = f"""#!/bin/bash
# {MARKER}: glamrl experiment {file}, one SLURM array task per run ({n} runs).
#   sbatch {shlex.quote(str(out))}
# then, when all have ended: glamrl experiment {file} --report
# Resubmitting resumes unfinished runs and skips finished ones; a task that starts from another's run refuses
# to start before that one has finished. Tasks:
{names}
#SBATCH --job-name={shlex.quote(f"glamrl-{experiment.out.name}")}
#SBATCH --array=0-{n - 1}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
#SBATCH --output={shlex.quote(str(logs / "slurm-%A_%a.out"))}
set -euo pipefail
cd {shlex.quote(str(Path.cwd()))}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
{shlex.quote(sys.executable)} -m glamrl.cli experiment {file} --task "$SLURM_ARRAY_TASK_ID"
"""
    with writing(logs):
        logs.mkdir(parents=True, exist_ok=True)
    return write_text(out, script)


# -------------------------------------------------------------------------------- report
def ending_rows(rows: list[dict[str, float]]) -> list[tuple[dict[str, float], float]]:
    """(row, how many training episodes ended in it) for the log rows that ended any (`row_episodes`: the
    `episodes` column is cumulative); none for a log that counts no episodes (BC)."""
    from glamrl.eval.plot import row_episodes

    ended = row_episodes(rows, "success_rate")
    if ended is None:
        return []
    return [(row, n) for row, n in zip(rows, ended) if n > 0 and math.isfinite(row.get("success_rate", math.nan))]


def time_to_target(rows: list[dict[str, float]], target: float,
                   episodes: int = TARGET_EPISODES) -> tuple[float, float] | None:
    """(frames, minutes) at the first log row where the training episodes that ended in it and in the rows just
    before it, `episodes` of them or more, reached `target` success; None if none did. One row's rate is not
    enough: an early row ends few episodes, and the short ones first, which are the successes."""
    window: list[tuple[float, float]] = []  # (episodes ended, successes) of the latest rows that ended any
    for row, ended in ending_rows(rows):
        window.append((ended, row["success_rate"] * ended))
        while len(window) > 1 and sum(n for n, _ in window[1:]) >= episodes:
            window.pop(0)
        seen = sum(n for n, _ in window)
        if seen >= episodes and sum(s for _, s in window) / seen >= target:
            return row["frames"], row["duration"] / 60
    return None


def last_episodes(rows: list[dict[str, float]], episodes: int = TARGET_EPISODES) -> tuple[float, float] | None:
    """(success rate, mean length) of the training episodes that ended in the fewest last log rows holding
    `episodes` of them or more (all of them, if the run ended fewer); None if none ended. The last row alone
    holds a handful of episodes on a level of long ones."""
    window = []
    for row, ended in reversed(ending_rows(rows)):
        window.append((ended, row["success_rate"] * ended, row["num_frames_mean"] * ended))
        if sum(n for n, _, _ in window) >= episodes:
            break
    if not window:
        return None
    seen = sum(n for n, _, _ in window)
    return sum(s for _, s, _ in window) / seen, sum(f for _, _, f in window) / seen


def report_files(experiment: Experiment) -> tuple[Path, ...]:
    """OUT/report.md (it starts with `MARKER`), then the plots: OUT/success_frames.png and OUT/success_minutes.png,
    OUT/tasks_frames.png and OUT/tasks_minutes.png (each task kind's success, on a Mixed level), OUT/rows_frames.png
    (each row's success in a panel of its own)."""
    return (experiment.out / "report.md", *(experiment.out / f"{what}_{x}.png"
                                            for what in ("success", "tasks") for x in ("frames", "minutes")),
            experiment.out / "rows_frames.png")


def task_metrics(logs: list[list[dict[str, float]]]) -> list[str]:
    """The logs' success_rate_TASK columns (a level of several task kinds: one per kind), in log.csv's order."""
    from glamrl.eval.plot import log_columns

    return [c for c in log_columns(logs) if c.startswith("success_rate_")]


def task_baseline(results: list[dict[str, Any]]) -> dict[str, float]:
    """{success_rate_TASK: mean over the seeds} of an evaluated agent's per-task success (its eval.json files)."""
    rates: dict[str, list[float]] = {}
    for result in results:
        for task, summary in result.get("per_task", {}).items():
            rates.setdefault(f"success_rate_{task}", []).append(summary["success_rate"])
    return {metric: math.fsum(values) / len(values) for metric, values in rates.items()}


def read_eval(path: Path) -> dict[str, Any]:
    """An evaluation-only agent's eval.json, or one line naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid JSON ({err}); delete it and rerun the experiment to evaluate that "
                          f"agent again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not the JSON of glamrl eval; delete it and rerun the experiment")
    return data


def report(experiment: Experiment, aggregate: str = "iqm", reps: int = BOOTSTRAP_REPS) -> list[Path]:
    """The plots and the table of every run trained so far (unfinished runs are drawn as far as they got), then the
    table of the suites played, with `aggregate` ("iqm" or "mean") over seeds and `reps` bootstrap resamples for
    the intervals; returns the files written (`report_files`: the plots only when there are runs to draw; the
    suite's files under OUT/suite/ when runs played one)."""
    from glamrl.eval.plot import plot_rows, plot_runs
    from glamrl.eval.results import estimate, write_results

    trained = [(spec, [run_dir(experiment, spec, s) for s in spec.seeds
                       if (run_dir(experiment, spec, s) / LOG_FILE).exists() and mismatch(experiment, spec, s) is None])
               for spec in experiment.runs.values() if spec.agent is None]
    evaluated = {}  # {name: (seeds, success estimate, length estimate)}
    per_task = {}   # {name: {success_rate_TASK: mean over seeds}}
    for spec in experiment.runs.values():
        if spec.agent is not None:
            results = [read_eval(run_dir(experiment, spec, s) / "eval.json") for s in spec.seeds
                       if (run_dir(experiment, spec, s) / "eval.json").exists()
                       and mismatch(experiment, spec, s) is None]
            if results:
                evaluated[spec.name] = (len(results), *(estimate(results, METRICS[m], aggregate, reps)
                                                        for m in ("success", "length")))
                per_task[spec.name] = task_baseline(results)
    baselines = {name: {"success_rate": success.point, "num_frames_mean": length.point}
                 for name, (_, success, length) in evaluated.items()}
    baselines |= {name: {"success_rate": value} for name, value in experiment.references.items()}
    dirs = [d for _, group in trained for d in group]
    labels = {d: spec.name for spec, group in trained for d in group}
    md, *plots, rows_png = report_files(experiment)
    drawn = []
    if dirs:
        tasks = task_metrics([RunDir(d).read_log() for d in dirs])
        row = labels.__getitem__  # a row's seeds together, whatever init_from
        for metrics, horizontal, pngs in ((("success_rate", "num_frames_mean"), baselines, plots[:2]),
                                          (tasks, per_task, plots[2:] if tasks else [])):
            for png, x in zip(pngs, ("frames", "minutes")):
                drawn.append(plot_runs(dirs, png, x=x, metrics=metrics, labels=labels, baselines=horizontal,
                                       smooth=experiment.smooth, group_by=row))
        drawn.append(plot_rows(dirs, rows_png, labels=labels, baselines=baselines, smooth=experiment.smooth,
                               group_by=row))
    lines = [f"<!-- {MARKER}: glamrl experiment --report -->", "", f"{AGGREGATE_TITLES[aggregate]} [95% interval: "
             f"rliable's bootstrap over the seeds, {reps} resamples; evaluated agents: over the seeds and their "
             f"episodes, or one seed's episodes]; one seed: its value.", "",
             f"| agent | seeds | frames to {experiment.target:g} | minutes to {experiment.target:g} | "
             f"frames trained | minutes trained | training success, last {experiment.target_episodes} episodes | "
             f"their mean length | evaluated after training |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def over_seeds(values: list[float], runs: int, metric: str) -> str:
        return _over_seeds(values, runs, metric, aggregate, reps)

    for spec, group in trained:
        logs = [RunDir(d).read_log() for d in group]
        reached = [time_to_target(rows, experiment.target, experiment.target_episodes) for rows in logs]
        hits = [r for r in reached if r is not None]
        last = [o for o in (last_episodes(rows, experiment.target_episodes) for rows in logs) if o is not None]
        success, length = ((over_seeds([o[0] for o in last], len(group), "success"),
                            over_seeds([o[1] for o in last], len(group), "length"))
                           if last or not group else
                           ("a clone: no episodes",) * 2 if spec.clone else ("no episode finished",) * 2)
        label = spec.name + (f" (clone of {spec.clone} bot episodes)" if spec.clone else "") + (
            f" (from {spec.init_from})" if spec.init_from else "")
        lines.append(f"| {label} | {len(group)} | {over_seeds([h[0] for h in hits], len(group), 'frames')} | "
                     f"{over_seeds([h[1] for h in hits], len(group), 'minutes')} | "
                     f"{over_seeds([rows[-1]['frames'] for rows in logs if rows], len(group), 'frames')} | "
                     f"{over_seeds([rows[-1]['duration'] / 60 for rows in logs if rows], len(group), 'minutes')} | "
                     f"{success} | {length} | {evaluated_after(group, over_seeds)} |")
    for name, (seeds, success, length) in evaluated.items():
        lines.append(f"| {name} (evaluated) | {seeds} | | | | | {success.format(METRICS['success'].fmt)} | "
                     f"{length.format(METRICS['length'].fmt)} | |")
    suites = [run_dir(experiment, spec, s) / SUITE_FILE for spec, s in experiment.tasks
              if spec.suite is not None and mismatch(experiment, spec, s) is None
              and suite_played(run_dir(experiment, spec, s))]
    tables = []
    if suites:
        table, tables = write_results(suites, experiment.out / "suite", aggregate, reps)
        lines += ["", f"## Generalisation suite ({len(suites)} runs' suite.json; `glamrl results`)", "", table]
    return [write_text(md, "\n".join(lines) + "\n"), *drawn, *tables]


def evaluated_after(group: list[Path], over_seeds: Callable[[list[float], int, str], str]) -> str:
    """The runs' own evaluations after training (RUN_DIR/eval_after.json, run.eval_episodes): "success in length
    steps (N episodes)" over the seeds that have one, as `over_seeds` writes them; "" where none has."""
    results = [read_eval(d / EVAL_AFTER) for d in group if (d / EVAL_AFTER).exists()]
    if not results:
        return ""
    episodes = sorted({r["episodes"] for r in results})
    return (f"{over_seeds([r['success_rate'] for r in results], len(group), 'success')} in "
            f"{over_seeds([r['mean_length'] for r in results], len(group), 'length')} steps "
            f"({'/'.join(map(str, episodes))} episodes)")


def _over_seeds(values: list[float], runs: int, metric: str, aggregate: str, reps: int) -> str:
    """"value [low, high]" over the finite `values`, one per seed (rliable's `aggregate` and interval over seeds;
    a single value alone), and how many of the `runs` got one when not all did."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "not reached" if runs else ""
    text = interval_over_seeds(values, METRICS[metric], aggregate, reps).format(METRICS[metric].fmt)
    return text + (f" ({len(values)} of {runs})" if len(values) < runs else "")
