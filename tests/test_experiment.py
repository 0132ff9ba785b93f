"""`glamrl experiment`: runs trained in their own directories, skipped when finished, resumed when not,
a report of curves and times to the target, and a SLURM array of the same runs."""

import hashlib
import json
import math
import re
import shlex
import signal
import subprocess
from pathlib import Path
import sys

import pytest

from glamrl.cli import main
from glamrl.experiment import ExperimentError, last_episodes, run_command, time_to_target
from glamrl.stats import METRICS
from glamrl.run.dir import RunDir

TINY = """run:
  tensorboard: false
  eval_episodes: 0
env:
  id: BabyAI-TurnToObject-v0
  num_envs: 4
model:
  name: tiny-llama
  device: cpu
prompt:
  nbr_obs: 1
ppo:
  num_steps: 8
  minibatch_size: 16
  epochs: 2
  lr: 1.0e-3
  norm_adv: true
"""


def write_experiment(tmp_path, frames):
    (tmp_path / "tiny.yaml").write_text(TINY)
    path = tmp_path / "exp.yaml"
    path.write_text(f"""out: {tmp_path / 'out'}
frames: {frames}
target: 0.5
runs:
  tiny:
    config: {tmp_path / 'tiny.yaml'}
    seeds: [1, 2]
  tiny-lora:
    config: {tmp_path / 'tiny.yaml'}
    overrides: [model.lora=true, model.lora_r=2]
  random:
    agent: random
    episodes: 20
""")
    return path


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_experiment_trains_skips_resumes_and_reports(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    exp = write_experiment(tmp_path, frames=64)
    assert main(["experiment", str(exp)]) == 0
    out = tmp_path / "out"
    for name in ("tiny-seed1", "tiny-seed2", "tiny-lora-seed1"):
        assert RunDir(out / name).read_log()[-1]["frames"] == 64
    assert (out / "random-seed1" / "eval.json").exists()
    report = (out / "report.md").read_text()
    assert "| tiny | 2 |" in report and "| tiny-lora | 1 |" in report and "random (evaluated)" in report
    assert report.splitlines()[2].startswith("IQM over seeds (of fewer than 4 seeds: their mean) [95% interval: rliable's")
    lora = next(line for line in report.splitlines() if line.startswith("| tiny-lora |")).split(" | ")
    assert lora[4] == "64"  # frames trained, whether or not it reached the target; one seed: no interval
    tiny = next(line for line in report.splitlines() if line.startswith("| tiny |")).split(" | ")
    assert tiny[4] == "64 [64, 64]"  # two seeds: rliable's interval over them
    random = [c.strip() for c in next(line for line in report.splitlines() if "random (evaluated)" in line).split("|")]
    success, low, high = map(float, random[7].replace("[", "").replace("]", "").replace(",", "").split())
    assert random[2] == "1" and 0 <= low <= success <= high <= 1  # one seed: over its 20 episodes
    assert main(["experiment", str(exp), "--report", "--aggregate", "mean"]) == 0
    assert (out / "report.md").read_text().splitlines()[2].startswith("Mean over seeds [95% interval")
    for png in ("success_frames", "success_minutes", "rows_frames"):
        assert (out / f"{png}.png").read_bytes().startswith(b"\x89PNG")
    assert not (out / "tasks_frames.png").exists()  # one task kind: no plot per kind
    capsys.readouterr()

    # a rerun skips every finished run and leaves its files alone
    logs = {name: digest(out / name / "log.csv") for name in ("tiny-seed1", "tiny-seed2", "tiny-lora-seed1")}
    assert main(["experiment", str(exp)]) == 0
    assert capsys.readouterr().out.count("finished, skipped") == 4
    assert logs == {name: digest(out / name / "log.csv") for name in logs}

    # more frames: every run resumes where it stopped
    exp = write_experiment(tmp_path, frames=96)
    assert main(["experiment", str(exp), "--task", "1"]) == 0  # one run only, as a SLURM array task does
    assert [r["update"] for r in RunDir(out / "tiny-seed2").read_log()] == [1, 2, 3]
    assert RunDir(out / "tiny-seed1").read_log()[-1]["frames"] == 64


def test_sbatch_array_has_one_task_per_run(tmp_path, capsys):
    exp = write_experiment(tmp_path, frames=64)
    script = tmp_path / "exp.sbatch"
    assert main(["experiment", str(exp), "--sbatch", str(script), "--time", "02:00:00", "--cpus", "4"]) == 0
    text = script.read_text()
    assert "#SBATCH --array=0-3\n" in text and "#SBATCH --time=02:00:00" in text and "--cpus-per-task=4" in text
    assert f'-m glamrl.cli experiment {exp} --task "$SLURM_ARRAY_TASK_ID"' in text
    assert "#   1: tiny-seed2" in text and "#   3: random-seed1" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # valid bash
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["slurm"]  # the logs' folder; nothing trained


@pytest.mark.parametrize(("edit", "message"), [
    ("frames: 64", "unknown config key 'colour'"),
    ("frames: -3", "frames must be a positive number"),
    ("    seeds: [1, 2]", "seeds must be a non-empty list"),
    ("tiny.yaml'}\n    seeds", "config file"),
    ("    episodes: 20", "runs.random.episodes must be int"),
])
def test_bad_experiment_files_are_one_line_before_any_run(tmp_path, capsys, edit, message):
    text = write_experiment(tmp_path, frames=64).read_text()
    bad = {"frames: 64": "frames: 64\ncolour: red", "frames: -3": None, "    seeds: [1, 2]": "    seeds: []",
           "tiny.yaml'}\n    seeds": None, "    episodes: 20": "    episodes: many"}[edit]
    if edit == "frames: -3":
        text = text.replace("frames: 64", "frames: -3")
    elif edit == "tiny.yaml'}\n    seeds":
        text = text.replace(f"{tmp_path / 'tiny.yaml'}\n    seeds", f"{tmp_path / 'nope.yaml'}\n    seeds")
    else:
        text = text.replace(edit, bad)
    (tmp_path / "exp.yaml").write_text(text)
    assert main(["experiment", str(tmp_path / "exp.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("old", "new", "message"), [
    ("frames: 64", "frames: 64\nframes: 32", "key 'frames' is given twice"),
    ("    seeds: [1, 2]", "    seeds: [1, 2]\n    seeds: [3]", "key 'seeds' is given twice"),
    ("frames: 64", "frames: true", "frames must be int"),
    ("    episodes: 20", "    episodes: true", "runs.random.episodes must be int"),
    ("    seeds: [1, 2]", "    seeds: [true]", "runs.tiny.seeds[0] must be int"),
    ("  random:", "  ../../x:", "'../../x' is not a run name"),
    ("  random:", "  a/b:", "'a/b' is not a run name"),
    ("target: 0.5", "target: 0.5\nenv: BabyAI-Nope-v0", "unknown env id 'BabyAI-Nope-v0'"),
    ("OUT", "out: 5", "out must be a path, got 5"),
    ("OUT", "out: [a, b]", "out must be a path"),
])
def test_experiment_files_are_checked_as_configs_before_anything_is_created(tmp_path, capsys, monkeypatch, old,
                                                                              new, message):
    monkeypatch.chdir(tmp_path)
    path = write_experiment(tmp_path, frames=64)
    text = path.read_text()
    old = text.splitlines()[0] if old == "OUT" else old
    path.write_text(text.replace(old, new, 1))
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    assert main(["experiment", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "tiny.yaml"]  # no out, no 5, no run
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before


def test_every_task_id_is_checked_before_any_run(tmp_path, capsys):
    exp = write_experiment(tmp_path, frames=64)
    assert main(["experiment", str(exp), "--task", "0", "--task", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task 7 does not exist" in err[0] and "0..3" in err[0], err
    assert not (tmp_path / "out").exists()  # task 0 did not train


def test_sbatch_and_report_never_replace_a_file_glamrl_did_not_write(tmp_path, capsys):
    exp = write_experiment(tmp_path, frames=64)
    script, report = tmp_path / "mine.sh", tmp_path / "out" / "report.md"
    script.write_text("my script\n")
    report.parent.mkdir()
    report.write_text("my notes\n")
    for args, path in [(["--sbatch", str(script)], script), (["--report"], report)]:
        assert main(["experiment", str(exp), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{path} exists and glamrl did not write it" in err[0] and "--overwrite" in err[0]
    assert script.read_text() == "my script\n" and report.read_text() == "my notes\n"
    for args in (["--sbatch", str(script), "--overwrite"], ["--sbatch", str(script)],  # then: its own file
                 ["--report", "--overwrite"], ["--report"]):
        assert main(["experiment", str(exp), *args]) == 0, capsys.readouterr().err
    assert script.read_text().startswith("#!/bin/bash\n") and "| agent |" in report.read_text()


def test_a_report_without_runs_says_only_what_it_wrote(tmp_path, capsys):
    exp = write_experiment(tmp_path, frames=64)
    assert main(["experiment", str(exp), "--report"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'out' / 'report.md'}" in out and "curves" not in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md"]


def test_a_damaged_eval_json_is_one_line_naming_it(tmp_path, capsys):
    exp = write_experiment(tmp_path, frames=64)
    damaged = tmp_path / "out" / "random-seed1" / "eval.json"
    damaged.parent.mkdir(parents=True)
    damaged.write_text('{"success_rate": 0.')  # cut short
    assert main(["experiment", str(exp), "--report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(damaged) in err[0] and "not valid JSON" in err[0], err
    assert damaged.read_text() == '{"success_rate": 0.' and not (tmp_path / "out" / "report.md").exists()


@pytest.mark.parametrize("time", ["02:00:00\n#SBATCH --mem=1", "2h", "24:00:00:00", "1-", "", "-1", "1:2:3:4"])
def test_sbatch_refuses_a_time_slurm_would_not_read(tmp_path, capsys, time):
    exp = write_experiment(tmp_path, frames=64)
    script = tmp_path / "exp.sbatch"
    assert main(["experiment", str(exp), "--sbatch", str(script), "--time", time]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time" in err[0] and "D-HH:MM:SS" in err[0], err
    assert not script.exists() and not (tmp_path / "out").exists()


def test_sbatch_quotes_paths_and_creates_its_log_folder(tmp_path, capsys):
    from glamrl.experiment import check_slurm_time

    for time in ("30", "30:00", "02:00:00", "1-12", "1-12:30", "1-12:30:00"):
        check_slurm_time(time)  # SLURM's formats
    folder = tmp_path / "my dir"
    folder.mkdir()
    exp = write_experiment(folder, frames=64)
    exp.write_text(exp.read_text().replace(f"out: {folder / 'out'}", f"out: {folder / 'my out'}"))
    script = folder / "my job.sbatch"
    assert main(["experiment", str(exp), "--sbatch", str(script), "--time", "1-12:30"]) == 0
    text = script.read_text()
    logs = folder / "my out" / "slurm"
    assert f"#SBATCH --output={shlex.quote(str(logs / 'slurm-%A_%a.out'))}\n" in text
    assert f"experiment {shlex.quote(str(exp))} --task" in text and f"#   sbatch {shlex.quote(str(script))}" in text
    assert logs.is_dir() and sorted(p.name for p in (folder / "my out").iterdir()) == ["slurm"]
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_time_to_target_counts_a_rate_only_over_enough_episodes():
    """An early row ends a few short episodes, mostly successes: they alone must not read as reaching the target."""
    def row(update, episodes, success):  # `episodes` is the log's cumulative count
        return {"update": update, "frames": 256 * update, "duration": 60.0 * update, "episodes": episodes,
                "success_rate": success}

    rows = [row(1, 2, 1.0), row(2, 3, 1.0), row(3, 18, 0.2), row(4, 22, 1.0), row(5, 24, math.nan),
            row(6, 44, 0.95), row(7, 64, 0.95), row(8, 84, 0.6)]
    # by hand, the fewest latest rows with 32 episodes or more: at row 6, rows 3, 4 and 6 (15 + 4 + 20 = 39
    # episodes, 3 + 4 + 19 = 26 successes: 0.67); at row 7, rows 6 and 7 (40 episodes, 38 successes: 0.95)
    assert time_to_target(rows, 0.9) == (256 * 7, 7.0)
    assert time_to_target(rows, 0.9, episodes=1) == (256, 1.0)  # the old rule: any one row
    assert time_to_target(rows, 0.99) is None and time_to_target(rows[:6], 0.9) is None


def test_the_last_success_is_pooled_over_the_last_episodes_not_the_last_row():
    def row(update, episodes, success, length):
        return {"update": update, "frames": 256 * update, "episodes": episodes, "success_rate": success,
                "num_frames_mean": length}

    rows = [row(1, 20, 0.5, 30.0), row(2, 30, 1.0, 10.0), row(3, 30, math.nan, math.nan), row(4, 32, 0.0, 64.0)]
    # by hand: the last 12 episodes or more are rows 4 and 2 (2 + 10): 10 successes, (2 x 64 + 10 x 10) / 12 frames
    assert last_episodes(rows, 12) == pytest.approx((10 / 12, 228 / 12))
    assert last_episodes(rows, 2) == pytest.approx((0.0, 64.0))  # the last row alone holds enough
    assert last_episodes(rows, 100) == pytest.approx((20 / 32, (600 + 100 + 128) / 32))  # fewer ended: all
    assert last_episodes([{"update": 1, "frames": 320, "loss": 0.5}]) is None  # BC: no episodes


def curriculum_experiment(tmp_path, next_run: str) -> Path:
    """`write_experiment`'s file with one more run, `next_run` (YAML lines of its entry)."""
    path = write_experiment(tmp_path, frames=32)
    path.write_text(path.read_text() + next_run)
    return path


NEXT = """  tiny-next:
    config: {config}
    init_from: tiny
    overrides: [ppo.lr=1.0e-12, run.eval_episodes=2]
    seeds: [2]
"""


def test_a_run_starts_from_the_same_seed_of_the_run_it_names(tmp_path, capsys, one_thread, runs_in_process):
    exp = curriculum_experiment(tmp_path, NEXT.format(config=tmp_path / "tiny.yaml"))
    out = tmp_path / "out"
    # its seed's run is not trained yet and not trained before it by this call: refused before any run
    assert main(["experiment", str(exp), "--task", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tiny-next-seed2" in err[0] and "tiny-seed2" in err[0] and "run task 1 first" in err[0]
    assert not out.exists()
    assert main(["experiment", str(exp), "--sbatch", str(tmp_path / "exp.sbatch")]) == 0
    assert "#   4: tiny-next-seed2 (after task 1, which it starts from)\n" in (tmp_path / "exp.sbatch").read_text()
    assert main(["experiment", str(exp), "--task", "1", "--task", "4"]) == 0  # the source first, in one call
    config = RunDir(out / "tiny-next-seed2").read_config()
    assert config.agent.init_from == str(out / "tiny-seed2")
    weights = {name: RunDir(out / name).load_checkpoint().policy for name in ("tiny-seed2", "tiny-next-seed2")}
    moved = max((weights["tiny-next-seed2"][k] - w).abs().max().item() for k, w in weights["tiny-seed2"].items())
    assert moved < 1e-6  # lr 1e-12: it ends where it started, at seed 2's trained weights
    assert main(["experiment", str(exp), "--report"]) == 0
    row = next(line for line in (out / "report.md").read_text().splitlines() if line.startswith("| tiny-next "))
    after = json.loads((out / "tiny-next-seed2" / "eval_after.json").read_text())  # its own evaluation
    assert row.startswith("| tiny-next (from tiny) | 1 |")
    assert row.endswith(f"| {after['success_rate']:{METRICS['success'].fmt}} in "
                        f"{after['mean_length']:{METRICS['length'].fmt}} steps (2 episodes) |"), row


@pytest.mark.parametrize(("entry", "message"), [
    ("  tiny-next:\n    config: {config}\n    init_from: random\n", "init_from must name a trained run listed "
                                                                     "before tiny-next, got 'random'"),
    ("  tiny-next:\n    config: {config}\n    init_from: nope\n", "got 'nope'"),
    ("  tiny-next:\n    config: {config}\n    init_from: tiny-lora\n    seeds: [1, 2]\n",
     "tiny-lora has no seed 2 to start tiny-next's seed 2 from"),
    ("  bot:\n    agent: bot\n    init_from: tiny\n", "an evaluation-only agent (bot) starts from no run"),
    ("  bot:\n    agent: bot\n    clone: 5\n", "clone must be a number of bot episodes >= 1 of a trained run (a BC "
                                             "config), got 5 with agent bot"),
    ("  c:\n    config: {config}\n    clone: 0\n", "runs.c.clone must be a number of bot episodes >= 1"),
    ("  bot:\n    agent: bot\n    suite: papers\n", "runs.bot.suite must be one of paper, "),
    ("  bot:\n    agent: bot\n    suite: paper\n    suite_episodes: 0\n", "runs.bot.suite_episodes must be an integer"),
])
def test_init_from_and_clone_are_checked_before_any_run(tmp_path, capsys, entry, message):
    exp = curriculum_experiment(tmp_path, entry.format(config=tmp_path / "tiny.yaml"))
    assert main(["experiment", str(exp)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_runs_own_override_of_a_shared_setting_wins(tmp_path):
    from glamrl.config import load_train_config
    from glamrl.experiment import load_experiment, train_overrides

    exp = curriculum_experiment(tmp_path, f"""  other-level:
    config: {tmp_path / 'tiny.yaml'}
    overrides: [env.id=BabyAI-GoToObjS4-v0, ppo.total_frames=16]
""")
    exp.write_text(exp.read_text().replace("target: 0.5", "target: 0.5\nenv: BabyAI-GoToLocalS6N3-v0"))
    experiment = load_experiment(exp)
    spec = experiment.runs["other-level"]
    cfg = load_train_config(spec.config, train_overrides(experiment, spec, 1))
    assert (cfg.env.id, cfg.ppo.total_frames, cfg.env.seed) == ("BabyAI-GoToObjS4-v0", 16, 1)
    tiny = experiment.runs["tiny"]
    cfg = load_train_config(tiny.config, train_overrides(experiment, tiny, 2))
    assert (cfg.env.id, cfg.ppo.total_frames, cfg.env.seed) == ("BabyAI-GoToLocalS6N3-v0", 32, 2)


CLONE = """out: {out}
env: BabyAI-GoToObjS4-v0
frames: 32
runs:
  clone:
    config: {bc}
    clone: 3
  clone-ppo:
    config: {tiny}
    init_from: clone
"""


def test_a_clone_run_learns_from_bot_demonstrations_it_records_once(tmp_path, capsys, one_thread, runs_in_process):
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "bc.yaml").write_text("model:\n  name: tiny-llama\n  device: cpu\nprompt:\n  nbr_obs: 1\n"
                                      "run:\n  tensorboard: false\nbc:\n  batch_size: 2\n  log_every: 2\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text(CLONE.format(out=tmp_path / "out", bc=tmp_path / "bc.yaml", tiny=tmp_path / "tiny.yaml"))
    assert main(["experiment", str(exp)]) == 0
    out = tmp_path / "out"
    demos = out / "clone-seed1-demos.jsonl"
    records = [line for line in demos.read_text().splitlines() if line.strip()]
    assert {json.loads(line)["episode"] for line in records} == {0, 1, 2}  # 3 bot episodes, nbr_obs 1
    assert RunDir(out / "clone-seed1").read_log()[-1]["frames"] == len(records)  # one epoch over them
    assert RunDir(out / "clone-ppo-seed1").read_config().agent.init_from == str(out / "clone-seed1")
    report = (out / "report.md").read_text()
    assert "| clone (clone of 3 bot episodes) | 1 |" in report and "| clone-ppo (from clone) | 1 |" in report
    capsys.readouterr()

    # demonstrations removed (results/ keeps runs without them): recorded again, the same, and the clone is finished
    kept = demos.read_bytes()
    demos.unlink()
    assert main(["experiment", str(exp)]) == 0
    assert capsys.readouterr().out.count("finished, skipped") == 2 and demos.read_bytes() == kept


SUITE = """out: {out}
env: BabyAI-GoToObjS4-v0
frames: 32
runs:
  tiny:
    config: {tiny}
    suite: paper
    suite_episodes: 1
  random:
    agent: random
    episodes: 2
    suite: paper
    suite_episodes: 1
"""


def test_trained_and_evaluated_agents_play_the_suite_on_the_same_episodes_once(tmp_path, capsys, one_thread,
                                                                                runs_in_process):
    (tmp_path / "tiny.yaml").write_text(TINY)
    exp = tmp_path / "exp.yaml"
    exp.write_text(SUITE.format(out=tmp_path / "out", tiny=tmp_path / "tiny.yaml"))
    assert main(["experiment", str(exp)]) == 0
    out = tmp_path / "out"
    suites = {name: json.loads((out / f"{name}-seed1" / "suite.json").read_text()) for name in ("tiny", "random")}
    assert all(s["complete"] and s["episodes_per_test"] == 1 for s in suites.values())
    assert suites["tiny"]["provenance"]["run_dir"] == str(out / "tiny-seed1")  # the trained agent
    assert suites["tiny"]["tests"].keys() == suites["random"]["tests"].keys()
    assert suites["tiny"]["eval_seed"] == suites["random"]["eval_seed"]  # the same episodes
    report = (out / "report.md").read_text()
    table = report[report.index("## Generalisation suite (2 runs' suite.json"):]
    assert "run tiny" in table and "random" in table and (out / "suite" / "results.md").exists()
    assert all(f"| {test} " in table for test in suites["tiny"]["tests"])
    capsys.readouterr()

    # a rerun plays nothing again; a suite that stopped early is completed (its tests kept, the file marked complete)
    played = {name: digest(out / f"{name}-seed1" / "suite.json") for name in suites}
    assert main(["experiment", str(exp)]) == 0
    assert capsys.readouterr().out.count("finished, skipped") == 2
    assert played == {name: digest(out / f"{name}-seed1" / "suite.json") for name in suites}
    stopped = out / "random-seed1" / "suite.json"
    stopped.write_text(json.dumps({**suites["random"], "complete": False}))
    assert main(["experiment", str(exp)]) == 0
    assert json.loads(stopped.read_text())["complete"] is True
    assert digest(out / "tiny-seed1" / "suite.json") == played["tiny"]
    capsys.readouterr()

    # more frames: the run trains on, and its suite is played again on the new checkpoint
    random_suite = digest(stopped)
    exp.write_text(exp.read_text().replace("frames: 32", "frames: 64"))
    assert main(["experiment", str(exp)]) == 0
    assert json.loads((out / "tiny-seed1" / "suite.json").read_text())["provenance"]["checkpoint"]["frames"] == 64
    assert digest(stopped) == random_suite  # the evaluated agent's is the same suite
    capsys.readouterr()

    # a run kept without its checkpoints (results/) cannot play a suite: said, and the others go on
    (out / "tiny-seed1" / "suite.json").unlink()
    for checkpoint in (out / "tiny-seed1" / "checkpoints").iterdir():
        checkpoint.unlink()
    assert main(["experiment", str(exp)]) == 0
    assert "[0] tiny-seed1: suite not played: the run keeps no checkpoint" in capsys.readouterr().out
    assert not (out / "tiny-seed1" / "suite.json").exists()


def test_a_mixed_level_report_draws_each_task_kind_and_the_published_figures(tmp_path, capsys, one_thread,
                                                                             runs_in_process):
    (tmp_path / "tiny.yaml").write_text(TINY)
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"""out: {tmp_path / 'out'}
frames: 32
env: BabyAI-MixedTrainLocal-v0
smooth: 2
references:
  GLAM's Flan-T5-large after 1.5M frames (paper): 0.89
runs:
  tiny:
    config: {tmp_path / 'tiny.yaml'}
    overrides: [env.max_steps=3]
  random:
    agent: random
    episodes: 12
""")
    assert main(["experiment", str(exp)]) == 0
    out = tmp_path / "out"
    kinds = [c for c in RunDir(out / "tiny-seed1").read_log()[0] if c.startswith("success_rate_")]
    assert kinds  # 4 envs ended 3-step episodes of several kinds
    written = capsys.readouterr().out.splitlines()[-1]
    for png in ("success_frames", "success_minutes", "tasks_frames", "tasks_minutes"):
        assert str(out / f"{png}.png") in written and (out / f"{png}.png").stat().st_size > 0

    # the published line is drawn: the figure differs without it
    before = digest(out / "success_frames.png")
    exp.write_text(exp.read_text().replace("smooth: 2\nreferences:\n  GLAM's Flan-T5-large after 1.5M frames (paper): "
                                           "0.89\n", "smooth: 2\n"))
    assert main(["experiment", str(exp), "--report"]) == 0
    assert digest(out / "success_frames.png") != before


def test_task_baseline_is_each_kinds_success_over_the_seeds():
    from glamrl.experiment import task_baseline, task_metrics

    seeds = [{"per_task": {"go_to": {"success_rate": 0.5}, "open": {"success_rate": 0.0}}},
             {"per_task": {"go_to": {"success_rate": 0.25}}}]  # seed 2 met no open episode
    assert task_baseline(seeds) == {"success_rate_go_to": 0.375, "success_rate_open": 0.0}
    logs = [[{"frames": 8.0, "success_rate": 0.5, "success_rate_open": math.nan, "success_rate_go_to": 1.0}], []]
    assert task_metrics(logs) == ["success_rate_open", "success_rate_go_to"]
    assert task_metrics([[{"frames": 8.0, "success_rate": 0.5}]]) == []


@pytest.mark.parametrize(("extra", "message"), [
    ("references:\n  paper: 1.5", "references.'paper' must be a label and a success rate in [0, 1], got 1.5"),
    ("references:\n  paper: high", "references.paper must be float"),
    ("smooth: 0", "smooth must be a number of log rows >= 1, got 0"),
])
def test_bad_references_and_smoothing_are_one_line(tmp_path, capsys, extra, message):
    path = write_experiment(tmp_path, frames=64)
    path.write_text(path.read_text().replace("target: 0.5", f"target: 0.5\n{extra}"))
    assert main(["experiment", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("code", "said"), [
    ("os.kill(os.getpid(), signal.SIGTERM)", "was terminated (exit -15)"),  # a process the signal killed
    ("sys.exit(128 + signal.SIGTERM)", "was terminated (exit 143)"),  # glamrl's own exit on SIGTERM
    ("sys.exit(130)", "was interrupted (exit 130)"),
    ("sys.exit(1)", "failed (exit 1)"),
])
def test_a_run_stopped_by_a_signal_is_said_stopped_not_failed(code, said):
    command = [sys.executable, "-c", f"import os, signal, sys; {code}"]
    with pytest.raises(ExperimentError, match=rf"run tiny-seed1 {re.escape(said)}; rerun the experiment to resume it"):
        run_command("tiny-seed1", command, 0, say=lambda line: None)
