"""`glamrl results`: suite JSONs over agents and seeds as Markdown, CSV and a bar chart."""

import csv
import json

import pytest

from glamrl.cli import main


def suite_json(path, agent, seed, success):
    tests = {name: {"success_rate": s, "mean_return": s / 2, "success_ci": [max(0, s - 0.1), min(1, s + 0.1)]}
             for name, s in success.items()}
    path.write_text(json.dumps({"suite": "paper", "agent": agent, "seed": seed, "tests": tests}))


def test_results_aggregate_seeds_per_agent(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    suite_json(runs / "a" / "s1.json", "run quick", 1, {"no_change": 0.6, "french": 0.0})
    suite_json(runs / "s2.json", "run quick", 2, {"no_change": 0.4, "french": 0.2})
    suite_json(tmp_path / "bot.json", "bot", 1, {"no_change": 1.0, "french": 1.0})
    (runs / "other.json").write_text(json.dumps({"not": "a suite"}))  # ignored inside a folder
    out = tmp_path / "table"
    assert main(["results", str(runs), str(tmp_path / "bot.json"), "--out", str(out)]) == 0
    md = (out / "results.md").read_text()
    assert "| test | run quick (2 seeds) | bot (1 seed) |" in md
    assert "| no_change | 0.500 ± 0.141 | 1.000 ± 0.000 |" in md
    assert "| french | 0.100 ± 0.141 | 1.000 ± 0.000 |" in md
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 4
    quick = next(r for r in rows if r["test"] == "no_change" and r["agent"] == "run quick")
    assert int(quick["seeds"]) == 2 and float(quick["return_mean"]) == pytest.approx(0.25)
    assert (out / "results.png").stat().st_size > 5000
    assert "0.500 ± 0.141" in capsys.readouterr().out


def test_results_reject_what_is_not_a_suite(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["results", str(bad)]) == 2
    assert main(["results", str(tmp_path / "missing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["results", str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "not a suite JSON" in err[0] and "no such file" in err[1] and "holds no suite" in err[2]
