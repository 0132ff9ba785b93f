"""What the training loops share (PPO, DRRN, behavioural cloning): `train_run_dir`, the one place that takes a run
directory's lock and decides whether the run resumes; a `Session` on the run directory, from opening or resuming
the run to its last checkpoint; and the evaluation before and after.

    result = train_run_dir(RunDir(run_dir), cfg, overrides)   # locked; new, resumed or refused; the registry's loop

Each loop (`glamrl/trainers/ppo.py`, `drrn.py`, `bc.py`) reads top to bottom as its own algorithm and goes
through its session in the same order:

    session = open_session(cfg, run_dir, resume, "ppo", progress, say)   # seeded; resuming: the checkpoint read
    ...envs, model, optimizer...
    log_rows, frames, episodes, duration = session.restore(model, optimizer)   # zeros for a new run
    ...the loop's own state from session.resumed.extra, inside `with session.restoring():`...
    success_before = session.begin(model)   # config.yaml recorded, a new run evaluated, the log opened
    while ...:
        ...
        session.log(metrics)
        session.save(model, optimizer, Progress(log_rows, frames, episodes, duration), extra={...})
    return session.finish(model, log_rows, frames, success_before)   # curves drawn, log closed, run evaluated

A loop trains the run directory it is given, which its caller holds locked (`train_run_dir`: `glamrl train`,
`glamrl bc`, `glamrl.train`); a test may call a loop on a directory of its own.
The config is recorded only once the envs and the model could be built and the checkpoint restored into
them: a start that fails leaves the run directory as it was. Under torchrun rank 0 alone reads and writes
the run directory: the other ranks receive its checkpoint (or its refusal), stay silent, and take part in
`save` only to gather a sharded state.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from glamrl.agents.factory import make_agent
from glamrl.agents.registry import (LOOP_RUN_FIELDS, SHARED_SECTIONS, AgentKindError, agent_kind, check_trains, load,
                                    trainer)
from glamrl.config import ConfigError, Resolved, TrainConfig, changed_fields, flatten, load_yaml
from glamrl.errors import GlamrlError
from glamrl.memory import bound_kernel_caches, peak_rss_gb, reuse_freed_memory, rss_gb
from glamrl.parallel import distributed, sharding
from glamrl.rollout import run_episodes, summarize
from glamrl.run import checkpoint
from glamrl.run.checkpoint import Checkpoint, Progress, rng_state, seed_everything, set_rng_state
from glamrl.run.dir import EVAL_AFTER, EVAL_BEFORE, RunDir
from glamrl.run.log import RunLogger
from glamrl.run.trackers import check_installed, open_tracker

if TYPE_CHECKING:
    from glamrl.llm.compiled import CompiledBlocks

@dataclass
class TrainResult:
    run_dir: Path
    log_rows: int
    """rows of the run's log.csv (`Progress.log_rows`): PPO updates, DRRN rows, BC rows of `bc.log_every` steps."""
    row: str
    """what one of those rows is, in words (`Trainer.row`: update, log row)."""
    frames: int
    success_before: float | None
    success_after: float | None


class TrainerMismatchError(GlamrlError, ValueError):
    """A run directory resumed by another training loop than the one that wrote it."""


@dataclass
class Session:
    """One training loop's hold on its run directory (see the module docstring). Made by `open_session`."""

    cfg: TrainConfig
    run: RunDir
    trainer: str
    """the loop: a key of `glamrl.agents.registry.TRAINERS`."""
    resumed: Checkpoint | None
    """the checkpoint being resumed; None for a new run."""
    say: Callable[[str], None]
    """prints on rank 0, silent on the other ranks."""
    progress: bool
    """whether to draw a progress bar (rank 0 only)."""
    resolved: dict[str, Resolved]
    """what the session's own settings became on this machine (run.reuse_memory, run.kernel_cache), recorded with
    the model's."""
    logger: RunLogger | None = None
    """the run's log, from `begin` (rank 0 only)."""
    compiled_blocks: CompiledBlocks | None = None
    """from `begin`: an LLM policy's compiled blocks (`glamrl.llm.compiled`), whose compile time the first row
    logged says aloud; None once said, and for a model that compiles nothing."""

    @property
    def is_main(self) -> bool:
        return distributed.current().is_main

    @property
    def resumed_log_rows(self) -> int | None:
        """The log rows of the checkpoint being resumed (what the run's logs are cut back to); None for a new run."""
        return None if self.resumed is None else self.resumed.progress.log_rows

    def out_of_time(self, duration: float) -> bool:
        """Whether `duration` seconds of training (the run's, summed over its invocations) used up run.max_minutes."""
        return self.cfg.run.max_minutes is not None and duration >= 60 * self.cfg.run.max_minutes

    def reached_success(self, metrics: dict[str, Any]) -> bool:
        """Whether a log row's training episodes reached run.stop_at_success (none ended: they did not)."""
        target = self.cfg.run.stop_at_success
        return target is not None and metrics.get("success_rate", math.nan) >= target

    def restoring(self) -> contextlib.AbstractContextManager:
        """A block whose loads from the resumed checkpoint become one error line when they do not fit the config."""
        return checkpoint.restoring(f"the checkpoint in {self.run.checkpoints}", self.resumed.config, self.cfg.to_dict(),
                                    "resume with the values it was saved with, or start afresh with --overwrite or "
                                    "another --run-dir")

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Progress:
        """Resuming: load the checkpoint's trainable weights, optimizer and RNG states into `model` and
        `optimizer`. Returns the progress to continue from (zeros for a new run)."""
        if self.resumed is None:
            return Progress()
        with self.restoring():
            sharding.load_state(model, optimizer, self.resumed.policy, self.resumed.optimizer)
        set_rng_state(self.resumed.rng)
        return self.resumed.progress

    def begin(self, model: torch.nn.Module, when: str = "before training") -> float | None:
        """Once everything is built and restored: say where a resumed run continues; record config.yaml, with
        what the model's `auto` settings became on this machine (an LLM policy's `resolved`, said aloud);
        evaluate a new run's model; open the log. Returns the success rate `when` (None when resuming, or
        with no evaluation episodes)."""
        if self.resumed is not None:
            done = self.resumed.progress
            self.say(f"resuming {self.run} after {trainer(self.trainer).row} {done.log_rows} ({done.frames} frames)")
        if self.is_main:
            resolved = {**self.resolved, **getattr(model, "resolved", {})}
            for key, r in resolved.items():
                self.say(f"{key}: {r.value} ({r.why})")
            self.run.write_config(self.cfg, resolved)
            self.compiled_blocks = getattr(model, "compiled_blocks", None)
        success = (report_success(self.cfg, model, when, self.say, self._saver(EVAL_BEFORE, Progress()))
                   if self.resumed is None else None)
        if self.is_main:
            run = self.cfg.run  # the tracker gets config.yaml as recorded, `resolved` included
            tracker = open_tracker(run.tracker, run.tracker_project, self.run.path.name, load_yaml(self.run.config))
            self.logger = self.run.open_log(self.resumed_log_rows, tensorboard=run.tensorboard, tracker=tracker)
        return success

    def log(self, metrics: dict[str, Any]) -> None:
        """One row of the run's log (rank 0), with the process's memory at its end."""
        if self.logger is not None:
            self.logger.log({**metrics, "rss_gb": rss_gb(), "peak_rss_gb": peak_rss_gb()})
        if self.compiled_blocks is not None:  # model.compile: the first passes' compile time, said once
            self.say(self.compiled_blocks.report(f"{trainer(self.trainer).row} {metrics['update']}"))
            self.compiled_blocks = None

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, progress: Progress,
             extra: dict[str, Any] | None = None) -> None:
        """Checkpoint the run: the common state, plus the loop's `extra`. Every rank calls it: a sharded state is
        gathered onto rank 0, which writes it."""
        policy_state, optimizer_state = sharding.full_state(model, optimizer)
        if self.is_main:
            self.run.save_checkpoint(Checkpoint(self.trainer, progress, policy_state, optimizer_state, rng_state(),
                                                self.cfg.to_dict(), extra or {}))

    def finish(self, model: torch.nn.Module, log_rows: int, frames: int, success_before: float | None,
               when: str = "after training", curves: Sequence[str] = ("success_rate", "return_mean")) -> TrainResult:
        """Draw the log's `curves` (metric names) into RUN_DIR/curves.png, close the log (its tracker getting
        the image), and evaluate the trained model."""
        if self.logger is not None:
            from glamrl.eval.plot import plot_runs

            self.logger.close(plot_runs([self.run.path], self.run.curves, metrics=curves))
        return TrainResult(self.run.path, log_rows, trainer(self.trainer).row, frames, success_before,
                           report_success(self.cfg, model, when, self.say,
                                          self._saver(EVAL_AFTER, Progress(log_rows, frames))))

    def _saver(self, name: str, progress: Progress) -> Callable[[dict[str, Any]], Any] | None:
        """Rank 0: what saves an evaluation summary of the model at `progress` as the run directory's `name`."""
        from glamrl.eval.provenance import write_evaluation

        if not self.is_main:
            return None
        return lambda summary: write_evaluation(self.run.path / name, self.cfg, summary, run_dir=self.run.path,
                                                progress=progress, greedy=self.cfg.run.eval_greedy)


def train_run_dir(run: RunDir, cfg: TrainConfig | None, overrides: Sequence[str] = (), overwrite: bool = False,
                  loop: Callable[..., TrainResult] | None = None, command: str = "glamrl train", progress: bool = True,
                  say: Callable[[str], None] = print) -> TrainResult:
    """Train, resume or refuse the run in `run`, holding its lock throughout: the one place that takes a run
    directory's lock and decides about resuming (as TRL's `train(resume_from_checkpoint=...)` does).

    `cfg`: the --config file with the dotted `overrides` applied; None resumes the run with its saved config and
    the `overrides` (the rule: `RunDir.resolve_config`; `overwrite` starts afresh). `loop`: the training loop,
    called as `loop(cfg, run_dir, resume=..., progress=..., say=...)`; None: the one the registry names for the
    config's agent kind. `command`: how the run is resumed, for a refusal's advice. Under torchrun rank 0 alone
    takes the lock and reads the run directory; the other ranks receive its answer (or its refusal).
    """
    with contextlib.ExitStack() as held:
        def claim() -> tuple[TrainConfig, bool]:
            held.enter_context(run.lock())
            return run.resolve_config(cfg, overrides, overwrite=overwrite, command=command)

        chosen, resume = distributed.from_main(claim)
        return (loop or kind_loop(chosen.agent.kind))(chosen, run.path, resume=resume, progress=progress, say=say)


def kind_loop(kind: str) -> Callable[..., TrainResult]:
    """The training loop `glamrl train` runs for the agent kind `kind` (the registry's); an evaluation-only kind
    is refused in one line."""
    found = agent_kind(kind).trainer  # ppo (llm, symbolic), drrn, ...
    if found is None:
        raise AgentKindError(f"agent.kind={kind} is evaluated, not trained: glamrl eval --agent {kind}")
    return load(found.loop)


def open_session(cfg: TrainConfig, run_dir: Path, resume: bool, trainer: str, progress: bool = True,
                 say: Callable[[str], None] = print) -> Session:
    """Check that the loop `trainer` trains this agent kind and reads every field the config sets, check the
    launch, read RUN_DIR's last checkpoint when resuming, and seed everything.

    `trainer` (a key of `glamrl.agents.registry.TRAINERS`) must be the loop that wrote the checkpoint. Under
    torchrun rank 0 reads the checkpoint and the other ranks receive it (or its refusal); only rank 0 speaks and
    draws progress.
    """
    check_reads(cfg, trainer)
    sharding.check_launch(cfg.run.sharding)
    check_installed(cfg.run.tracker)
    if not distributed.current().is_main:
        progress, say = False, lambda _: None
    run = RunDir(run_dir)
    state = distributed.from_main(lambda: resumed_state(run, cfg.run.checkpoint_every) if resume else None)
    if state is not None and state.trainer != trainer:
        raise TrainerMismatchError(
            f"{run} was trained by {state.trainer}, not {trainer}: start a new run from it "
            f"with agent.init_from={run} and another --run-dir")
    seed_everything(cfg.env.seed)  # the same initial weights on every rank
    reuse = Resolved("true", reuse_freed_memory()) if cfg.run.reuse_memory else \
        Resolved("false", "glibc's own thresholds: large blocks mapped afresh at every allocation")
    kernels = kernel_caches(cfg.run.kernel_cache)
    return Session(cfg, run, trainer, state, say, progress, {"run.reuse_memory": reuse, "run.kernel_cache": kernels})


def kernel_caches(entries: int) -> Resolved:
    """run.kernel_cache applied (glamrl.memory.bound_kernel_caches): the caps in force, and why."""
    caps = bound_kernel_caches(entries)
    if set(caps.values()) == {str(entries)}:
        return Resolved(str(entries), "bf16 matmul kernels kept in oneDNN's and in ideep's cache, fixed by the "
                                      "process's first bf16 matmul")
    return Resolved(", ".join(f"{name}={value}" for name, value in caps.items()),
                    "set before this session: by the environment, which wins over run.kernel_cache, or by an "
                    "earlier session in this process")


def check_reads(cfg: TrainConfig, loop: str) -> None:
    """Refuse, in one line, a config that the training loop `loop` cannot honour whole: an agent kind it does not
    train, or fields set to other than their defaults that neither it nor the kind reads (another loop's section,
    a `run` field it does not honour)."""
    kind = check_trains(cfg.agent.kind, loop)
    declared = trainer(loop)
    sections = {*SHARED_SECTIONS, *declared.sections, *([kind.section] if kind.section else [])}
    ignored_run = {f"run.{name}" for name in LOOP_RUN_FIELDS if name not in declared.run_fields}
    ignored = [key for key in changed_fields(TrainConfig().to_dict(), cfg.to_dict())
               if key.split(".")[0] not in sections or key in ignored_run]
    if ignored:
        values, them = flatten(cfg.to_dict()), "them" if len(ignored) > 1 else "it"
        but = f", not {', '.join(sorted(ignored_run))}" if ignored_run else ""
        raise ConfigError(f"{', '.join(f'{key}={values[key]}' for key in ignored)}: the {loop} loop does not read "
                          f"{them}; for agent kind {kind.name} it reads the sections {', '.join(sorted(sections))}"
                          f"{but}: leave {them} out")


def resumed_state(run: RunDir, checkpoint_every: int) -> Checkpoint | None:
    """The run's last checkpoint, once its log reads whole: a damaged log stops the resume here, before anything
    of the run (config.yaml, its history) is rewritten. None: no checkpoint yet, and the run starts over, unless
    its log has more than `checkpoint_every` rows, past the first checkpoint: then its checkpoints were removed (a
    run kept without them, as results/ keeps finished runs), and starting over would replace its log. A run killed
    between its first checkpoint's log row and the checkpoint itself starts over."""
    state = run.load_checkpoint()
    rows = run.read_log() if run.log.exists() else []
    if state is None and len(rows) > checkpoint_every:  # row `checkpoint_every` is logged just before its checkpoint
        raise checkpoint.CheckpointError(
            f"{run} has {len(rows)} log rows but no checkpoint (no {run.last_checkpoint}): it cannot resume, and "
            f"training it again would replace its log; train a copy of its config in another --run-dir, or start "
            f"it afresh with --overwrite")
    return state


def report_success(cfg: TrainConfig, model: torch.nn.Module, when: str, say: Callable[[str], None],
                   save: Callable[[dict[str, Any]], Any] | None = None) -> float | None:
    """Success rate on `cfg.run.eval_episodes` evaluation episodes, said aloud (and its summary given to `save`);
    None when that is 0."""
    if not cfg.run.eval_episodes:
        return None
    summary = evaluate_policy(cfg, model)
    if save is not None:
        save(summary)
    lo, hi = summary["success_ci"]
    say(f"success rate {when}: {summary['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) in "
        f"{summary['mean_length']:.1f} steps on average ({cfg.run.eval_episodes} episodes)")
    return summary["success_rate"]


def evaluate_policy(cfg: TrainConfig, policy: torch.nn.Module) -> dict[str, Any]:
    """The policy's success on the evaluation episodes of `glamrl eval --run` (seeds apart from training): episode
    k from env.eval_seed + k, the ranks playing consecutive blocks of them."""
    ranks = distributed.current()
    episodes, world = cfg.run.eval_episodes, ranks.world_size
    share = episodes // world + (ranks.rank < episodes % world)
    first = ranks.rank * (episodes // world) + min(ranks.rank, episodes % world)  # this rank: first..first+share-1
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, envs, greedy=cfg.run.eval_greedy)
    try:
        with sharding.gathered(policy):  # ranks play different episodes: a sharded policy acts on whole weights
            results = run_episodes(envs, agent, share, seed=cfg.env.eval_seed + first)
    finally:
        envs.close()
    return summarize(distributed.gather_lists(results))
