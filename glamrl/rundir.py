"""A run directory's guard: one training process at a time, and its saved config read safely.

    with run_lock(run_dir):   # a second process gets RunLockedError naming the holder's PID
        ...train...

The lock is an `fcntl.flock` on `RUN_DIR/.lock`: the kernel drops it when the holder
dies, so a `kill -9` never leaves a stale lock behind. Readers (`glamrl eval --run`,
`glamrl export`) take no lock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from glamrl.errors import GlamrlError

LOCK_FILE = ".lock"
CONFIG_FILE = "config.yaml"


class RunDirError(GlamrlError):
    """A run directory that cannot be used: locked by another process, not a directory, unwritable."""


def check_run_dir(run_dir: Path) -> None:
    """Refuse a path that cannot hold a run, before any work."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--run-dir {run_dir} is a file, not a directory")
    parent = run_dir if run_dir.exists() else next(p for p in run_dir.absolute().parents if p.exists())
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot write to {parent}: choose a writable --run-dir")


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on `run_dir` (created if needed) for the duration of the block."""
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunDirError(f"{run_dir} is in use by another glamrl process (PID {holder}); "
                              f"wait for it to finish or use another --run-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
