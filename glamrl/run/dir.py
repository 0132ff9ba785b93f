"""Run directories: what a run owns, one training process at a time, and where outputs may go.

    with run_lock(run_dir):   # a second process gets RunDirError naming the holder's PID
        ...train...

A run directory holds (the names are defined here and nowhere else):

    config.yaml    the run's config, written first: a directory holding it is a run (`is_run_dir`)
    log.csv, probes.csv, checkpoints/, tb/, .lock    the run's data (`RUN_DATA`)
    curves.png     drawn from log.csv at the end of every training command

The rules that keep them safe, applied by every command:
- no output of any command is written at or inside the run's data (`check_output`), and a directory
  output replaced as a whole (`glamrl export`) lies neither in a run nor over the current directory;
- `--overwrite` deletes only what the run wrote (`RUN_FILES`), and refuses a directory that is not a run
  (`clear_run_dir`); a new run refuses a directory that holds a run's files without being one
  (`check_new_run_dir`).

The lock is an `fcntl.flock` on `RUN_DIR/.lock`: the kernel drops it when the holder
dies, so a `kill -9` never leaves a stale lock behind. It is re-entrant within one
process. Readers (`glamrl eval --run`, `glamrl export`) take no lock. A start that fails
before its config.yaml is written removes the lock file (and the directory) it created.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml

from glamrl.config import (RESOLVED, ConfigError, Resolved, TrainConfig, apply_overrides, changed_fields, from_dict,
                           load_yaml, without_resolved)
from glamrl.errors import GlamrlError
from glamrl.files import check_writable_dir, is_temp_of, remove, write_text

CONFIG_FILE = "config.yaml"
LOG_FILE = "log.csv"
PROBES_FILE = "probes.csv"
CHECKPOINTS = "checkpoints"
TB_DIR = "tb"
CURVES_FILE = "curves.png"
LOCK_FILE = ".lock"
RUN_DATA = (CONFIG_FILE, LOG_FILE, PROBES_FILE, CHECKPOINTS, TB_DIR, LOCK_FILE)
"""What a run needs to resume: never an output of another command."""
RUN_FILES = (*RUN_DATA, CURVES_FILE)
"""Everything a run writes: what --overwrite deletes."""

_held: dict[Path, int] = {}  # run directories this process has locked -> nesting depth


class RunDirError(GlamrlError):
    """A run directory that cannot be used: locked by another process, not a directory, unwritable, not a run."""


class OutputError(GlamrlError, ValueError):
    """An output path that cannot, or must not, be written."""


# ------------------------------------------------------------------ what a run owns
def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run directory (it holds config.yaml)."""
    return (Path(path) / CONFIG_FILE).is_file()


def enclosing_run(path: Path) -> Path | None:
    """The run directory that `path` is or lies inside (the nearest), or None."""
    resolved = Path(path).resolve()
    return next((d for d in [resolved, *resolved.parents] if is_run_dir(d)), None)


def run_data_at(path: Path) -> tuple[Path, str] | None:
    """(run directory, entry of `RUN_DATA`) when `path` is one of a run's data entries or lies inside one."""
    resolved = Path(path).resolve()
    for run in resolved.parents:
        if is_run_dir(run) and resolved.relative_to(run).parts[0] in RUN_DATA:
            return run, resolved.relative_to(run).parts[0]
    return None


def _listing(entries: Sequence[Path]) -> str:
    names = sorted(e.name for e in entries)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def clear_run_dir(run_dir: Path) -> None:
    """Delete what a run wrote in `run_dir` (for --overwrite); files the run did not write stay.

    A directory that holds files but is not a run is refused with nothing deleted. config.yaml goes
    last, so that a clear cut short still leaves a run directory. The caller holds the lock.
    """
    if not run_dir.is_dir():
        return
    entries = [e for e in run_dir.iterdir() if e.name != LOCK_FILE]
    if not is_run_dir(run_dir):
        if entries:
            raise RunDirError(f"--overwrite deletes a run, but {run_dir} is not a glamrl run directory (no "
                              f"{CONFIG_FILE}; it holds {_listing(entries)}); nothing was deleted: choose another "
                              f"--run-dir")
        return
    owned = [e for e in entries if e.name in RUN_FILES or any(is_temp_of(e.name, f) for f in RUN_FILES)]
    for entry in sorted(owned, key=lambda e: e.name == CONFIG_FILE):
        remove(entry)


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse to start a run in a directory that holds a run's files (log.csv, checkpoints/, ...) but no config.yaml."""
    if not run_dir.is_dir() or is_run_dir(run_dir):
        return
    clashes = [e for e in run_dir.iterdir() if e.name in RUN_FILES and e.name != LOCK_FILE]
    if clashes:
        raise RunDirError(f"{run_dir} holds {_listing(clashes)} but no {CONFIG_FILE}: it is not a run glamrl can "
                          f"resume, and a new run would overwrite them; move them away or choose another --run-dir")


# ------------------------------------------------------------------ where outputs may go
def check_output(path: Path, what: str = "--out", suffixes: Sequence[str] = (), directory: bool = False) -> Path:
    """Refuse, before any work and without creating anything, an output that cannot or must not be written.

    A file output (`directory=False`) must be a file name ending in one of `suffixes` (when given),
    in a folder that can be created and written, and not at or inside a run's data (`RUN_DATA`). A
    directory output, written and replaced as a whole, must not be a file, the current directory or
    one above it, a run directory or inside one.
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
    return path


# ------------------------------------------------------------------ one process per run
@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on `run_dir` (created if needed) for the duration of the block."""
    key = run_dir.resolve()
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    reason = check_writable_dir(run_dir)
    if reason is not None:
        raise RunDirError(f"--run-dir {run_dir}: {reason}")
    owner = run_data_at(run_dir)
    if owner is not None:
        raise RunDirError(f"--run-dir {run_dir} is inside {owner[1]} of the run directory {owner[0]}; "
                          f"choose a directory outside it")
    created = not run_dir.exists()
    lock = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        created_lock = not lock.exists()
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunDirError(f"cannot use --run-dir {run_dir}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            created = created_lock = False  # the holder's
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunDirError(f"{run_dir} is in use by another glamrl process (PID {holder}); "
                              f"wait for it to finish or use another --run-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = 1
        yield
    finally:
        _held.pop(key, None)
        if created_lock and run_dir.is_dir() and not is_run_dir(run_dir):  # a start that failed: leave no trace
            lock.unlink(missing_ok=True)
            if created and not any(run_dir.iterdir()):
                run_dir.rmdir()
        os.close(fd)  # closing the descriptor releases the lock


def holds_run_lock(loop: Callable) -> Callable:
    """Decorate a training loop with a `run_dir` argument to hold its lock while it runs (rank 0 only)."""
    signature = inspect.signature(loop)

    @functools.wraps(loop)
    def locked(*args, **kwargs):
        from glamrl.parallel import distributed  # torch: not imported by commands that only check paths

        run_dir = signature.bind(*args, **kwargs).arguments["run_dir"]
        with run_lock(run_dir) if distributed.current().is_main else contextlib.nullcontext():
            return loop(*args, **kwargs)
    return locked


# ------------------------------------------------------------------ the run's config
# A run directory keeps the config it was started with, in RUN_DIR/config.yaml. The rule:
# - no config.yaml in RUN_DIR: a new run, and --config is needed (a directory holding a run's other
#   files without config.yaml is refused: see glamrl.run.dir);
# - config.yaml present, no --config: resume it; dotted overrides (e.g. ppo.total_frames=...
#   to extend the run) apply on top and are recorded in config.yaml;
# - config.yaml present and --config given: resume only if both give the same config,
#   else refuse and say how to resume or start afresh (--overwrite, or another --run-dir).

def read_run_config(run_dir: Path, overrides: Sequence[str] = ()) -> TrainConfig | None:
    """RUN_DIR/config.yaml with `overrides` applied, or None when the run has no config."""
    path = run_dir / CONFIG_FILE
    if not path.exists():
        return None
    try:
        return from_dict(TrainConfig, apply_overrides(without_resolved(load_yaml(path)), overrides))
    except ConfigError as err:
        raise ConfigError(f"{err} (in the run's saved config {path}; fix it or start afresh with --overwrite)") from None


def resolve_run_config(run_dir: Path, cfg: TrainConfig | None, overrides: Sequence[str] = ()) -> tuple[TrainConfig, bool]:
    """The config a `glamrl train` on `run_dir` runs, and whether it resumes a run (see the rule above)."""
    saved = read_run_config(run_dir, overrides)
    if saved is None:
        if cfg is None:
            raise ConfigError(f"{run_dir} holds no run to resume (no {CONFIG_FILE}); start one with --config FILE")
        check_new_run_dir(run_dir)
        return cfg, False
    if cfg is not None and cfg != saved:
        changed = changed_fields(saved.to_dict(), cfg.to_dict())
        raise ConfigError(
            f"{run_dir} already holds a run with another config ({', '.join(changed[:3])} differ); resume it with "
            f"'glamrl train --run-dir {run_dir}' (plus overrides such as ppo.total_frames=N), or start afresh "
            f"with another --run-dir or --overwrite")
    return saved, True


def write_config(cfg: TrainConfig, run_dir: Path, resolved: Mapping[str, Resolved] | None = None) -> None:
    """RUN_DIR/config.yaml, written atomically: `cfg`, then the `resolved` record (setting -> value) if any."""
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    if resolved:
        text += (f"# {RESOLVED}: what the settings above became on the machine that last started this run "
                 f"(a record, not read back)\n")
        text += yaml.safe_dump({RESOLVED: {key: r.value for key, r in resolved.items()}}, sort_keys=False)
    write_text(run_dir / CONFIG_FILE, text)
