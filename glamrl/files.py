"""Writing files: the one atomic writer, and the disk's refusals as one error naming the file.

    with atomic_output(path) as tmp:          # a temporary name next to `path`
        torch.save(state, tmp)                # any writer that takes a path (PIL, matplotlib, safetensors)
    # `path` now holds the complete file; had the block failed, `path` would be untouched

Every file glamrl writes whole (checkpoints, config.yaml, log.csv rewrites, demos, JSON
results, tables, plots, GIFs, exports) goes through `atomic_output`: the output is written
under `.NAME.tmp-PID-NS`, flushed to disk, and renamed over NAME, so NAME is either the old
file or the complete new one, never a partial one. A temporary is removed when its block
fails; those left by processes that were killed are removed by the next write of NAME, and a run's
temporaries also when its directory is next locked (a killed run's last write may have no successor).
A full disk, a file-size limit or a permission error inside the block (including torch's
and safetensors' versions of them) becomes a `WriteError` naming the file.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError

from glamrl.errors import GlamrlError

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})
"""errno values that mean the file system refused a write (not a bug in glamrl)."""
_TORCH_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "unexpected pos")  # torch.save's RuntimeErrors


class WriteError(GlamrlError, OSError):
    """The file system refused a write: full, over a file-size limit, read-only, or not permitted."""


class OutputExistsError(WriteError):
    """A directory output appeared, not empty, while it was being written (and replacing it was not asked for)."""


def disk_failure(err: BaseException) -> str | None:
    """Why the disk refused a write, if `err` says so (OSError, torch.save's or safetensors' failed write); else None."""
    if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
        return err.strerror or str(err)
    torch_write = isinstance(err, RuntimeError) and any(s in str(err) for s in _TORCH_WRITE_FAILURES)
    safetensors = isinstance(err, SafetensorError) and ("I/O error" in str(err) or "os error" in str(err))
    if not (torch_write or safetensors):
        return None
    cause = err.__context__
    while cause is not None and not (isinstance(cause, OSError) and cause.errno in DISK_ERRNOS):
        cause = cause.__context__
    if cause is not None:
        return cause.strerror
    text = str(err).split("I/O error: ")[-1] if safetensors else "the write failed"
    return text.split(" (os error")[0]


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn the disk refusing a write inside the block into one `WriteError` naming `path`."""
    try:
        yield
    except GlamrlError:
        raise
    except Exception as err:  # torch and safetensors raise their own types; anything else is re-raised as it is
        cause = err.__context__
        while cause is not None and not isinstance(cause, KeyboardInterrupt):
            cause = cause.__context__
        if cause is not None:  # Ctrl-C or SIGTERM (glamrl.cli) inside torch's writer, which wrapped it: not the disk
            raise cause from None
        reason = disk_failure(err)
        if reason is None:
            raise
        raise WriteError(f"cannot write {path}: {reason}") from None


def temp_name(path: Path, kind: str = "tmp") -> Path:
    """`.NAME.KIND-PID-NS` next to `path`: this process's temporary for it."""
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}-{time.time_ns()}")


def is_temp_of(name: str, final: str) -> bool:
    """Whether file name `name` is a temporary of the output named `final` (see `temp_name`)."""
    return any(name.startswith(f".{final}.{kind}-") for kind in ("tmp", "old"))


def writer_alive(pid: int, wrote_ns: int) -> bool:
    """Whether the process `pid` that began a temporary at `wrote_ns` (time.time_ns()) still runs. A live PID is
    not enough: PIDs are reused (Linux hands out at most 32,768 by default, threads included), so where /proc
    tells a process's start, one that started after the temporary was begun is another process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    started = _start_seconds(pid)
    return started is None or started <= wrote_ns / 1e9 + START_SLACK_S


START_SLACK_S = 0.05
"""How much later than a temporary's timestamp its writer may appear to have started: /proc counts in clock ticks."""


def _start_seconds(pid: int) -> float | None:
    """When process (or thread) `pid` started, in time.time()'s seconds; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def remove_stale_temps(path: Path) -> None:
    """Delete the temporaries of `path` whose writer process is gone (killed in the middle of a write)."""
    remove_stale_temps_in(path.parent, only_of=(path.name,))


def remove_stale_temps_in(directory: Path, only_of: Collection[str] | None = None, locked: bool = False) -> None:
    """Delete the temporaries in `directory` (of the outputs named in `only_of`, or of any) whose writer is gone.

    `locked`: the caller holds the lock that every writer of these outputs holds while it writes (a run
    directory's, for its own files), so each temporary there is a killed writer's, whatever /proc says of its PID.
    """
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        name = entry.name
        if not name.startswith("."):
            continue
        final = name[1:].rsplit(".", 1)[0]  # ".NAME.KIND-PID-NS" -> "NAME"
        if (only_of is not None and final not in only_of) or not is_temp_of(name, final):
            continue
        pid, wrote_ns = name.rsplit("-", 2)[-2:]
        if pid.isdigit() and wrote_ns.isdigit() and (locked or not writer_alive(int(pid), int(wrote_ns))):
            remove(entry)


def remove(path: Path) -> None:
    """Delete a file, a symlink or a directory tree; a missing one is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_output(path: str | os.PathLike, directory: bool = False, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to `path`; once the block succeeds it replaces `path` (see the module docstring).

    `directory`: the block fills a directory at the yielded path (created for it), which replaces
    `path` as a whole; an existing non-empty `path` is moved aside and removed only once the new one
    is in place, and with `replace=False` it is kept and `OutputExistsError` raised instead.
    The parent folders of `path` are created.
    """
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path)
        tmp = temp_name(path)
        if directory:
            tmp.mkdir()
    try:
        with writing(path):
            yield tmp
            for written in (tmp.rglob("*") if directory else [tmp]):
                if written.is_file() and not written.is_symlink():
                    _fsync(written)
            if directory:
                _publish(tmp, path, replace)
            else:
                os.replace(tmp, path)
                # rename() does nothing where both names are links to one file (a hard-linked backup whose
                # rotation a kill interrupted): the temporary is then still there, and the output already holds it
                remove(tmp)
            _fsync(path.parent)
    except BaseException:
        remove(tmp)
        raise


def _publish(tmp: Path, path: Path, replace: bool) -> None:
    """Rename the finished directory `tmp` to `path`; an old non-empty `path` goes only once the new one is there."""
    try:
        os.rename(tmp, path)  # atomic over a missing or an empty directory
        return
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if not replace:
        raise OutputExistsError(f"{path} appeared while it was being written; it was kept")
    old = temp_name(path, "old")
    os.rename(path, old)
    os.rename(tmp, path)
    remove(old)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """`text` (UTF-8) as the complete content of `path`, written atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def check_writable_dir(directory: Path) -> str | None:
    """Why a file could not be created in `directory` (made if missing), or None when one can.

    Nothing is created: the nearest existing folder above it must be a directory that takes a real
    write (permission bits do not tell root about read-only or immutable directories).
    """
    if directory.exists() and not directory.is_dir():
        return f"{directory} is a file, not a directory"
    existing = next(p for p in [directory, *directory.absolute().parents] if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        return f"{existing} is not writable: {err.strerror or err}"
    return None
