"""Suite JSONs from several agents and seeds as one table (Markdown, CSV) and one bar chart.

Files with the same agent label (`glamrl eval --suite ... --out`: "bot", "random",
"llm smollm2-135m zero-shot", "run NAME" with the run's seed suffix dropped) are seeds of
one agent: each cell is their mean ± standard deviation over seeds. With a single seed,
the chart's error bars are that run's 95% Wilson interval instead.

Nothing is counted twice or pooled unequally: a file named twice (or also found in a folder
given) counts once, two files with the same content are refused, and so are an incomplete
suite (`complete: false`, stopped before its last test) and seeds of one cell evaluated on
different numbers of episodes. A cell with fewer seeds than its agent's others says how many.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from glamrl.errors import GlamrlError
from glamrl.files import atomic_output, write_text
from glamrl.run.dir import check_output

OUT_FILES = ("results.md", "results.csv", "results.png")
TEST_FIELDS = ("success_rate", "mean_return", "success_ci")
"""What every test of a suite JSON must hold."""


class ResultsError(GlamrlError, ValueError):
    """An input that is not a suite JSON, or a folder holding none."""


@dataclass
class Cell:
    """One (test, agent) entry over seeds."""

    success: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    ci: list[tuple[float, float]] = field(default_factory=list)
    episodes: list[tuple[Path, int | None]] = field(default_factory=list)
    """(file, episodes of the test) of each seed."""

    @staticmethod
    def _mean_std(values: list[float]) -> tuple[float, float]:
        return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0

    @property
    def success_mean_std(self) -> tuple[float, float]:
        return self._mean_std(self.success)

    @property
    def return_mean_std(self) -> tuple[float, float]:
        return self._mean_std(self.returns)


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
        numbers = [result["success_rate"], result["mean_return"], *_pair(result["success_ci"])]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
            raise ResultsError(f"{path}: test {test!r} holds values that are not numbers")
    return data


def _pair(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) and len(value) == 2 else [None]


def aggregate(files: Sequence[Path]) -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    """(tests, agents, {(test, agent): Cell}) in order of first appearance; seeds of a cell must be of equal size."""
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
            cell.success.append(r["success_rate"])
            cell.returns.append(r["mean_return"])
            cell.ci.append(tuple(r["success_ci"]))
            cell.episodes.append((path, episodes))
    return tests, agents, cells


def markdown_table(tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell]) -> str:
    """Success rate and mean return, mean ± std over seeds, one row per test and one column per agent."""
    def seeds(agent: str) -> int:
        return max(len(cells[t, agent].success) for t in tests if (t, agent) in cells)

    def entry(test: str, agent: str, metric: str) -> str:
        if (test, agent) not in cells:
            return "–"
        cell = cells[test, agent]
        mean, std = getattr(cell, metric)
        fewer = len(cell.success) < seeds(agent)  # some seeds of this agent did not run this test
        return f"{mean:.3f} ± {std:.3f}" + (f" ({len(cell.success)} of {seeds(agent)} seeds)" if fewer else "")

    header = "| test | " + " | ".join(f"{a} ({seeds(a)} seed{'s' * (seeds(a) > 1)})" for a in agents) + " |"
    rule = "|---|" + "---:|" * len(agents)
    lines = []
    for title, metric in [("Success rate", "success_mean_std"), ("Mean return", "return_mean_std")]:
        lines += [f"**{title}** (mean ± std over seeds)", "", header, rule]
        for test in tests:
            lines.append(f"| {test} | " + " | ".join(entry(test, a, metric) for a in agents) + " |")
        lines.append("")
    return "\n".join(lines)


def write_csv(path: Path, tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell]) -> Path:
    with atomic_output(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["test", "agent", "seeds", "success_mean", "success_std", "return_mean", "return_std"])
        for test in tests:
            for agent in agents:
                if (test, agent) in cells:
                    c = cells[test, agent]
                    writer.writerow([test, agent, len(c.success), *c.success_mean_std, *c.return_mean_std])
    return path


def bar_chart(path: Path, tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell]) -> Path:
    """Success rate per test, one colour per agent, error bars (std over seeds, or 95% CI for one seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(tests) * (1 + len(agents)) + 2), 4.5))
    width = 0.8 / len(agents)
    x = np.arange(len(tests))
    for k, agent in enumerate(agents):
        bars = np.array([_bar(cells.get((test, agent))) for test in tests])  # (tests, 3): mean, below, above
        ax.bar(x + (k - (len(agents) - 1) / 2) * width, bars[:, 0], width, yerr=bars[:, 1:].T, capsize=2,
               label=agent)
    ax.set_xticks(x, tests, rotation=35, ha="right")
    ax.set(ylabel="success rate", ylim=(0, 1.2), yticks=np.linspace(0, 1, 6), title="Generalisation suite")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper center", ncols=len(agents), frameon=False)
    fig.tight_layout()
    try:
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def _bar(cell: Cell | None) -> tuple[float, float, float]:
    """(mean success, error below, error above): std over seeds, or the 95% CI of a single seed."""
    if cell is None:
        return (np.nan, 0.0, 0.0)
    mean, std = cell.success_mean_std
    lo, hi = (mean - std, mean + std) if len(cell.success) > 1 else cell.ci[0]
    return (mean, max(0.0, mean - lo), max(0.0, hi - mean))


def write_results(paths: Sequence[Path], out_dir: Path) -> tuple[str, list[Path]]:
    """Write results.md, results.csv and results.png under `out_dir`; return the Markdown and the paths."""
    md_path, csv_path, png_path = (check_output(Path(out_dir) / name) for name in OUT_FILES)
    files = find_suite_files(paths)
    tests, agents, cells = aggregate(files)
    table = markdown_table(tests, agents, cells)
    write_text(md_path, f"Suite results from {len(files)} file(s).\n\n{table}")
    return table, [md_path, write_csv(csv_path, tests, agents, cells), bar_chart(png_path, tests, agents, cells)]
