"""Run logs: `RUN_DIR/log.csv`, TensorBoard scalars in `RUN_DIR/tb/`, and the run's tracker, one stream.

The paths are the caller's (`RunDir.open_log` and `RunDir.read_log` pass a run's).

One CSV row per logged row of metrics, flushed and fsynced as it is written. Every key a loop logs is a
column: a key not seen before adds one (SB3's CSV output does the same), the file rewritten atomically with
the wider header and the earlier rows' new cells empty; the columns stay in `glamrl.run.metrics`' order
(GLAM's first), unlisted ones after them. TensorBoard and the tracker get the same keys under their tags
(`glamrl.run.metrics.tag`). On resume the CSV is cut back to the checkpoint's rows (`Progress.log_rows`), so a
crash between a log row and the checkpoint that follows it never leaves duplicate rows.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from glamrl.errors import GlamrlError
from glamrl.files import atomic_output, writing
from glamrl.run.metrics import column_order, tag
from glamrl.run.trackers import Tracker

if TYPE_CHECKING:
    from glamrl.envs.factory import EpisodeResult


class LogNotFoundError(GlamrlError, FileNotFoundError):
    """A run directory has no log.csv."""


class LogFormatError(GlamrlError, ValueError):
    """A log.csv that glamrl did not write: a cell that is not a number, a row of another width."""


def _write_atomic(path: Path, rows: list[list[str]]) -> None:
    with atomic_output(path) as tmp, open(tmp, "w", newline="") as f:
        csv.writer(f).writerows(rows)


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and the (line number, cells) of every complete row of a log.csv, for readers and for resume.

    A last line without its line end is a row that a kill cut short (the rows are flushed one by one): it is
    left out. Any other damage (a line that is not UTF-8, a row of another width) is a `LogFormatError`
    naming the file and the line."""
    lines = path.read_bytes().split(b"\n")
    lines.pop()  # after the last line end: empty, or the torn row
    rows = []
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LogFormatError(f"{path}:{number} is not UTF-8 text (glamrl writes log.csv; was it "
                                 f"overwritten?)") from None
        cells = next(csv.reader([text.removesuffix("\r")]), [])
        if cells:
            rows.append((number, cells))
    if not rows:
        return [], []
    (_, header), body = rows[0], rows[1:]
    for number, cells in body:
        if len(cells) != len(header):
            raise LogFormatError(f"{path}:{number} has another number of cells than the header ({len(cells)}, "
                                 f"not {len(header)})")
    return header, body


def _truncate(path: Path, rows: int) -> list[dict[str, str]]:
    """Keep the header and the first `rows` rows (those whose `update`, the row number, is <= `rows`); return the
    kept rows."""
    header, body = _read_rows(path)
    kept = [cells for number, cells in body if _number(cells[header.index("update")], path, number, "update")
            <= rows]
    _write_atomic(path, [header, *kept] if header else [])
    return [dict(zip(header, r)) for r in kept]


class RunLogger:
    """Append one row per `log()` to the CSV file `path` and send the same metrics to TensorBoard and the tracker.

    `resume_after_rows`: the log rows of the checkpoint being resumed (`Progress.log_rows`); rows after them are
    dropped. None starts a fresh log, replacing any existing one. `tensorboard`: the directory of the TensorBoard
    scalars; None writes none. `log()` needs `update` (the row's number, from 1) and `frames` (the TensorBoard and
    tracker step); any other key is a column.
    `tracker` (`glamrl.run.trackers.open_tracker`) is finished by `close`.
    """

    def __init__(self, path: Path, resume_after_rows: int | None = None, tensorboard: Path | None = None,
                 tracker: Tracker | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if resume_after_rows is not None and self.path.exists():
            kept = _truncate(self.path, resume_after_rows)
        else:
            _write_atomic(self.path, [])
        self._open(_read_rows(self.path)[0])  # a resumed log keeps its own header
        self._tb = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter

            # Hide TensorBoard points logged after the checkpoint by the run being resumed.
            purge_step = int(float(kept[-1]["frames"])) + 1 if kept and kept[-1].get("frames") else None
            self._tb = SummaryWriter(str(tensorboard), purge_step=purge_step)
        self._tracker = tracker

    def _open(self, columns: list[str]) -> None:
        self._columns = columns
        self._file = open(self.path, "a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=columns, restval="")

    def _add_columns(self, new: list[str]) -> None:
        """Rewrite log.csv atomically with the columns `new` added, the rows so far holding empty cells there."""
        header, body = _read_rows(self.path)
        columns = column_order([*header, *new])
        rows = [dict(zip(header, cells)) for _, cells in body]
        self._file.close()
        _write_atomic(self.path, [columns, *([row.get(c, "") for c in columns] for row in rows)])
        self._open(columns)

    def log(self, metrics: dict[str, Any]) -> None:
        """Write one update's metrics, numbers all (None or NaN: left empty in the CSV, not sent elsewhere)."""
        for key in ("update", "frames"):
            if key not in metrics:
                raise KeyError(f"RunLogger.log needs {key!r} in the metrics, got {sorted(metrics)}")
        for key, value in metrics.items():
            if not (value is None or isinstance(value, (int, float, np.number))):
                raise TypeError(f"RunLogger.log: {key!r} is {value!r}, not a number")
        with writing(self.path):
            if new := [key for key in metrics if key not in self._columns]:
                self._add_columns(new)
            self._csv.writerow({k: "" if _missing(v) else v for k, v in metrics.items()})
            self._file.flush()
            os.fsync(self._file.fileno())
        scalars = {tag(key): float(value) for key, value in metrics.items() if not _missing(value)}
        step = int(metrics["frames"])
        if self._tb is not None:
            for name, value in scalars.items():
                self._tb.add_scalar(name, value, step)
            self._tb.flush()
        if self._tracker is not None:
            self._tracker.log(scalars, step)

    def close(self, curves: Path | None = None) -> None:
        """Close the log, and finish the tracker with the run's `curves` image (None: none drawn)."""
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._tracker is not None:
            self._tracker.finish(curves)
            self._tracker = None

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def read_log(path: Path) -> list[dict[str, float]]:
    """Rows of the log.csv file `path` as floats; empty cells become NaN; a last row cut short by a kill is left
    out (`_read_rows`). `LogFormatError` names a damaged line."""
    path = Path(path)
    if not path.exists():
        raise LogNotFoundError(f"no {path.name} in {path.parent}: is it a glamrl run directory, and has it logged "
                               f"an update?")
    header, body = _read_rows(path)
    return [{k: _number(v, path, number, k) for k, v in zip(header, cells)} for number, cells in body]


def _number(cell: str, path: Path, line: int, column: str) -> float:
    if cell == "":
        return math.nan
    try:
        return float(cell)
    except ValueError:
        raise LogFormatError(f"{path}:{line}: column {column!r} holds {cell[:40]!r}, not a number") from None


def episode_stats(finished: Sequence[EpisodeResult], per_task: bool = False) -> dict[str, float]:
    """`success_rate`, `return_*` and `num_frames_*` over the episodes finished in one row; with `per_task` (a
    level of several task kinds), also `success_rate_TASK` and `ended_TASK` (how many of them ended: what the
    kind's rate rests on) for each task kind among them.

    With no finished episode it returns {}: the columns stay empty in the CSV and absent
    from TensorBoard, never NaN; so does a task kind none of whose episodes ended. `episodes` is not
    included: as in GLAM that column is the run's cumulative count, which the trainer keeps.
    """
    if not finished:
        return {}
    stats = {"success_rate": float(np.mean([e.success for e in finished]))}
    for name, values in (("return", np.array([e.episode_return for e in finished], float)),
                         ("num_frames", np.array([e.episode_length for e in finished], float))):
        stats.update({f"{name}_mean": float(values.mean()), f"{name}_std": float(values.std()),
                      f"{name}_min": float(values.min()), f"{name}_max": float(values.max())})
    if per_task:
        for task in sorted({e.task for e in finished}):
            successes = [e.success for e in finished if e.task == task]
            stats[f"success_rate_{task}"] = float(np.mean(successes))
            stats[f"ended_{task}"] = float(len(successes))
    return stats
