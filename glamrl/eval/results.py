"""Suite JSONs from several agents and seeds as one table (Markdown, CSV) and one bar chart.

Files with the same agent label (`glamrl eval --suite ... --out`: "bot", "random",
"llm smollm2-135m zero-shot", "run NAME" with the run's seed suffix dropped) are seeds of
one agent: each cell is their mean ± standard deviation over seeds. With a single seed,
the chart's error bars are that run's 95% Wilson interval instead.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from glamrl.errors import GlamrlError


class ResultsError(GlamrlError, ValueError):
    """An input that is not a suite JSON, or a folder holding none."""


@dataclass
class Cell:
    """One (test, agent) entry over seeds."""

    success: list[float]
    returns: list[float]
    ci: list[tuple[float, float]]

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
    """The suite JSONs among `paths`: files as given, folders searched recursively."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.json") if _is_suite(p))
            if not found:
                raise ResultsError(f"{path} holds no suite JSON (write one with glamrl eval --suite paper --out FILE)")
            files += found
        elif path.is_file():
            if not _is_suite(path):
                raise ResultsError(f"{path} is not a suite JSON (no 'agent' and 'tests' keys)")
            files.append(path)
        else:
            raise ResultsError(f"no such file or folder: {path}")
    return files


def _is_suite(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return False
    return isinstance(data, dict) and "agent" in data and isinstance(data.get("tests"), dict)


def aggregate(files: Sequence[Path]) -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    """(tests, agents, {(test, agent): Cell}) in order of first appearance."""
    tests: list[str] = []
    agents: list[str] = []
    cells: dict[tuple[str, str], Cell] = {}
    for path in files:
        data: dict[str, Any] = json.loads(Path(path).read_text())
        agent = data["agent"]
        agents += [agent] if agent not in agents else []
        for test, r in data["tests"].items():
            tests += [test] if test not in tests else []
            cell = cells.setdefault((test, agent), Cell([], [], []))
            cell.success.append(r["success_rate"])
            cell.returns.append(r["mean_return"])
            cell.ci.append(tuple(r["success_ci"]))
    return tests, agents, cells


def markdown_table(tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell]) -> str:
    """Success rate and mean return, mean ± std over seeds, one row per test and one column per agent."""
    def seeds(agent: str) -> int:
        return max(len(cells[t, agent].success) for t in tests if (t, agent) in cells)

    header = "| test | " + " | ".join(f"{a} ({seeds(a)} seed{'s' * (seeds(a) > 1)})" for a in agents) + " |"
    rule = "|---|" + "---:|" * len(agents)
    lines = []
    for title, metric in [("Success rate", "success_mean_std"), ("Mean return", "return_mean_std")]:
        lines += [f"**{title}** (mean ± std over seeds)", "", header, rule]
        for test in tests:
            row = [_fmt(getattr(cells[test, a], metric)) if (test, a) in cells else "–" for a in agents]
            lines.append(f"| {test} | " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def _fmt(mean_std: tuple[float, float]) -> str:
    return f"{mean_std[0]:.3f} ± {mean_std[1]:.3f}"


def write_csv(path: Path, tests: list[str], agents: list[str], cells: dict[tuple[str, str], Cell]) -> Path:
    with open(path, "w", newline="") as f:
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
    fig.savefig(path, dpi=110)
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
    from glamrl.eval.output import check_writable

    files = find_suite_files(paths)
    tests, agents, cells = aggregate(files)
    md_path = check_writable(Path(out_dir) / "results.md")
    table = markdown_table(tests, agents, cells)
    md_path.write_text(f"Suite results from {len(files)} file(s).\n\n{table}")
    return table, [md_path, write_csv(Path(out_dir) / "results.csv", tests, agents, cells),
                   bar_chart(Path(out_dir) / "results.png", tests, agents, cells)]
