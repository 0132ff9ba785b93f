"""The `glamrl` command as a user runs it: real subprocesses, real envs."""

import json
import signal
import subprocess
import sys
import time

import pytest

from glamrl.run.dir import RunDir


def glamrl(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "glamrl.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_eval_random_writes_json_with_per_task_stats(tmp_path):
    out = tmp_path / "random.json"
    done = glamrl("eval", "--agent", "random", "--env", "BabyAI-MixedTrainLocal-v0", "--episodes", "40",
                  "--seed", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "success" in done.stdout and "go_to" in done.stdout
    result = json.loads(out.read_text())
    assert {"success_rate", "mean_return", "mean_length", "episodes", "per_task"} <= result.keys()
    assert result["episodes"] == 40
    assert sum(t["episodes"] for t in result["per_task"].values()) == 40
    assert set(result["per_task"]) <= {"go_to", "pick_up", "open", "put_next", "pick_up_seq_go_to"}


def test_eval_bot_solves_the_test_level():
    done = glamrl("eval", "--agent", "bot", "--env", "BabyAI-MixedTestLocal-v0", "--episodes", "24")
    assert done.returncode == 0, done.stderr
    first_row = done.stdout.splitlines()[2].split()
    assert first_row[0] == "all" and float(first_row[2]) == 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "--agent", "random", "--env", "BabyAI-Nope-v0", "--episodes", "2"], "BabyAI-Nope-v0"),
        (["eval", "--agent", "random", "--episodes", "zero"], "expected a positive integer"),
        (["eval", "--agent", "random", "--episodes", "0"], "expected a positive integer"),
        (["eval", "--agent", "wizard"], "invalid choice"),
        (["eval", "--agent", "llm", "--temperature", "0"], "expected a positive number, got 0"),
        (["eval", "--agent", "llm", "--temperature", "nan"], "expected a positive number, got nan"),
        (["eval", "--agent", "llm", "--greedy", "--temperature", "0.5"], "--temperature cannot apply with --greedy"),
        (["eval", "--agent", "random", "--temperature", "0.5"], "--temperature cannot apply to --agent random"),
        (["eval", "--agent", "llm", "--model", "/no/such/model", "--episodes", "2"], "/no/such/model"),
        (["train", "--config", "/no/such.yaml"], "config file not found"),
        (["train", "--config", "configs/turn_to_object.yaml", "ppo.nope=1"], "unknown config key 'ppo.nope'"),
    ],
)
def test_bad_input_gives_one_clear_line(args, message):
    done = glamrl(*args)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_train_then_eval_and_plot_a_run(tmp_path):
    run = tmp_path / "run"
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("env:\n  id: BabyAI-TurnToObject-v0\n  num_envs: 2\nmodel:\n  name: tiny-t5\n  device: cpu\n"
                   "ppo:\n  total_frames: 16\n  num_steps: 4\n  minibatch_size: 4\n  epochs: 1\n")
    done = glamrl("train", "--config", str(cfg), "--run-dir", str(run), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert (run / "curves.png").stat().st_size > 1000 and (run / "checkpoints" / "last.pt").exists()
    assert len((run / "log.csv").read_text().splitlines()) == 1 + 2
    done = glamrl("eval", "--agent", "llm", "--run", str(run), "--env", "BabyAI-TurnToObject-v0", "--episodes", "4")
    assert done.returncode == 0, done.stderr
    done = glamrl("plot", str(run), "--out", str(tmp_path / "p.png"))
    assert done.returncode == 0 and (tmp_path / "p.png").exists()


def test_sigterm_stops_training_with_one_line_and_the_run_resumes(tmp_path):
    run, cfg = tmp_path / "run", tmp_path / "tiny.yaml"
    cfg.write_text("env:\n  id: BabyAI-TurnToObject-v0\n  num_envs: 2\nmodel:\n  name: tiny-t5\n  device: cpu\n"
                   "ppo:\n  total_frames: 100000\n  num_steps: 4\n  minibatch_size: 4\n  epochs: 1\n"
                   "run:\n  tensorboard: false\n")
    proc = subprocess.Popen([sys.executable, "-m", "glamrl.cli", "train", "--config", str(cfg), "--run-dir", str(run),
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log, start = run / "log.csv", time.monotonic()
    while not (log.exists() and len(log.read_text().splitlines()) >= 3):  # two updates logged: training, not loading
        assert proc.poll() is None and time.monotonic() - start < 240, "training ended or never logged an update"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # as `kill` and a scheduler's time limit stop a job
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "glamrl: terminated (SIGTERM)" in err and "Traceback" not in err
    bad = glamrl("train", "--run-dir", str(run), "ppo.total_frames=1.5")  # the command line's error, not the run's
    assert bad.returncode == 2 and "ppo.total_frames must be int" in bad.stderr and "saved config" not in bad.stderr
    frames = int(RunDir(run).read_log()[-1]["frames"])
    done = glamrl("train", "--run-dir", str(run), "--no-progress", f"ppo.total_frames={frames + 16}")
    assert done.returncode == 0, done.stderr
    rows = RunDir(run).read_log()
    assert [r["update"] for r in rows] == list(range(1, len(rows) + 1)) and rows[-1]["frames"] == frames + 16
