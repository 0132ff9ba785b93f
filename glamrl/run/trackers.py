"""Experiment trackers (`run.tracker`): the run's log sent to Weights & Biases or trackio as well.

A tracker gets the resolved config when it opens, then every row of log.csv as scalars named by their
TensorBoard tags (`glamrl.run.metrics.tag`: `charts/return_mean`, `losses/approx_kl`) at step `frames`,
and, when it finishes, the run's curves image. `RunLogger` drives it beside log.csv and TensorBoard, so all
three hold the same stream. Each invocation of a run (a resume included) is one tracker run, named after
the run directory. The packages are optional extras (`pip install glamrl[wandb]`), imported only here.

- wandb: W&B's own settings apply (`WANDB_MODE=offline` keeps it off the network, `WANDB_DIR`,
  `WANDB_ENTITY`); `wandb sync` uploads an offline run later.
- trackio: a local store (`TRACKIO_DIR`, default ~/.cache/huggingface/trackio); `trackio show` opens it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from glamrl.errors import GlamrlError

CURVES_KEY = "curves"
"""the name the run's curves image is logged under."""


class TrackerNotInstalledError(GlamrlError, ImportError):
    """`run.tracker` names a tracker whose package is not installed."""


class Tracker(Protocol):
    """What `RunLogger` sends a tracker; opened with the run's config (`open_tracker`)."""

    def log(self, scalars: Mapping[str, float], step: int) -> None:
        """One row of the log, {tag: value}, at `step` (the row's frames)."""

    def finish(self, curves: Path | None) -> None:
        """Log the curves image (when there is one) and close the tracker run."""


def _package(kind: str) -> ModuleType:
    try:
        return importlib.import_module(kind)
    except ImportError:
        raise TrackerNotInstalledError(f"run.tracker={kind} needs the {kind} package, which is not installed: "
                                       f"pip install 'glamrl[{kind}]' (or set run.tracker=none)") from None


class PackageTracker:
    """A run of a tracker package through W&B's module API (`init`, `log`, `Image`, `finish`), which trackio
    copies: one class for both."""

    def __init__(self, kind: str, project: str, name: str, config: Mapping[str, Any]) -> None:
        self._package = _package(kind)
        self._package.init(project=project, name=name, config=dict(config))
        self._step = 0

    def log(self, scalars: Mapping[str, float], step: int) -> None:
        self._package.log(dict(scalars), step=step)
        self._step = step

    def finish(self, curves: Path | None) -> None:
        if curves is not None:  # at the last row's step: W&B refuses a step that goes back
            self._package.log({CURVES_KEY: self._package.Image(str(curves))}, step=self._step)
        self._package.finish()


TRACKERS = ("wandb", "trackio")
"""`run.tracker`'s values besides none: the packages `PackageTracker` drives."""


def check_installed(kind: str) -> None:
    """Refuse, in one line naming the extra to install, a `run.tracker` whose package is missing ("none": fine)."""
    if kind != "none":
        _package(kind)


def open_tracker(kind: str, project: str, name: str, config: Mapping[str, Any]) -> Tracker | None:
    """The tracker `run.tracker=kind` names, opened on tracker run `name` in `project` with `config`; None for
    "none"."""
    return None if kind == "none" else PackageTracker(kind, project, name, config)
