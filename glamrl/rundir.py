"""A run directory's guard: one training process at a time, and checks before any work.

    with run_lock(run_dir):   # a second process gets RunDirError naming the holder's PID
        ...train...

The lock is an `fcntl.flock` on `RUN_DIR/.lock`: the kernel drops it when the holder
dies, so a `kill -9` never leaves a stale lock behind. It is re-entrant within one
process. Readers (`glamrl eval --run`, `glamrl export`) take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import inspect
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from glamrl import distributed
from glamrl.errors import GlamrlError

LOCK_FILE = ".lock"
_held: dict[Path, int] = {}  # run directories this process has locked -> nesting depth


class RunDirError(GlamrlError):
    """A run directory that cannot be used: locked by another process, not a directory, unwritable."""


def check_writable_dir(directory: Path, what: str) -> None:
    """Refuse, before any work, a directory that cannot be created or written (`what` names the option)."""
    if directory.exists() and not directory.is_dir():
        raise RunDirError(f"{what} {directory} is a file, not a directory")
    existing = next(p for p in [directory, *directory.absolute().parents] if p.exists())
    if not existing.is_dir():
        raise RunDirError(f"{what} {directory}: {existing} is a file, not a directory")
    try:  # a real write: permission bits do not tell root about read-only or immutable directories
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise RunDirError(f"{what} {directory} is not writable: {err.strerror or err}") from None


def check_writable_file(path: Path, what: str = "--out") -> None:
    """Refuse, before any work, an output file that could not be written."""
    if path.is_dir():
        raise RunDirError(f"{what} {path} is a directory; give a file name")
    check_writable_dir(path.parent, what)


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
    check_writable_dir(run_dir, "--run-dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunDirError(f"cannot use --run-dir {run_dir}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunDirError(f"{run_dir} is in use by another glamrl process (PID {holder}); "
                              f"wait for it to finish or use another --run-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = 1
        yield
    finally:
        _held.pop(key, None)
        os.close(fd)  # closing the descriptor releases the lock


def holds_run_lock(loop: Callable) -> Callable:
    """Decorate a training loop with a `run_dir` argument to hold its lock while it runs (rank 0 only)."""
    signature = inspect.signature(loop)

    @functools.wraps(loop)
    def locked(*args, **kwargs):
        run_dir = signature.bind(*args, **kwargs).arguments["run_dir"]
        with run_lock(run_dir) if distributed.current().is_main else contextlib.nullcontext():
            return loop(*args, **kwargs)
    return locked


def clear_run_dir(run_dir: Path) -> None:
    """Delete everything a run wrote in `run_dir` (for --overwrite); the caller holds the lock."""
    for entry in run_dir.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
