"""Atomic checkpoints with a backup, the one schema every training loop saves, and the RNG states that make a
resume exact.

Two files, whose paths the caller gives (a run's are `RunDir.last_checkpoint` and `RunDir.backup_checkpoint`:
`RUN_DIR/checkpoints/last.pt` and `backup.pt`): `last` is the latest checkpoint, `backup` the one before it.
A save never leaves a moment without a complete checkpoint on disk, so a kill -9 at any instant is survivable;
a load falls back to the backup when the latest file is truncated or corrupt.

Writes go through the one atomic writer (`glamrl.files.atomic_output`). A checkpoint that
does not fit the network the config builds (an architecture field changed since it was
saved) is refused in one line naming the fields that changed (`restoring`).

What a training loop saves is a `Checkpoint` (trainer, progress counters, trainable weights, optimizer,
RNGs, config, and the loop's own extras), stored as a flat dict. `save_checkpoint` and `load_checkpoint`
move any such dict between two paths; `RunDir.save_checkpoint` / `RunDir.load_checkpoint` move `Checkpoint`s
between a run's.

Checkpoints are read with `torch.load(weights_only=True)`: a state may hold tensors,
state dicts and plain Python values (dict, list, tuple, int, float, str, bool, None),
not arbitrary objects. `rng_state()` returns its RNG states in that form.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from glamrl.config import changed_fields, flatten
from glamrl.errors import GlamrlError
from glamrl.files import WriteError, atomic_output

ARCHITECTURE_SECTIONS = ("model", "prompt", "symbolic", "drrn")
"""Config sections whose fields may shape the saved tensors (named when a checkpoint does not fit)."""
# Leaf types a weights_only load accepts (with tensors, dict, OrderedDict, list, tuple).
_PLAIN = (str, int, float, bool, type(None), torch.dtype, torch.device)
# What a truncated, overwritten or unreadable file raises from torch.load.
_UNREADABLE = (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)


class CheckpointError(GlamrlError, RuntimeError):
    """No readable checkpoint although checkpoint files exist, or one that cannot be written."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint whose tensors do not fit the network the config builds."""


class Progress(NamedTuple):
    """How far a run has come: what a resumed loop continues from (zeros for a new run)."""

    log_rows: int = 0
    """rows of log.csv written, whatever the loop: one per PPO update, per `drrn.log_every` frames of DRRN, per
    `bc.log_every` optimizer steps of BC (the last row's `update` column, and where a resume cuts the logs)."""
    frames: int = 0
    """frames collected (BC: demonstration records consumed)."""
    episodes: int = 0
    """episodes finished in training."""
    duration: float = 0.0
    """seconds of training, over every invocation of the run."""


_COMMON = ("trainer", *Progress._fields, "update", "policy", "optimizer", "rng", "config")  # update: older log_rows


@dataclass
class Checkpoint:
    """What every training loop saves, whatever the agent kind, stored as one flat dict (`to_dict`) whose keys
    are those the loops have always written, so that older checkpoints load (`from_dict`)."""

    trainer: str
    """the loop that wrote it: ppo, drrn or bc (another loop refuses to resume it)."""
    progress: Progress
    policy: dict[str, Any]
    """the model's trainable state: `trainable_state_dict()`, whole tensors."""
    optimizer: dict[str, Any]
    """`optimizer.state_dict()`, whole."""
    rng: dict[str, Any]
    """`rng_state()` at the save."""
    config: dict[str, Any] | None
    """`TrainConfig.to_dict()` of the run: names the fields that changed when the tensors do not fit."""
    extra: dict[str, Any] = field(default_factory=dict)
    """the loop's own state: PPO's value_norm; DRRN's target, replay and grad_steps; BC's data and steps."""

    def __post_init__(self) -> None:
        clash = sorted(set(self.extra) & set(_COMMON))
        if clash:
            raise ValueError(f"a checkpoint's extra state may not use the common keys {clash}")

    def to_dict(self) -> dict[str, Any]:
        return {"trainer": self.trainer, **self.progress._asdict(), "policy": self.policy,
                "optimizer": self.optimizer, "rng": self.rng, "config": self.config, **self.extra}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Checkpoint:
        """The checkpoint a loaded dict holds: one written before trainers were recorded is PPO's; BC's once
        counted no episodes; before `log_rows`, the count was stored as "update" (BC's: its optimizer steps, the
        `update` column of its log then)."""
        log_rows = state["log_rows"] if "log_rows" in state else state["update"]
        return cls(trainer=state.get("trainer", "ppo"),
                   progress=Progress(log_rows, state["frames"], state.get("episodes", 0), state["duration"]),
                   policy=state["policy"], optimizer=state["optimizer"], rng=state["rng"], config=state.get("config"),
                   extra={key: value for key, value in state.items() if key not in _COMMON})


def _check_loadable(value: Any, where: str = "state") -> None:
    """Raise TypeError on anything `torch.load(weights_only=True)` would refuse, e.g. numpy values."""
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN:
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            _check_loadable(key, f"{where} key {key!r}")
            _check_loadable(item, f"{where}[{key!r}]")
    elif type(value) in (list, tuple, torch.Size):
        for i, item in enumerate(value):
            _check_loadable(item, f"{where}[{i}]")
    else:
        raise TypeError(f"checkpoint {where} is a {type(value).__qualname__}: store tensors and plain "
                        "Python values only (float(x), x.tolist(), torch.as_tensor(x)); use rng_state() for RNGs")


def _reason(error: Exception) -> str:
    """The informative line of a torch.load error."""
    text = str(error).split("WeightsUnpickler error:")[-1]
    return next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)


def save_checkpoint(last: Path, backup: Path, state: dict[str, Any]) -> Path:
    """Write `state` to the file `last` atomically; the previous one becomes `backup`. Returns `last`.

    Order: write and fsync a temp file; hard-link (or copy) `last` to a second temp file
    and rename it over `backup`; rename the first temp file over `last`; fsync the
    directory (each step through `atomic_output`). Each rename is atomic, so `last` is always a
    complete checkpoint. A `last`
    that is torn or not a checkpoint (a resume fell back to the backup) is never rotated into `backup`: the
    good backup stays until a newer good checkpoint exists.
    Raises TypeError, before writing anything, if `state` holds values a safe load refuses,
    and CheckpointError if the disk refuses the write (the previous checkpoints are kept).
    """
    _check_loadable(state)
    try:
        with atomic_output(last) as new:
            with open(new, "wb") as f:  # a file object: a failed write surfaces as the OSError behind it
                torch.save(state, f)
            if _intact(last):
                with atomic_output(backup) as old:
                    try:
                        os.link(last, old)
                    except OSError:  # filesystem without hard links
                        shutil.copyfile(last, old)
    except WriteError as err:
        raise CheckpointError(f"{err}; the previous checkpoints in {last.parent} are kept") from None
    return last


def _intact(path: Path) -> bool:
    """Whether `path` is a complete torch checkpoint (a zip whose directory, written last, can be read).

    Only the end of the file is read, so a save does not re-read the previous checkpoint;
    a torn or overwritten file fails here.
    """
    try:
        with zipfile.ZipFile(path):
            return True
    except (OSError, zipfile.BadZipFile, EOFError, ValueError):
        return False


def load_checkpoint(last: Path, backup: Path) -> dict[str, Any] | None:
    """Load the latest readable checkpoint, tensors on CPU: the file `last`, else `backup` (with a warning).

    Returns None when neither exists; raises `CheckpointError` when files exist but none of them can be read.
    """
    paths = [Path(last), Path(backup)]
    if not any(p.exists() for p in paths):
        return None
    failures = []
    for path in paths:
        try:
            with warnings.catch_warnings():  # torch's own complaint about a garbage file
                warnings.filterwarnings("ignore", message="Detected pickle protocol")
                state = torch.load(path, map_location="cpu", weights_only=True)
        except _UNREADABLE as e:
            failures.append(f"{path}: {_reason(e)}")
            continue
        if failures:
            warnings.warn(f"unreadable checkpoint {failures[0]}; resuming from {path}", stacklevel=2)
        return state
    raise CheckpointError("no readable checkpoint: " + "; ".join(failures))


def rng_state() -> dict[str, Any]:
    """Python `random`, numpy global, torch CPU (and CUDA) RNG states, in checkpointable form."""
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),
        "numpy": {**np_state, "state": {"key": np_state["state"]["key"].tolist(),
                                        "pos": int(np_state["state"]["pos"])}},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the RNG states captured by `rng_state()`."""
    random.setstate(state["python"])
    np_state = state["numpy"]
    np.random.set_state({**np_state, "state": {"key": np.array(np_state["state"]["key"], dtype=np.uint32),
                                               "pos": np_state["state"]["pos"]}})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed Python `random`, numpy's global RNG and torch's (CPU and CUDA) with `seed` (>= 0, below 2**64: the
    evaluation seeds of env.seeding=spread pass 2**32; numpy's global RNG then takes the seed's 32-bit words)."""
    random.seed(seed)
    np.random.seed(seed if seed < 2**32 else [(seed >> shift) & 0xFFFFFFFF for shift in (0, 32)])
    torch.manual_seed(seed)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """A block run from the global RNGs seeded with `seed`; their states from before it are restored after it."""
    saved = rng_state()
    seed_everything(seed)
    try:
        yield
    finally:
        set_rng_state(saved)


@contextmanager
def restoring(source: str, saved_config: dict[str, Any] | None, config: dict[str, Any], fix: str) -> Iterator[None]:
    """Turn saved tensors that do not fit the network built from `config` (`TrainConfig.to_dict()`) into one line.

    The line names `source` (where the tensors come from), the first mismatch, the architecture
    fields that differ from `saved_config` (the config stored with them), and `fix`.
    """
    try:
        yield
    except (RuntimeError, ValueError, KeyError) as err:  # torch's size mismatches, PolicyStateError, missing keys
        lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
        reason = next((line for line in lines if line.startswith(("size mismatch", "Missing", "Unexpected"))),
                      lines[0])
        changed = changed_fields(saved_config or {}, config, ARCHITECTURE_SECTIONS)
        old, new = flatten(saved_config or {}), flatten(config)
        were = ", ".join(f"{key}={old.get(key)!r} (now {new[key]!r})" for key in changed[:4])
        raise CheckpointMismatchError(
            f"{source} does not fit the model this config builds ({reason[:200].rstrip('.')})"
            + (f"; it was saved with {were}" if were else "") + f"; {fix}") from None
