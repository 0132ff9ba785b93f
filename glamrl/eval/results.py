"""Suite JSONs from several agents and seeds as one table (Markdown, CSV) and one bar chart.

Files with the same agent label (`glamrl eval --suite ... --out`: "bot", "random",
"llm smollm2-135m zero-shot", "run NAME" with the run's seed suffix dropped) are seeds of
one agent. Each cell is the IQM over seeds (`--aggregate mean`: the mean) of each seed's success
rate, mean return and mean episode length, with rliable's 95% stratified-bootstrap interval that
resamples the seeds and, within each, its episodes (the `per_episode` outcomes of each test;
`glamrl.stats.interval_over_episodes`). A single seed's interval resamples its episodes and its
column says so. The IQM of fewer than 4 seeds trims none of them: it is their mean. Intervals stay
in the metric's range (`glamrl.stats.METRICS`), and the bootstrap is seeded: the same files give
the same table. Suite JSONs written without `per_episode` get an interval over seeds only (none
for one seed), and a note under the table says so.

Nothing is counted twice or pooled unequally: a file named twice (or also found in a folder
given) counts once, two files with the same content are refused, and so are an incomplete
suite (`complete: false`, stopped before its last test) and seeds of one cell evaluated on
different numbers of episodes. A cell with fewer seeds than its agent's others says how many.
Each file's `provenance` (`glamrl.eval.provenance`) keys its cells: the seeds of one cell must
share their level, agent kind and model (`KEYED`), and two of them that are the same evaluation
(the same run directory and checkpoint, greedy or not, on the same episode seeds) are refused.
Files written before glamrl recorded provenance are keyed by their agent label alone, and a
note under the table names them. Values no evaluation can give (a success rate outside [0, 1],
NaN, a negative length) are refused on read.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from glamrl.errors import GlamrlError
from glamrl.files import atomic_output, write_text
from glamrl.run.dir import check_output
from glamrl.stats import (AGGREGATE_TITLES, BOOTSTRAP_REPS, BOOTSTRAP_SEED, METRICS, Estimate, Metric,
                          interval_over_episodes, interval_over_seeds)

OUT_FILES = ("results.md", "results.csv", "results.png")
TEST_FIELDS = ("success_rate", "mean_return", "success_ci")
"""What every test of a suite JSON must hold."""
TABLED = ("success", "return", "length")
"""The metrics of the table, in its order (`glamrl.stats.METRICS`)."""
KEYED = ("level", "agent", "model")
"""The provenance fields that every seed of a cell shares."""
SAME_EVALUATION = ("run_dir", "checkpoint", "greedy", "episode_seeds")
"""The provenance fields that, all equal, make two files one evaluation counted twice."""


class ResultsError(GlamrlError, ValueError):
    """An input that is not a suite JSON, or a folder holding none."""


@dataclass
class Cell:
    """One (test, agent) entry over seeds: the test's result in each seed's file."""

    results: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[tuple[Path, int | None]] = field(default_factory=list)
    """(file, episodes of the test) of each seed."""
    origins: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    """(file, provenance) of each seed whose file records it."""

    @property
    def seeds(self) -> int:
        return len(self.results)


Estimates = dict[tuple[str, str, str], Estimate | None]
"""{(test, agent, metric name): its estimate over seeds, None where a seed's file lacks the metric}."""


def estimate(summaries: Sequence[dict[str, Any]], metric: Metric, aggregate: str = "iqm",
             reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED) -> Estimate | None:
    """`metric` over seeds from each seed's evaluation summary (`glamrl.rollout.summarize`): over the seeds and
    their episodes where every summary holds its `per_episode` outcomes, equally many, else over the seeds'
    values; None where a summary lacks the metric."""
    values = [s.get(metric.summary_key) for s in summaries]
    if not values or any(v is None for v in values):
        return None
    outcomes = [(s.get("per_episode") or {}).get(metric.name) for s in summaries]
    if all(o is not None for o in outcomes) and len({len(o) for o in outcomes}) == 1 and outcomes[0]:
        return interval_over_episodes(np.array(outcomes, dtype=float).T, metric, aggregate, reps, seed)
    return interval_over_seeds(values, metric, aggregate, reps, seed)


def find_suite_files(paths: Sequence[Path]) -> list[Path]:
    """The suite JSONs among `paths`, each file once: files as given, folders searched recursively."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.json") if _read_suite(p) is not None)
            if not found:
                raise ResultsError(f"{path} holds no suite JSON (write one with glamrl eval --suite paper --out FILE)")
        elif path.is_file():
            if _read_suite(path) is None:
                raise ResultsError(f"{path} is not a suite JSON (no 'agent' and 'tests' keys)")
            found = [path]
        else:
            raise ResultsError(f"no such file or folder: {path}")
        files += [p for p in found if p.resolve() not in {f.resolve() for f in files}]
    digests: dict[str, Path] = {}
    for path in files:
        twin = digests.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
        if twin != path:
            raise ResultsError(f"{twin} and {path} hold the same results (one evaluation counted twice?); keep one")
    return files


def _read_suite(path: Path) -> dict[str, Any] | None:
    """The content of a suite JSON (a mapping with 'agent' and 'tests'), or None for any other file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    return data if isinstance(data, dict) and "agent" in data and isinstance(data.get("tests"), dict) else None


def load_suite(path: Path) -> dict[str, Any]:
    """A suite JSON that can be tabled: complete, with every test's success rate, return and interval."""
    data = _read_suite(path)
    if data is None:
        raise ResultsError(f"{path} is not a suite JSON (no 'agent' and 'tests' keys)")
    if not data["tests"]:
        raise ResultsError(f"{path} holds no test results")
    if data.get("complete") is False:
        raise ResultsError(f"{path} is an incomplete suite (complete: false, {len(data['tests'])} tests): it was "
                           f"stopped before its last test; run it to the end or leave it out")
    for test, result in data["tests"].items():
        missing = [key for key in TEST_FIELDS if not isinstance(result, dict) or key not in result]
        if missing:
            raise ResultsError(f"{path}: test {test!r} lacks {', '.join(missing)} (write it with glamrl eval --suite)")
        numbers = [result["success_rate"], result["mean_return"], *_pair(result["success_ci"]),
                   *([result["mean_length"]] if "mean_length" in result else [])]
        if not all(map(_is_number, numbers)):
            raise ResultsError(f"{path}: test {test!r} holds values that are not numbers")
        _check_values(path, test, result)
        _check_per_episode(path, test, result)
    _check_provenance(path, data.get("provenance"))
    return data


def _check_values(path: Path, test: str, result: dict[str, Any]) -> None:
    """Values an evaluation can give: each metric in its range (`glamrl.stats.METRICS`), the interval too."""
    ranges = {m.summary_key: m for m in map(METRICS.get, TABLED)}
    checked = [(key, result[key], ranges[key]) for key in ranges if key in result]
    checked += [("success_ci", x, METRICS["success"]) for x in result["success_ci"]]
    for key, value, metric in checked:
        if not (math.isfinite(value) and metric.low <= value <= metric.high):
            raise ResultsError(f"{path}: test {test!r}: {key} is {value}, outside [{metric.low:g}, {metric.high:g}]; "
                               f"no evaluation gives it")
    if result["success_ci"][0] > result["success_ci"][1]:
        raise ResultsError(f"{path}: test {test!r}: success_ci {result['success_ci']} is not [low, high]")


def _check_provenance(path: Path, origin: Any) -> None:
    """A `provenance` record, where the file has one: a mapping holding every field the pooling reads."""
    if origin is None:
        return
    missing = [key for key in (*KEYED, *SAME_EVALUATION) if not isinstance(origin, dict) or key not in origin]
    if missing:
        raise ResultsError(f"{path}: provenance lacks {', '.join(missing)} (write it with glamrl eval --suite)")


def _check_per_episode(path: Path, test: str, result: dict[str, Any]) -> None:
    """The test's `per_episode` outcomes, where it has them: lists of numbers, one per episode."""
    outcomes = result.get("per_episode")
    if outcomes is None:
        return
    if not isinstance(outcomes, dict):
        raise ResultsError(f"{path}: test {test!r}: per_episode must map success, return, length to lists")
    for name, values in outcomes.items():
        if not isinstance(values, list) or not all(map(_is_number, values)):
            raise ResultsError(f"{path}: test {test!r}: per_episode {name} must be a list of numbers")
        metric = METRICS.get(name)
        if metric is not None and not all(math.isfinite(v) and metric.low <= v <= metric.high for v in values):
            raise ResultsError(f"{path}: test {test!r}: per_episode {name} holds values outside "
                               f"[{metric.low:g}, {metric.high:g}]")
        if result.get("episodes") is not None and len(values) != result["episodes"]:
            raise ResultsError(f"{path}: test {test!r}: per_episode {name} holds {len(values)} outcomes for "
                               f"{result['episodes']} episodes")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _pair(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) and len(value) == 2 else [None]


def collect_cells(files: Sequence[Path]) -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    """(tests, agents, {(test, agent): Cell}) in order of first appearance; seeds of a cell must be of equal size,
    of one level, agent kind and model, and distinct evaluations (where their files record provenance)."""
    tests: list[str] = []
    agents: list[str] = []
    cells: dict[tuple[str, str], Cell] = {}
    for path in files:
        data = load_suite(Path(path))
        agent = data["agent"]
        agents += [agent] if agent not in agents else []
        for test, r in data["tests"].items():
            tests += [test] if test not in tests else []
            cell = cells.setdefault((test, agent), Cell())
            episodes = r.get("episodes")
            if cell.episodes and cell.episodes[0][1] != episodes:
                first, size = cell.episodes[0]
                raise ResultsError(f"{agent!r} on {test!r}: {first} ran {size} episodes, {path} {episodes}; "
                                   f"evaluate every seed with the same --episodes")
            if data.get("provenance") is not None:
                _check_pooling(agent, test, cell, path, data["provenance"])
                cell.origins.append((path, data["provenance"]))
            cell.results.append(r)
            cell.episodes.append((path, episodes))
    return tests, agents, cells


def _check_pooling(agent: str, test: str, cell: Cell, path: Path, origin: dict[str, Any]) -> None:
    """Refuse `path` as another seed of `cell` where it differs from a seed in `KEYED` or repeats one."""
    for first, other in cell.origins:
        for key in KEYED:
            if other[key] != origin[key]:
                raise ResultsError(f"{agent!r} on {test!r}: {key} differs between {first} ({_short(other[key])}) "
                                   f"and {path} ({_short(origin[key])}); seeds of one column share it: table them "
                                   f"apart")
        if drawn(other) != drawn(origin):
            raise ResultsError(f"{agent!r} on {test!r}: {first} and {path} draw actions differently "
                               f"({describe_drawing(*drawn(other))}, {describe_drawing(*drawn(origin))}); seeds of "
                               f"one column share it: table them apart")
        if all(other[key] == origin[key] for key in SAME_EVALUATION):
            raise ResultsError(f"{agent!r} on {test!r}: {first} and {path} are the same evaluation (equal "
                               f"{', '.join(SAME_EVALUATION)}); keep one")


def drawn(origin: dict[str, Any]) -> tuple[bool, float]:
    """(greedy, temperature) of a provenance record: how its actions were drawn from the policy (files written
    before glamrl recorded a temperature sampled at 1)."""
    return bool(origin["greedy"]), float(origin.get("temperature", 1.0))


def describe_drawing(greedy: bool, temperature: float) -> str:
    return "greedy" if greedy else "sampled" if temperature == 1.0 else f"sampled at temperature {temperature:g}"


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else repr(value)


def estimate_cells(cells: dict[tuple[str, str], Cell], aggregate: str = "iqm", reps: int = BOOTSTRAP_REPS,
                   seed: int = BOOTSTRAP_SEED) -> Estimates:
    """Every tabled metric of every cell over its seeds, each bootstrap seeded with `seed`."""
    return {(test, agent, name): estimate(cell.results, METRICS[name], aggregate, reps, seed)
            for (test, agent), cell in cells.items() for name in TABLED}


def markdown_table(tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell], estimates: Estimates,
                   aggregate: str = "iqm", reps: int = BOOTSTRAP_REPS) -> str:
    """Success rate, mean return and mean length over seeds with their intervals, one row per test and one column
    per agent, under a line that says what the numbers are."""
    def seeds(agent: str) -> int:
        return max(cells[t, agent].seeds for t in tests if (t, agent) in cells)

    def bases(agent: str) -> set[str]:
        return {e.basis for (_, a, _), e in estimates.items() if a == agent and e is not None}

    def column(agent: str) -> str:
        n = seeds(agent)
        if n > 1:
            return f"{agent} ({n} seeds)"
        return f"{agent} (1 seed: interval over episodes)" if bases(agent) == {"episodes"} else f"{agent} (1 seed)"

    def entry(test: str, agent: str, metric: Metric) -> str:
        found = estimates.get((test, agent, metric.name))
        if found is None:
            return "–"
        cell = cells[test, agent]
        fewer = cell.seeds < seeds(agent)  # some seeds of this agent did not run this test
        return found.format(metric.fmt) + (f" ({cell.seeds} of {seeds(agent)} seeds)" if fewer else "")

    lines = [f"{AGGREGATE_TITLES[aggregate]} [95% interval: rliable's stratified bootstrap, {reps} resamples, of "
             f"the seeds and each seed's episodes; of one seed, of its episodes]", ""]
    header = "| test | " + " | ".join(map(column, agents)) + " |"
    rule = "|---|" + "---:|" * len(agents)
    for name in TABLED:
        metric = METRICS[name]
        if all(estimates.get((t, a, name)) is None for t in tests for a in agents):
            continue  # suite JSONs without it (mean_length came later)
        lines += [f"**{metric.title}**", "", header, rule]
        for test in tests:
            lines.append(f"| {test} | " + " | ".join(entry(test, a, metric) for a in agents) + " |")
        lines.append("")
    older = sorted({a for (_, a, _), e in estimates.items() if e is not None and e.episodes == 0})
    if older:
        lines += [f"Without per-episode outcomes (suite JSONs written before glamrl saved them): "
                  f"{', '.join(older)}; their intervals are over seeds only, none for one seed.", ""]
    unkeyed = sorted({str(path) for cell in cells.values() for path, _ in cell.episodes}
                     - {str(path) for cell in cells.values() for path, _ in cell.origins})
    if unkeyed:
        lines += [f"Warning: without provenance (suite JSONs written before glamrl recorded it), pooled by agent "
                  f"label alone, unchecked for level, model and repeated evaluations: {', '.join(unkeyed)}.", ""]
    return "\n".join(lines)


def write_csv(path: Path, tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell],
              estimates: Estimates, aggregate: str = "iqm") -> Path:
    """One row per (test, agent): seeds, episodes per seed, what the intervals resampled, and each metric's
    aggregate with its interval (empty where the files lack it or there is no interval)."""
    def numbers(found: Estimate | None) -> list[float | str]:
        if found is None:
            return ["", "", ""]
        return [found.point, *(("", "") if np.isnan(found.low) else (found.low, found.high))]

    with atomic_output(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["test", "agent", "seeds", "episodes", "aggregate", "interval_over",
                         *(f"{name}{end}" for name in TABLED for end in ("", "_low", "_high"))])
        for test in tests:
            for agent in agents:
                if (test, agent) in cells:
                    c = cells[test, agent]
                    found = [estimates[test, agent, name] for name in TABLED]
                    basis = next((e.basis for e in found if e is not None), "none")
                    writer.writerow([test, agent, c.seeds, c.episodes[0][1] or "", aggregate, basis,
                                     *(x for e in found for x in numbers(e))])
    return path


def bar_chart(path: Path, tests: list[str], agents: list[str], estimates: Estimates, aggregate: str = "iqm") -> Path:
    """Success rate per test, one colour per agent, error bars the 95% intervals of the tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(tests) * (1 + len(agents)) + 2), 4.5))
    width = 0.8 / len(agents)
    x = np.arange(len(tests))
    for k, agent in enumerate(agents):
        bars = np.array([_bar(estimates.get((test, agent, "success"))) for test in tests])  # (tests, 3)
        ax.bar(x + (k - (len(agents) - 1) / 2) * width, bars[:, 0], width, yerr=bars[:, 1:].T, capsize=2,
               label=agent)
    ax.set_xticks(x, tests, rotation=35, ha="right")
    ax.set(ylabel=f"success rate ({'IQM' if aggregate == 'iqm' else 'mean'} over seeds, 95% CI)", ylim=(0, 1.2),
           yticks=np.linspace(0, 1, 6), title="Generalisation suite")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper center", ncols=len(agents), frameon=False)
    fig.tight_layout()
    try:
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def _bar(found: Estimate | None) -> tuple[float, float, float]:
    """(aggregate, error below, error above); no error bar without an interval."""
    if found is None:
        return (np.nan, 0.0, 0.0)
    if np.isnan(found.low):
        return (found.point, 0.0, 0.0)
    return (found.point, max(0.0, found.point - found.low), max(0.0, found.high - found.point))


def write_results(paths: Sequence[Path], out_dir: Path, aggregate: str = "iqm",
                  reps: int = BOOTSTRAP_REPS) -> tuple[str, list[Path]]:
    """Write results.md, results.csv and results.png under `out_dir`; return the Markdown and the paths."""
    md_path, csv_path, png_path = (check_output(Path(out_dir) / name) for name in OUT_FILES)
    files = find_suite_files(paths)
    tests, agents, cells = collect_cells(files)
    estimates = estimate_cells(cells, aggregate, reps)
    table = markdown_table(tests, agents, cells, estimates, aggregate, reps)
    write_text(md_path, f"Suite results from {len(files)} file(s).\n\n{table}")
    return table, [md_path, write_csv(csv_path, tests, agents, cells, estimates, aggregate),
                   bar_chart(png_path, tests, agents, estimates, aggregate)]
