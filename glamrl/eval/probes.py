"""Action-probability probes: pi(a | fixed prompt) for every action, logged while a run trains.

A probe file (`run.probes: FILE`) is a YAML list; each entry is either a raw prompt
or a mission and one observation, built into GLAM's prompt with the run's action names:

    - name: red ball left
      mission: go to the red ball
      observation: [You see a red ball 1 step left]
    - name: raw
      prompt: "Possible action of the agent: ... \\n Action 0: "

The run writes RUN_DIR/probes.csv (update, frames, probe, action, prob), one row per
probe and action before training (update 0) and after every update; `glamrl plot RUN
--probes` draws it. It shows how grounding moves the model's preferences.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from glamrl.config import ConfigError, TrainConfig, from_dict, read_yaml
from glamrl.errors import GlamrlError
from glamrl.files import atomic_output, writing
from glamrl.prompts import build_prompt
from glamrl.run.dir import RunDir

COLUMNS = ("update", "frames", "probe", "action", "prob")


class ProbeError(GlamrlError, ValueError):
    """A probe file that is missing or malformed, or a run without probes.csv."""


@dataclass(frozen=True)
class Probe:
    name: str
    prompt: str


@dataclass(frozen=True)
class ProbeEntry:
    """One entry of a probe file, read as strictly as a train config (`glamrl.config.from_dict`): a raw `prompt`,
    or a `mission` and an `observation` (its sentences), which build GLAM's prompt."""

    name: str | None = None
    """what probes.csv and the plot call it (default: probe I, I its place in the file)."""
    prompt: str | None = None
    """the whole prompt, as the model reads it."""
    mission: str | None = None
    observation: tuple[str, ...] | None = None


def load_probes(path: str | Path, action_names: Sequence[str], language: str = "en") -> list[Probe]:
    """The probes of YAML file `path`, prompts built with `action_names` where the entry gives no raw prompt.
    A key given twice, an unknown key or a value of another type is refused in one line, as in a train config."""
    path = Path(path)
    if not path.is_file():
        raise ProbeError(f"probe file not found: {path} (run.probes)")
    try:
        entries = read_yaml(path, "probe file")
    except ConfigError as err:
        raise ProbeError(str(err)) from None
    if not isinstance(entries, list) or not entries:
        raise ProbeError(f"probe file {path} must hold a non-empty list of probes")
    probes = []
    for i, data in enumerate(entries):
        needs = f"probe {i} of {path} needs 'prompt' (a string) or 'mission' and 'observation' (a list)"
        if not isinstance(data, dict):
            raise ProbeError(needs)
        try:
            entry = from_dict(ProbeEntry, data)
        except ConfigError as err:
            raise ProbeError(f"probe {i} of {path}: {err}") from None
        given, built = entry.prompt is not None, entry.mission is not None and entry.observation is not None
        if given == built or (entry.mission is None) != (entry.observation is None):
            raise ProbeError(needs + (", not both" if given and built else ""))
        prompt = entry.prompt if entry.prompt is not None else \
            build_prompt(action_names, entry.mission, [list(entry.observation)], [], language)
        probes.append(Probe(entry.name if entry.name is not None else f"probe {i}", prompt))
    return probes


class ProbeLog:
    """Appends pi(a | probe) to RUN_DIR/probes.csv; on resume, first cuts rows after the checkpointed update."""

    def __init__(self, run_dir: Path, probes: Sequence[Probe], action_names: Sequence[str],
                 resume_after_update: int | None = None) -> None:
        self.path = RunDir(run_dir).probes
        self.probes = list(probes)
        self.action_names = list(action_names)
        kept = []
        if resume_after_update is not None and self.path.exists():
            with open(self.path, newline="") as f:
                kept = [r for r in csv.DictReader(f) if int(r["update"]) <= resume_after_update]
        with atomic_output(self.path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, COLUMNS)
            writer.writeheader()
            writer.writerows(kept)

    @torch.inference_mode()
    def record(self, policy: torch.nn.Module, update: int, frames: int) -> None:
        """Score every probe with `policy` (an `LLMPolicy`) and append its action probabilities."""
        probs = policy([p.prompt for p in self.probes], self.action_names).log_probs.float().exp()  # (P, A)
        with writing(self.path), open(self.path, "a", newline="") as f:
            writer = csv.writer(f)
            for probe, row in zip(self.probes, probs.tolist()):
                writer.writerows([update, frames, probe.name, a, f"{p:.6f}"] for a, p in zip(self.action_names, row))


def read_run_probes(cfg: TrainConfig) -> list[Probe] | None:
    """The probes of `run.probes` (None without), read before the run writes anything: a bad file fails its start."""
    if cfg.run.probes is None:
        return None
    return load_probes(cfg.run.probes, cfg.prompt.actions, cfg.env.language)


def start_probe_log(cfg: TrainConfig, run_dir: Path, policy: torch.nn.Module, probes: list[Probe] | None,
                    resume_after_update: int | None) -> ProbeLog | None:
    """The run's probe log of `probes` (None: no log); a new run records the untrained policy as update 0."""
    if probes is None:
        return None
    log = ProbeLog(run_dir, probes, cfg.prompt.actions, resume_after_update)
    if resume_after_update is None:
        log.record(policy, 0, 0)
    return log


def read_probes(run_dir: Path) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """{probe: {action: (frames, probabilities)}} from RUN_DIR/probes.csv."""
    path = RunDir(run_dir).probes
    if not path.exists():
        raise ProbeError(f"{run_dir} has no {path.name} (train with run.probes=FILE)")
    curves: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            frames, probs = curves.setdefault(r["probe"], {}).setdefault(r["action"], ([], []))
            frames.append(int(r["frames"]))
            probs.append(float(r["prob"]))
    return curves


def plot_probes(run_dir: Path, out: Path) -> Path:
    """One panel per probe: pi(a | probe) against frames, one line per action."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from glamrl.eval.plot import save_figure

    curves = read_probes(run_dir)
    cols = min(3, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, (probe, actions) in zip(axes.flat, curves.items()):
        for action, (frames, probs) in actions.items():
            ax.plot(frames, probs, marker=".", label=action)
        ax.set(title=probe, xlabel="frames", ylim=(0, 1))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves):]:
        ax.axis("off")
    axes[0][0].set_ylabel("pi(action | probe)")
    axes[0][0].legend(fontsize="small")
    return save_figure(fig, out)
