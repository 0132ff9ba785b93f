"""`glamrl results`: suite JSONs over agents and seeds as Markdown, CSV and a bar chart, with rliable's IQM (or mean)
over seeds and stratified-bootstrap intervals over seeds and episodes."""

import csv
import json

import numpy as np
import pytest

from glamrl.cli import main
from glamrl.stats import METRICS, interval_over_episodes


def outcomes(success: float, episodes: int = 10) -> dict:
    """`episodes` outcomes at the success rate `success` (the first ones succeed, in 10 steps, return 0.5)."""
    wins = round(success * episodes)
    return {"success": [1] * wins + [0] * (episodes - wins), "return": [0.5] * wins + [0.0] * (episodes - wins),
            "length": [10] * wins + [64] * (episodes - wins)}


def suite_json(path, agent, seed, success, per_episode=True, episodes=10):
    tests = {}
    for name, s in success.items():
        o = outcomes(s, episodes)
        tests[name] = {"episodes": episodes, "success_rate": s, "mean_return": float(np.mean(o["return"])),
                       "mean_length": float(np.mean(o["length"])), "success_ci": [max(0, s - 0.1), min(1, s + 0.1)],
                       **({"per_episode": o} if per_episode else {})}
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
    assert "IQM over seeds (of fewer than 4 seeds: their mean)" in md
    assert "| test | run quick (2 seeds) | bot (1 seed: interval over episodes) |" in md
    # the same numbers as rliable's bootstrap of the (episodes, seeds) matrix, seeds then episodes resampled
    quick = interval_over_episodes(np.array([outcomes(0.6)["success"], outcomes(0.4)["success"]]).T,
                                   METRICS["success"])
    assert quick.point == pytest.approx(0.5) and 0.2 <= quick.low < 0.4 and 0.6 < quick.high <= 0.8
    assert f"| no_change | {quick.format('.3f')} | 1.000 [1.000, 1.000] |" in md
    assert "**Mean episode length**" in md
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 4
    row = next(r for r in rows if r["test"] == "no_change" and r["agent"] == "run quick")
    assert int(row["seeds"]) == 2 and row["interval_over"] == "seeds and episodes" and row["aggregate"] == "iqm"
    assert float(row["return"]) == pytest.approx(0.25) and float(row["success_low"]) == pytest.approx(quick.low)
    bot = next(r for r in rows if r["test"] == "french" and r["agent"] == "bot")
    assert bot["interval_over"] == "episodes" and float(bot["length"]) == 10.0
    assert (out / "results.png").stat().st_size > 5000
    assert quick.format(".3f") in capsys.readouterr().out
    # the bootstrap is seeded: the same files give the same table
    assert main(["results", str(runs), str(tmp_path / "bot.json"), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "results.md").read_text() == md


def test_results_iqm_or_mean_over_seeds(tmp_path):
    for seed, s in enumerate([0.0, 0.3, 0.5, 1.0]):  # the IQM drops the lowest and the highest seed
        suite_json(tmp_path / f"s{seed}.json", "run quick", seed, {"no_change": s})
    for aggregate, value in [("iqm", "0.400"), ("mean", "0.450")]:
        assert main(["results", str(tmp_path), "--aggregate", aggregate, "--out", str(tmp_path / aggregate)]) == 0
        md = (tmp_path / aggregate / "results.md").read_text()
        title = "IQM" if aggregate == "iqm" else "Mean"
        assert f"| no_change | {value} [" in md and md.startswith(f"Suite results from 4 file(s).\n\n{title} over seeds")


def test_results_without_per_episode_outcomes_are_over_seeds_only(tmp_path):
    suite_json(tmp_path / "s1.json", "run quick", 1, {"no_change": 0.6}, per_episode=False)
    suite_json(tmp_path / "s2.json", "run quick", 2, {"no_change": 0.4}, per_episode=False)
    suite_json(tmp_path / "bot.json", "bot", 1, {"no_change": 1.0}, per_episode=False)
    assert main(["results", str(tmp_path), "--out", str(tmp_path / "t")]) == 0
    md = (tmp_path / "t" / "results.md").read_text()
    assert "| test | bot (1 seed) | run quick (2 seeds) |" in md
    assert "| no_change | 1.000 | 0.500 [0.400, 0.600] |" in md  # one seed: no interval; two: between them
    assert "Without per-episode outcomes" in md and "bot, run quick" in md


def test_results_reject_what_is_not_a_suite(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["results", str(bad)]) == 2
    assert main(["results", str(tmp_path / "missing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["results", str(empty)]) == 2
    short = tmp_path / "short.json"
    suite_json(short, "bot", 1, {"no_change": 1.0})
    data = json.loads(short.read_text())
    data["tests"]["no_change"]["per_episode"]["success"].pop()
    short.write_text(json.dumps(data))
    assert main(["results", str(short)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and "not a suite JSON" in err[0] and "no such file" in err[1] and "holds no suite" in err[2]
    assert "per_episode success holds 9 outcomes for 10 episodes" in err[3]


def test_suite_json_holds_per_episode_outcomes_that_results_bootstraps(tmp_path):
    out = tmp_path / "bot.json"
    assert main(["eval", "--agent", "bot", "--tests", "no_change,french", "--episodes", "4", "--num-envs", "2",
                 "--out", str(out)]) == 0
    for result in json.loads(out.read_text())["tests"].values():
        per_episode = result["per_episode"]
        assert {name: len(values) for name, values in per_episode.items()} == {"success": 4, "return": 4, "length": 4}
        assert np.mean(per_episode["success"]) == result["success_rate"]
        assert np.mean(per_episode["return"]) == pytest.approx(result["mean_return"])
        assert np.mean(per_episode["length"]) == result["mean_length"]
    assert main(["results", str(out), "--out", str(tmp_path / "t")]) == 0
    assert "| test | bot (1 seed: interval over episodes) |" in (tmp_path / "t" / "results.md").read_text()


def origin(seed=1, level="BabyAI-GoToObjS4-v0", agent="random", model=None, run_dir=None, **drawing):
    """A provenance record as `glamrl eval --suite` writes it (`glamrl.eval.provenance`); without a `temperature`
    in `drawing`, as files written before glamrl recorded one."""
    return {"run_dir": run_dir, "model": model, "checkpoint": None, "greedy": False, "num_envs": 2,
            "episode_seeds": {"first": 1000000 + seed, "count": 10},
            "level": {"id": level, "task": None, "language": "en", "max_steps": None, "faithful": False},
            "agent": agent, "glamrl_version": "0.1.0", "git_commit": None, **drawing}


def keyed_suite(path, label, seed, success, **provenance):
    suite_json(path, label, seed, {"no_change": success})
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "provenance": origin(seed, **provenance)}))


def test_results_pool_seeds_of_one_level_agent_and_model(tmp_path):
    keyed_suite(tmp_path / "r1.json", "random", 1, 0.2)  # no temperature recorded: sampled at 1, as r2
    keyed_suite(tmp_path / "r2.json", "random", 2, 0.4, temperature=1.0)
    assert main(["results", str(tmp_path), "--out", str(tmp_path / "t")]) == 0
    md = (tmp_path / "t" / "results.md").read_text()
    assert "| test | random (2 seeds) |" in md and "Warning: without provenance" not in md


@pytest.mark.parametrize("second, message", [
    ({"seed": 1}, "are the same evaluation"),  # the same episodes of the same agent, evaluated twice
    ({"seed": 2, "level": "BabyAI-TurnToObject-v0"}, "level differs"),
    ({"seed": 2, "agent": "bot"}, "agent differs"),
    ({"seed": 2, "model": "other-model"}, "model differs"),
    ({"seed": 2, "greedy": True}, "draw actions differently (sampled, greedy)"),
    ({"seed": 2, "temperature": 0.5}, "draw actions differently (sampled, sampled at temperature 0.5)"),
])
def test_results_refuse_seeds_that_differ_or_repeat(tmp_path, capsys, second, message):
    keyed_suite(tmp_path / "a.json", "random", 1, 0.2)
    keyed_suite(tmp_path / "b.json", "random", second.pop("seed"), 0.4, **second)
    assert main(["results", str(tmp_path), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "a.json" in err[0] and "b.json" in err[0]
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("key, value, field_name", [
    ("success_rate", 1.7, "success_rate"), ("success_rate", float("nan"), "success_rate"),
    ("mean_length", -3.0, "mean_length"), ("success_ci", [0.1, 1.2], "success_ci"),
    ("per_episode", {"length": [-1] * 10}, "per_episode length"),
])
def test_results_refuse_impossible_values_on_read(tmp_path, capsys, key, value, field_name):
    bad = tmp_path / "bad.json"
    suite_json(bad, "bot", 1, {"no_change": 0.5})
    data = json.loads(bad.read_text())
    data["tests"]["no_change"][key] = value
    bad.write_text(json.dumps(data))
    assert main(["results", str(bad), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0] and field_name in err[0]


def test_results_accept_files_without_provenance_with_a_warning(tmp_path, capsys):
    suite_json(tmp_path / "old.json", "random", 1, {"no_change": 0.2})
    keyed_suite(tmp_path / "new.json", "random", 2, 0.4)
    assert main(["results", str(tmp_path), "--out", str(tmp_path / "t")]) == 0
    warning = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Warning:")]
    assert len(warning) == 1 and "old.json" in warning[0] and "new.json" not in warning[0]
