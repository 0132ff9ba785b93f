"""Run directories: `RunDir`, the one owner of a run's paths, its lock, its config and the resume rule.

    run = RunDir(run_dir)
    with run.lock():   # once, by glamrl.trainers.common.train_run_dir; another holder: RunDirError naming its PID
        cfg, resume = run.resolve_config(cfg, overrides)   # the resume rule (docs/concepts.md, "The run directory")
        ...train: run.load_checkpoint(), run.write_config(cfg), run.open_log(...), run.save_checkpoint(state)...

A run directory holds (the names are defined here and nowhere else):

    config.yaml    the run's config, written first: a directory holding it is a run (`RunDir.is_run`)
    config_history.yaml   every change a resume made (`RESUMABLE`: caps such as ppo.total_frames): when, which
                   key, old and new value
    log.csv, probes.csv, checkpoints/ (last.pt, backup.pt), tb/, .lock    the run's data (`RUN_DATA`)
    curves.png     drawn from log.csv at the end of every training command
    probes.png     `glamrl plot --probes` of several runs (not the run's own: --overwrite keeps it)
    *.json         results derived from the run (`glamrl eval --run RUN_DIR --out RUN_DIR/eval.json`: a summary with
                   a success_rate, or a suite's tests), anywhere outside its data, as `glamrl export`'s card shows
                   them: --overwrite deletes them with the run (other JSON files stay)

The rules that keep them safe, applied by every command:
- no output of any command is written at or inside the run's data (`check_output`), and a directory
  output replaced as a whole (`glamrl export`) lies neither in a run nor over the current directory, and
  holds no run; a text output is written over a file only if glamrl wrote it (`MARKER`) or with --overwrite;
- `--overwrite` deletes only what the run wrote (`RUN_FILES`) and the results derived from it (`derived`), so
  that no result of the old run is shown as the new one's; it refuses a directory that is not a run
  (`RunDir.clear`); a new run refuses a directory that holds a run's files without being one
  (`RunDir.check_new`).

The lock is an `fcntl.flock` on `RUN_DIR/.lock`: the kernel drops it when the holder
dies, so a `kill -9` never leaves a stale lock behind. One place takes it, for a training command's whole run
(`glamrl.trainers.common.train_run_dir`, which also decides about resuming): taking it again in the same process
is a `RunDirError`, as from another process. Readers (`glamrl eval --run`, `glamrl export`) take no lock. A
start that fails before its config.yaml is written removes the lock file (and the directory) it created.
Taking the lock removes every temporary of the run's data (`RUN_DATA`, checkpoints/ included): only a holder writes
it, so each one there is a killed holder's; other outputs' temporaries go once /proc says their writer is gone.

This module imports neither torch nor numpy (commands that only check paths import it): `RunDir`'s
checkpoint and log methods import `glamrl.run.checkpoint` and `glamrl.run.log` when called, and pass them its
paths: those modules take plain paths and import nothing of this one.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from glamrl.config import (RESOLVED, RESUMABLE, ConfigError, Resolved, TrainConfig, apply_overrides, changed_fields,
                           config_hash, flatten, from_dict, identity_changes, load_yaml, with_saved_defaults,
                           without_resolved)
from glamrl.errors import GlamrlError
from glamrl.files import check_writable_dir, is_temp_of, remove, remove_stale_temps_in, write_text

if TYPE_CHECKING:
    from glamrl.run.checkpoint import Checkpoint
    from glamrl.run.log import RunLogger
    from glamrl.run.trackers import Tracker

CONFIG_FILE = "config.yaml"
HISTORY_FILE = "config_history.yaml"
LOG_FILE = "log.csv"
PROBES_FILE = "probes.csv"
CHECKPOINTS = "checkpoints"
LAST_CHECKPOINT, BACKUP_CHECKPOINT = "last.pt", "backup.pt"  # inside CHECKPOINTS
TB_DIR = "tb"
CURVES_FILE = "curves.png"
PROBES_PLOT = "probes.png"
LOCK_FILE = ".lock"
EVAL_BEFORE, EVAL_AFTER = "eval_before.json", "eval_after.json"
"""The run's own evaluations before and after training (run.eval_episodes > 0): results derived from it."""
RUN_DATA = (CONFIG_FILE, HISTORY_FILE, LOG_FILE, PROBES_FILE, CHECKPOINTS, TB_DIR, LOCK_FILE)
"""What a run needs to resume: never an output of another command."""
RUN_FILES = (*RUN_DATA, CURVES_FILE)
"""Everything a run writes: what --overwrite deletes."""

class RunDirError(GlamrlError):
    """A run directory that cannot be used: locked by another process, not a directory, unwritable, not a run."""


class OutputError(GlamrlError, ValueError):
    """An output path that cannot, or must not, be written."""


def _listing(entries: Sequence[Path]) -> str:
    names = sorted(e.name for e in entries)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


# ------------------------------------------------------------------ the run directory
@dataclass(frozen=True)
class RunDir:
    """One run directory: every path in it, its lock, its config (and the rule that resumes it), its
    checkpoints and its log. `RunDir(path)` touches nothing; `path` may not exist yet."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str, a Path or another RunDir

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @classmethod
    def default(cls, cfg: TrainConfig) -> RunDir:
        """runs/{env}-{model}-seed{seed}-{hash} (llm) or runs/{env}-{kind}-seed{seed}-{hash}, the hash the config's
        (`config_hash`: another lr is another directory, another ppo.total_frames the same): the one place run ids
        are made."""
        model = Path(cfg.model.name).stem.replace("/", "_") if cfg.agent.kind == "llm" else cfg.agent.kind
        return cls(Path("runs") / f"{cfg.env.id}-{model}-seed{cfg.env.seed}-{config_hash(cfg)}")

    # -------------------------------------------------------------- its paths
    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def history(self) -> Path:
        return self.path / HISTORY_FILE

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / LAST_CHECKPOINT

    @property
    def backup_checkpoint(self) -> Path:
        return self.checkpoints / BACKUP_CHECKPOINT

    @property
    def log(self) -> Path:
        return self.path / LOG_FILE

    @property
    def tensorboard(self) -> Path:
        return self.path / TB_DIR

    @property
    def probes(self) -> Path:
        return self.path / PROBES_FILE

    @property
    def curves(self) -> Path:
        return self.path / CURVES_FILE

    @property
    def probes_plot(self) -> Path:
        return self.path / PROBES_PLOT

    @property
    def is_run(self) -> bool:
        """Whether this is a run directory (it holds config.yaml)."""
        return self.config.is_file()

    # -------------------------------------------------------------- what it owns
    def derived(self) -> list[tuple[Path, dict]]:
        """The results derived from the run saved in its directory, with their contents: the *.json files outside
        its data (`RUN_DATA`) that hold an evaluation (a `success_rate`) or a suite's (`tests`)."""
        found = []
        for path in sorted(self.path.rglob("*.json")):
            if path.relative_to(self.path).parts[0] in RUN_DATA:
                continue
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and ("success_rate" in data or isinstance(data.get("tests"), dict)):
                found.append((path, data))
        return found

    def clear(self) -> None:
        """Delete what the run wrote and the results derived from it (for --overwrite); other files stay.

        A directory that holds files but is not a run is refused with nothing deleted. config.yaml goes
        last, so that a clear cut short still leaves a run directory. The caller holds the lock.
        """
        if not self.path.is_dir():
            return
        entries = [e for e in self.path.iterdir() if e.name != LOCK_FILE]
        if not self.is_run:
            if entries:
                raise RunDirError(f"--overwrite deletes a run, but {self} is not a glamrl run directory (no "
                                  f"{CONFIG_FILE}; it holds {_listing(entries)}); nothing was deleted: choose another "
                                  f"--run-dir")
            return
        owned = [e for e in entries if e.name in RUN_FILES or any(is_temp_of(e.name, f) for f in RUN_FILES)]
        for entry in [*(path for path, _ in self.derived()), *sorted(owned, key=lambda e: e.name == CONFIG_FILE)]:
            remove(entry)

    def check_new(self) -> None:
        """Refuse to start a run in a directory that holds a run's files (log.csv, checkpoints/, ...) but no config.yaml."""
        if not self.path.is_dir() or self.is_run:
            return
        clashes = [e for e in self.path.iterdir() if e.name in RUN_FILES and e.name != LOCK_FILE]
        if clashes:
            raise RunDirError(f"{self} holds {_listing(clashes)} but no {CONFIG_FILE}: it is not a run glamrl can "
                              f"resume, and a new run would overwrite them; move them away or choose another --run-dir")

    # -------------------------------------------------------------- one process per run
    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive lock on the run directory (created if needed) for the duration of the block; one held
        already, by another process or by this one, is a `RunDirError`."""
        reason = check_writable_dir(self.path)
        if reason is not None:
            raise RunDirError(f"--run-dir {self}: {reason}")
        owner = run_data_at(self.path)
        if owner is not None:
            raise RunDirError(f"--run-dir {self} is inside {owner[1]} of the run directory {owner[0]}; "
                              f"choose a directory outside it")
        created = not self.path.exists()
        lock = self.lock_file
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            created_lock = not lock.exists()
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise RunDirError(f"cannot use --run-dir {self}: {err.strerror or err}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                created = created_lock = False  # the holder's
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                if holder == str(os.getpid()):
                    raise RunDirError(f"{self} is already locked by this process: a run directory is locked once, "
                                      f"by the command that trains it (glamrl.trainers.common.train_run_dir)") from None
                raise RunDirError(f"{self} is in use by another glamrl process (PID {holder}); "
                                  f"wait for it to finish or use another --run-dir") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            # a killed writer's last temporary may have no successor; only a holder writes the run's data
            remove_stale_temps_in(self.path)
            remove_stale_temps_in(self.path, only_of=RUN_DATA, locked=True)
            remove_stale_temps_in(self.checkpoints, locked=True)
            yield
        finally:
            if created_lock and self.path.is_dir() and not self.is_run:  # a start that failed: leave no trace
                lock.unlink(missing_ok=True)
                if created and not any(self.path.iterdir()):
                    self.path.rmdir()
            os.close(fd)  # closing the descriptor releases the lock

    # -------------------------------------------------------------- its config and the resume rule
    # The rule (the table in docs/concepts.md, "Start or resume: one rule"):
    # - --overwrite (with --config): delete what the run wrote (`clear`), then a new run;
    # - no config.yaml: a new run, and --config is needed (a directory holding a run's other files without
    #   config.yaml is refused: `check_new`);
    # - config.yaml present: resume it with the config asked for (--config, else config.yaml, with the dotted
    #   overrides on top) if that differs from config.yaml in `RESUMABLE` fields only (e.g. ppo.total_frames=...
    #   to extend the run); their changes are recorded in config.yaml and config_history.yaml once the
    #   checkpoint was restored (`write_config`). Any other change is refused, naming every changed key, with
    #   how to resume or start afresh (--overwrite, or another --run-dir).
    def read_config(self, overrides: Sequence[str] = ()) -> TrainConfig | None:
        """RUN_DIR/config.yaml with `overrides` applied, or None when the run has no config."""
        if not self.config.exists():
            return None
        try:
            saved = with_saved_defaults(without_resolved(load_yaml(self.config)))
            as_saved = from_dict(TrainConfig, saved)
        except ConfigError as err:
            raise ConfigError(f"{err} (in the run's saved config {self.config}; fix it or start afresh with "
                              f"--overwrite)") from None
        if not overrides:
            return as_saved
        return from_dict(TrainConfig, apply_overrides(saved, overrides))  # a bad override: the command line's error

    def resolve_config(self, cfg: TrainConfig | None, overrides: Sequence[str] = (), overwrite: bool = False,
                       command: str = "glamrl train") -> tuple[TrainConfig, bool]:
        """The config a training command on this run directory runs, and whether it resumes a run (the rule
        above). `cfg`: the --config file with the overrides, None without --config; `command`: how the run is
        resumed, for the refusal's advice (BC: "glamrl bc --data FILE"). The caller holds the lock."""
        if overwrite:
            if cfg is None:
                raise ConfigError("--overwrite starts a run afresh: give its --config")
            self.clear()
        saved = self.read_config()
        if saved is None:
            if cfg is None:
                raise ConfigError(f"{self} holds no run to resume (no {CONFIG_FILE}); start one with --config FILE")
            self.check_new()
            return cfg, False
        asked = cfg if cfg is not None else self.read_config(overrides)
        changed = identity_changes(saved.to_dict(), asked.to_dict())
        if changed:
            caps = "bc.epochs=N" if command.startswith("glamrl bc") else "ppo.total_frames=N"
            differ = "differs" if len(changed) == 1 else "differ"
            raise ConfigError(
                f"{self} holds a run with another config ({', '.join(changed)} {differ}; a resume may change only "
                f"{', '.join(RESUMABLE)}); resume it with '{command} --run-dir {self}' (plus overrides such as "
                f"{caps}), or start afresh with another --run-dir or --overwrite")
        return asked, True

    def write_config(self, cfg: TrainConfig, resolved: Mapping[str, Resolved] | None = None) -> None:
        """RUN_DIR/config.yaml, written atomically: `cfg`, then the `resolved` record (setting -> value) if any.
        The fields `cfg` changes from the config.yaml it replaces are appended to config_history.yaml first."""
        saved = self.read_config()
        if saved is not None:
            changed = changed_fields(saved.to_dict(), cfg.to_dict())
            if changed:
                old, new = flatten(saved.to_dict()), flatten(cfg.to_dict())
                when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
                history = yaml.safe_load(self.history.read_text()) if self.history.exists() else []
                history += [{"time": when, "key": key, "old": old[key], "new": new[key]} for key in changed]
                write_text(self.history, yaml.safe_dump(history, sort_keys=False))
        text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
        if resolved:
            text += (f"# {RESOLVED}: what the settings above became on the machine that last started this run "
                     f"(a record, not read back)\n")
            text += yaml.safe_dump({RESOLVED: {key: r.value for key, r in resolved.items()}}, sort_keys=False)
        write_text(self.config, text)

    # -------------------------------------------------------------- its checkpoints and log
    def save_checkpoint(self, state: Checkpoint) -> Path:
        """Write `state` as checkpoints/last.pt, atomically; the previous one becomes backup.pt."""
        from glamrl.run.checkpoint import save_checkpoint

        return save_checkpoint(self.last_checkpoint, self.backup_checkpoint, state.to_dict())

    def load_checkpoint(self) -> Checkpoint | None:
        """The latest readable checkpoint (last.pt, else backup.pt), None when the run has none."""
        from glamrl.run.checkpoint import Checkpoint, load_checkpoint

        state = load_checkpoint(self.last_checkpoint, self.backup_checkpoint)
        return None if state is None else Checkpoint.from_dict(state)

    def open_log(self, resume_after_rows: int | None = None, tensorboard: bool = True,
                 tracker: Tracker | None = None) -> RunLogger:
        """log.csv (and tb/, and the `tracker`), cut back to its first `resume_after_rows` rows when resuming
        (`Progress.log_rows`), else started afresh."""
        from glamrl.run.log import RunLogger

        return RunLogger(self.log, resume_after_rows, self.tensorboard if tensorboard else None, tracker)

    def read_log(self) -> list[dict[str, float]]:
        """The rows of log.csv, as floats (`glamrl.run.log.read_log`): a `LogNotFoundError` when there is none."""
        from glamrl.run.log import read_log

        return read_log(self.log)


# ------------------------------------------------------------------ finding runs from any path
def enclosing_run(path: Path) -> Path | None:
    """The run directory that `path` is or lies inside (the nearest), or None."""
    resolved = Path(path).resolve()
    return next((d for d in [resolved, *resolved.parents] if RunDir(d).is_run), None)


def run_data_at(path: Path) -> tuple[Path, str] | None:
    """(run directory, entry of `RUN_DATA`) when `path` is one of a run's data entries or lies inside one."""
    resolved = Path(path).resolve()
    for run in resolved.parents:
        if RunDir(run).is_run and resolved.relative_to(run).parts[0] in RUN_DATA:
            return run, resolved.relative_to(run).parts[0]
    return None


# ------------------------------------------------------------------ where outputs may go
MARKER = "written by glamrl"
"""What marks a file that glamrl replaces without --overwrite: the first line of a text output (report.md; the
second, after its #! line, of the SLURM script), a figure's metadata (`glamrl plot`). Any other file at an
output path is the user's."""
_MARKED_BYTES = 4096  # where MARKER is looked for: the first and the last bytes (a PDF's metadata is at its end)


def glamrl_wrote(path: Path) -> bool:
    """Whether `MARKER` is in the first or the last `_MARKED_BYTES` of the file `path`."""
    try:
        with open(path, "rb") as f:
            head = f.read(_MARKED_BYTES)
            f.seek(max(0, os.fstat(f.fileno()).st_size - _MARKED_BYTES))
            return MARKER.encode() in head or MARKER.encode() in f.read()
    except OSError:
        return False


def run_below(path: Path) -> Path | None:
    """A run directory inside the directory `path` (at any depth), or None."""
    path = Path(path)
    if not path.is_dir():
        return None
    return next((c.parent for c in sorted(path.rglob(CONFIG_FILE)) if RunDir(c.parent).is_run), None)


def check_output(path: Path, what: str = "--out", suffixes: Sequence[str] = (), directory: bool = False,
                 overwrite: bool | None = None) -> Path:
    """Refuse, before any work and without creating anything, an output that cannot or must not be written.

    A file output (`directory=False`) must be a file name ending in one of `suffixes` (when given),
    in a folder that can be created and written, and not at or inside a run's data (`RUN_DATA`). A
    directory output, written and replaced as a whole, must not be a file, the current directory or
    one above it, a run directory, inside one, or hold one anywhere below it (even with --overwrite).
    `overwrite` (a command's --overwrite): False refuses an existing file that glamrl did not write
    (`glamrl_wrote`) and True replaces it; None, for outputs without a marker that their command rewrites
    on every call (eval JSONs, demos, GIFs), replaces it too.
    """
    path = Path(path)
    resolved = path.resolve()
    if directory:
        if path.exists() and not path.is_dir():
            raise OutputError(f"{what} {path} is a file; give a directory")
        if resolved in (Path.cwd().resolve(), *Path.cwd().resolve().parents):
            raise OutputError(f"{what} {path} is the current directory or one above it; give a new directory name")
        run = enclosing_run(path)
        if run is not None:
            where = "is" if run == resolved else "lies inside"
            raise OutputError(f"{what} {path} {where} the run directory {run}; choose a directory outside it")
        run = run_below(path)
        if run is not None:
            raise OutputError(f"{what} {path} holds the run directory {run}, which replacing it would delete; "
                              f"choose a directory that holds no run")
    elif path.is_dir() or path.name in ("", ".", ".."):
        raise OutputError(f"{what} {path} is a directory; give a file name")
    reason = check_writable_dir(path.parent)
    if reason is not None:
        raise OutputError(f"cannot write {what} {path}: {reason}")
    if not directory:
        if suffixes and path.suffix.lower() not in suffixes:
            raise OutputError(f"{what} {path}: give a file name ending in {' or '.join(suffixes)}")
        owner = run_data_at(path)
        if owner is not None:
            raise OutputError(f"{what} {path} is inside {owner[1]} of the run directory {owner[0]}, which the run "
                              f"needs; write it elsewhere")
        if path.exists() and not os.access(path, os.W_OK):
            raise OutputError(f"cannot write {what} {path}: permission denied")
        if overwrite is False and path.exists() and not glamrl_wrote(path):
            raise OutputError(f"{what} {path} exists and glamrl did not write it; give --overwrite to replace it, "
                              f"or choose another name")
    return path
