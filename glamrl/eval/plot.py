"""Learning curves of one or more runs as a PNG.

Runs whose `config.yaml` are equal once `env.seed` is removed are seeds of one
experiment: they are drawn as their mean over seeds with a min–max band, on a frame grid
they all cover (interpolated, cut to the shortest run). Other runs get one line each. Each
line is labelled by its agent kind, model and level, then its run names, so runs of
different agent kinds (llm, npae, drrn, symbolic, bc) compare on one figure. Any log.csv
column can be drawn; subplots are titled by the metric's label (`glamrl.run.metrics`), and
each run's curve may be smoothed by a trailing moving average before it is grouped: pooled
over the rows' episodes for the means over the episodes that ended in a row (a row that
ended 2 episodes weighs a fifth of one that ended 10). Those curves shade their first rows,
where not every env has yet run the level's time-out: only short episodes can have ended
there, and the successes end first, so the training success rate reads high.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Callable, Hashable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402

from glamrl.config import load_yaml, with_saved_defaults  # noqa: E402
from glamrl.errors import GlamrlError  # noqa: E402
from glamrl.files import atomic_output  # noqa: E402
from glamrl.run.dir import MARKER  # noqa: E402
from glamrl.run.dir import RunDir  # noqa: E402
from glamrl.run.metrics import LOG_METRICS, column_order, label  # noqa: E402

GRID_POINTS = 200
SUFFIXES = (".png", ".pdf", ".svg")  # the figure formats `plot --out` takes
DEFAULT_METRICS = ("success_rate", "return_mean")
BASELINE_DASHES = ("--", ":", "-.")  # one per baseline, in turn
GROUP_STYLES = ("-", "--", ":", "-.")  # a group's line style: past matplotlib's 10 colours, the next style
MAX_COLUMNS = 3  # more metrics than this wrap onto further rows


class UnknownMetricError(GlamrlError, ValueError):
    """A metric to plot that is neither a column of the runs' logs nor a metric glamrl logs."""


def config_key(run_dir: Path) -> str:
    """The run's config without `env.seed`, as canonical YAML; a run without config.yaml is its own key."""
    path = RunDir(run_dir).config
    if not path.exists():
        return f"<no config: {run_dir.resolve()}>"
    config = with_saved_defaults(load_yaml(path))  # a run saved before a field existed groups as what it ran
    if isinstance(config.get("env"), dict):
        config["env"].pop("seed", None)
    return yaml.safe_dump(config, sort_keys=True)


def agent_label(run_dir: Path) -> str:
    """What a run trained, for the legend: agent kind (npae for the non-pretrained LLM with heads), model, level."""
    path = RunDir(run_dir).config
    if not path.exists():
        return "?"
    config = load_yaml(path)
    agent, model, env = (config.get(k) or {} for k in ("agent", "model", "env"))
    kind = agent.get("kind", "llm")
    parts = [kind]
    if kind == "llm":
        npae = model.get("use_action_heads") and model.get("pretrained") is False
        parts = ["npae" if npae else "llm", Path(str(model.get("name", "?"))).stem] + (["lora"] if model.get("lora") else [])
    elif kind == "symbolic":
        symbolic = config.get("symbolic") or {}
        parts += [symbolic["arch"]] if "arch" in symbolic else []
        parts += ["memory"] if symbolic.get("memory") else []
    level = str(env.get("id", "")).removeprefix("BabyAI-").removesuffix("-v0")
    return " ".join(parts) + (f" on {level}" if level else "")


def group_runs(run_dirs: Sequence[str | os.PathLike],
               key: Callable[[Path], Hashable] = config_key) -> list[list[Path]]:
    """Runs grouped by `key` (default `config_key`: the same config but env.seed), groups and runs in the order
    given."""
    groups: dict[Hashable, list[Path]] = {}
    for run_dir in map(Path, run_dirs):
        groups.setdefault(key(run_dir), []).append(run_dir)
    return list(groups.values())


def log_columns(logs: Sequence[list[dict[str, float]]]) -> list[str]:
    """Every column of the logs (a log's rows share one header), in log.csv's order."""
    return column_order(key for rows in logs for key in (rows[0] if rows else ()))


def check_metrics(metrics: Sequence[str], logs: Sequence[list[dict[str, float]]]) -> None:
    """Refuse, in one line listing the logs' columns, a metric that no log holds and that glamrl never logs."""
    columns = log_columns(logs)
    for metric in metrics:
        if metric not in columns and metric not in LOG_METRICS:
            raise UnknownMetricError(f"no metric {metric!r} in the runs' logs; available: "
                                     f"{', '.join(columns or LOG_METRICS)}")


def moving_average(ys: np.ndarray, window: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Trailing mean of the last `window` points (fewer at the start): point i is the mean of ys[i-window+1 .. i],
    weighted by `weights` where given (a pooled rate: each row's rate counts as many times as it has episodes)."""
    weights = np.ones_like(ys) if weights is None else weights
    sums, totals = (np.concatenate([[0.0], np.cumsum(v)]) for v in (ys * weights, weights))
    end = np.arange(1, len(ys) + 1)
    start = np.maximum(0, end - window)
    return (sums[end] - sums[start]) / (totals[end] - totals[start])


POOLED = ("success_rate", "return_mean", "num_frames_mean")
"""Means over the episodes that ended in a row: smoothed as pooled over the window's episodes (`row_episodes`)."""


def episodic(metric: str) -> bool:
    """Whether `metric` is a mean over a row's ended episodes (`POOLED`, or a task kind's success), so that its
    first rows, before `first_time_out`, read high."""
    return metric in POOLED or metric.startswith("success_rate_")


def row_episodes(rows: list[dict[str, float]], metric: str) -> np.ndarray | None:
    """(rows,) how many episodes each row's value of `metric` is a mean over: the rows' share of the cumulative
    `episodes` for `POOLED`, `ended_TASK` for `success_rate_TASK`; None for other metrics, or a log without
    the counts (written before `ended_TASK`)."""
    if metric in POOLED and all("episodes" in r for r in rows):
        return np.diff(np.array([0.0] + [r["episodes"] for r in rows]))
    if metric.startswith("success_rate_"):
        column = "ended_" + metric.removeprefix("success_rate_")
        counts = np.array([r.get(column, np.nan) for r in rows])
        ended = ~np.isnan(np.array([r.get(metric, np.nan) for r in rows]))
        return counts if not np.isnan(counts[ended]).any() else None
    return None


def _curve(rows: list[dict[str, float]], x: str, metric: str, smooth: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, metric) of the rows that have both, the metric smoothed over `smooth` of them (pooled over their
    episodes where `row_episodes` counts them); x "minutes" is the wall-clock `duration` in minutes."""
    xs = np.array([r.get("duration", np.nan) / 60 if x == "minutes" else r.get(x, np.nan) for r in rows])
    ys = np.array([r.get(metric, np.nan) for r in rows])
    keep = ~(np.isnan(xs) | np.isnan(ys))
    weights = row_episodes(rows, metric)
    return xs[keep], moving_average(ys[keep], smooth, None if weights is None else weights[keep])


SHORT_EPISODES_ONLY = "before every env could time out: only short episodes had ended"
SPAN_LABELS = (SHORT_EPISODES_ONLY, "_short episodes only")  # the first span in the legend, the others not


def first_time_out(run_dir: Path, rows: list[dict[str, float]], x: str) -> float | None:
    """`x` (a column, or minutes of `duration`) at the first row by which every training env has run the level's
    time-out (its longest task kind's), so could have ended an episode by it. Before it only the episodes shorter than the time-out can
    have ended, the successes first: the training success rate reads high there. None for a run that logs no
    episodes (BC), has no config or has not got that far."""
    from glamrl.agents.registry import agent_kind
    from glamrl.envs.factory import make_env, task_kinds

    cfg = RunDir(run_dir).read_config()
    if cfg is None or not rows or "episodes" not in rows[0]:  # BC logs no episodes
        return None
    limit = 0  # the level's longest time-out: a BabyAI level sets it at reset, a Mixed level per task kind
    for task in task_kinds(cfg.env.id, cfg.env.task) if cfg.env.several_tasks else (cfg.env.task,):
        env = make_env(cfg.env.id, task=task, max_steps=cfg.env.max_steps)
        env.reset(seed=cfg.env.train_seed)
        limit = max(limit, env.unwrapped.max_steps)
        env.close()
    ppo = agent_kind(cfg.agent.kind).trainer.name == "ppo"
    ranks = max(1, round(rows[0]["frames"] / cfg.batch_size)) if ppo else 1  # DD-PPO's rows count all ranks
    frames = limit * cfg.env.num_envs * ranks
    row = next((r for r in rows if r["frames"] >= frames), None)
    return None if row is None else row["duration"] / 60 if x == "minutes" else row.get(x)


def group_style(index: int) -> dict[str, str]:
    """The colour and line style of the `index`-th group, the same in every panel: matplotlib's 10 colours
    with a solid line, then the same colours dashed, dotted and dash-dotted (40 groups told apart)."""
    return {"color": f"C{index % 10}", "linestyle": GROUP_STYLES[index // 10 % len(GROUP_STYLES)]}


def _plot_group(ax: plt.Axes, curves: list[tuple[np.ndarray, np.ndarray]], label: str,
                time_out: float | None, style: dict[str, str], band: bool = True) -> None:
    """The group's curve (one run's, or their mean and, where `band`, range) in `style`, and its rows before
    `first_time_out` shaded."""
    curves = [c for c in curves if len(c[0])]
    if len(curves) == 1:
        ax.plot(*curves[0], label=label, **style)
    elif curves:
        grid = np.linspace(max(c[0][0] for c in curves), min(c[0][-1] for c in curves), GRID_POINTS)
        ys = np.stack([np.interp(grid, cx, cy) for cx, cy in curves])  # (runs, GRID_POINTS)
        ax.plot(grid, ys.mean(0), label=f"{label} (mean of {len(curves)})", **style)
        if band:
            ax.fill_between(grid, ys.min(0), ys.max(0), color=style["color"], alpha=0.2)
    start = min(c[0][0] for c in curves) if curves else None
    if time_out is not None and start is not None and time_out > start:
        spans = {(p.get_x(), p.get_x() + p.get_width()) for p in ax.patches if p.get_label() in SPAN_LABELS}
        if (start, time_out) not in spans:  # groups of one config share theirs; one legend entry for all
            ax.axvspan(start, time_out, color="grey", alpha=0.12,
                       label=SPAN_LABELS[1] if spans else SPAN_LABELS[0])


def _grouped(run_dirs: Sequence[str | os.PathLike], metrics: Sequence[str], x: str, labels: dict[Path, str] | None,
             group_by: Callable[[Path], Hashable]) -> tuple[list[list[Path]], dict[Path, list], dict[Path, str],
                                                            dict[Path, float | None]]:
    """What both plots draw: the groups (`group_runs` by `group_by`), every run's log, each group's legend (by its
    first run: `labels`, else agent, model, level and run names) and its `first_time_out` (seeds share a config)."""
    groups = group_runs(run_dirs, group_by)
    logs = {run: RunDir(run).read_log() for group in groups for run in group}
    check_metrics(metrics, list(logs.values()))
    names = {group[0]: (labels or {}).get(group[0]) or f"{agent_label(group[0])}: {', '.join(r.name for r in group)}"
             for group in groups}
    time_outs = {group[0]: first_time_out(group[0], logs[group[0]], x) for group in groups}
    return groups, logs, names, time_outs


def _baselines(ax: plt.Axes, baselines: dict[str, dict[str, float]] | None, metric: str) -> None:
    """The baselines that have `metric` as horizontal black lines, each its own dash (grey is C7, a group's)."""
    for (name, values), dash in zip((baselines or {}).items(), itertools.cycle(BASELINE_DASHES)):
        if metric in values:
            ax.axhline(values[metric], linestyle=dash, color="black", label=name)


def _axis_labels(ax: plt.Axes, x: str, metric: str, smooth: int, title: str) -> None:
    """The panel's title, its axes' labels (the y one naming the smoothing) and a light grid."""
    ax.set(xlabel="wall-clock minutes" if x == "minutes" else label(x), title=title,
           ylabel=metric if smooth == 1 else f"{metric} (moving average of {smooth})")
    ax.grid(alpha=0.3)
    ax.tick_params(labelbottom=True)  # sharex hides the upper rows' ticks


def _legend(panels: Sequence[plt.Axes], spare: Sequence[plt.Axes]) -> None:
    """Every panel's legend entries once, in the first spare panel where the grid has one, else right of the last
    panel: off the curves. No legend where nothing is drawn yet (no episode has ended)."""
    entries = {name: handle for ax in panels for handle, name in zip(*ax.get_legend_handles_labels())}
    for ax in spare:
        ax.axis("off")
    if entries and len(spare):
        spare[0].legend(entries.values(), entries.keys(), fontsize="small", loc="center")
    elif entries:
        panels[-1].legend(entries.values(), entries.keys(), fontsize="small", loc="upper left",
                          bbox_to_anchor=(1.02, 1.0))


def _grid(panels: int, legend_width: float, size: tuple[float, float] = (5, 4),
          **shared: bool) -> tuple[plt.Figure, list[plt.Axes], list[plt.Axes]]:
    """A figure of `panels` axes of `size` inches, at most `MAX_COLUMNS` a row, `legend_width` inches more on the
    right where the last row has no spare axis for the legend; returns it, the panels and the spare axes."""
    columns = min(panels, MAX_COLUMNS)
    rows = -(-panels // columns)
    width = 0 if rows * columns > panels else legend_width
    fig, axes = plt.subplots(rows, columns, figsize=(size[0] * columns + width, size[1] * rows), squeeze=False,
                             **shared)
    return fig, list(axes.flat[:panels]), list(axes.flat[panels:])


def plot_runs(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, x: str = "frames",
              metrics: Sequence[str] = DEFAULT_METRICS, labels: dict[Path, str] | None = None,
              baselines: dict[str, dict[str, float]] | None = None, smooth: int = 1,
              group_by: Callable[[Path], Hashable] = config_key) -> Path:
    """Plot `metrics` (log.csv columns) against `x` (a column, or "minutes" of wall clock) for the runs, one subplot
    per metric titled by its label (at most `MAX_COLUMNS` a row, all on one x range; the legend in a spare subplot
    where the last row has one, else right of the last); return the PNG path. `smooth`: each run's curve is the
    moving average of its last `smooth` points (1: as logged), pooled over their episodes where `row_episodes`
    counts them; those curves shade their rows before `first_time_out`. The runs of a group (`group_runs` by
    `group_by`: by default the same config but env.seed) are drawn as their mean and range, each group in its own
    colour and line style (`group_style`). `labels` names a group by its first run (default: agent, model, level
    and run names); `baselines` draws {label: {metric: value}} as horizontal black lines, each its own dash
    (evaluated agents).

    Raises `LogNotFoundError` naming the run when a run directory has no log.csv, and `UnknownMetricError`
    listing the columns for a metric that no log holds and glamrl never logs.
    """
    if smooth < 1:
        raise ValueError(f"plot_runs: smooth must be a window of >= 1 points, got {smooth}")
    groups, logs, names, time_outs = _grouped(run_dirs, metrics, x, labels, group_by)
    fig, panels, spare = _grid(len(metrics), legend_width=4, sharex=True)
    for ax, metric in zip(panels, metrics):
        for index, group in enumerate(groups):
            _plot_group(ax, [_curve(logs[run], x, metric, smooth) for run in group], names[group[0]],
                        time_outs[group[0]] if episodic(metric) else None, group_style(index))
        _baselines(ax, baselines, metric)
        _axis_labels(ax, x, metric, smooth, label(metric))
    _legend(panels, spare)
    return save_figure(fig, out)


OTHER_ROWS = {"color": "0.85", "linestyle": "-"}  # the other groups behind a panel's own, as context


def plot_rows(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, x: str = "frames",
              metric: str = "success_rate", labels: dict[Path, str] | None = None,
              baselines: dict[str, dict[str, float]] | None = None, smooth: int = 1,
              group_by: Callable[[Path], Hashable] = config_key) -> Path:
    """Small multiples of one `metric` against `x`: a panel per group (`group_runs` by `group_by`), titled by its
    label, drawing that group as `plot_runs` does (its colour and style, its mean and range, its early rows shaded)
    over every other group's mean in light grey, with the `baselines` in black; all panels on one x and y range. A
    group with no value of `metric` (a clone logs no episodes) gets no panel. Many groups that crowd one panel of
    `plot_runs` are read here one at a time, each against the rest. Returns the path; raises as `plot_runs` does."""
    if smooth < 1:
        raise ValueError(f"plot_rows: smooth must be a window of >= 1 points, got {smooth}")
    groups, logs, names, time_outs = _grouped(run_dirs, [metric], x, labels, group_by)
    curves = {group[0]: [_curve(logs[run], x, metric, smooth) for run in group] for group in groups}
    drawn = [(index, group) for index, group in enumerate(groups) if any(len(cx) for cx, _ in curves[group[0]])]
    shown = drawn or list(enumerate(groups))[:1]  # a group without the metric (a clone's episodes) gets no panel
    fig, panels, spare = _grid(len(shown), legend_width=3, size=(4, 2.8), sharex=True, sharey=True)
    for ax, (index, group) in zip(panels, shown):
        ax.plot([], [], label="the other rows", **OTHER_ROWS)  # their legend entry, once
        for other in groups:
            if other is not group:  # a label that starts with "_" stays out of the legend
                _plot_group(ax, curves[other[0]], "_other", None, OTHER_ROWS, band=False)
        if not drawn:
            ax.text(0.5, 0.5, f"no {label(metric)} logged yet", transform=ax.transAxes, ha="center")
        _plot_group(ax, curves[group[0]], "_" + names[group[0]], time_outs[group[0]] if episodic(metric) else None,
                    group_style(index))  # named by the panel's title
        _baselines(ax, baselines, metric)
        _axis_labels(ax, x, metric, smooth, names[group[0]] + (f" (mean of {len(group)})" if len(group) > 1 else ""))
    _legend(panels, spare)
    return save_figure(fig, out)


def save_figure(fig: plt.Figure, out: str | os.PathLike) -> Path:
    """Lay `fig` out, write it atomically to `out` (PNG, or PDF or SVG by its suffix; its folder created), close it.
    Its metadata holds `MARKER` (PNG: Software, PDF and SVG: Creator), so that a later plot may replace it."""
    fig.tight_layout()
    out = Path(out)
    fmt = out.suffix.lstrip(".").lower() or "png"
    try:
        with atomic_output(out) as tmp:
            fig.savefig(tmp, dpi=100, format=fmt, metadata={"Software" if fmt == "png" else "Creator": MARKER})
    finally:
        plt.close(fig)
    return out
