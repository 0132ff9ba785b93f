"""A run directory cannot be corrupted, and bad input is refused with one line before any work."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from glamrl.cli import main
from glamrl.config import load_train_config
from glamrl.run.dir import RUN_DATA, RUN_FILES, RunDir, RunDirError
from glamrl.trainers.common import TrainResult, train_run_dir
from glamrl.trainers.ppo import train_ppo

TINY = [
    "env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "model.name=tiny-llama", "model.device=cpu",
    "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1", "run.tensorboard=false",
]
NO_MODEL = "model.name=/no/such/model"  # a config error must be found before this is looked at


pytestmark = pytest.mark.usefixtures("one_thread")


def glamrl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "glamrl.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def run_cli(capsys, *args: str) -> tuple[int, str]:
    """`glamrl ARGS` in this process: (exit status, stderr)."""
    code = main(list(args))
    return code, capsys.readouterr().err


def assert_one_line(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("glamrl: error: "), err
    for fragment in fragments:
        assert fragment in lines[0]


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


def tiny_config(tmp_path: Path, text: str = "") -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text("env:\n  id: BabyAI-TurnToObject-v0\n  num_envs: 2\nmodel:\n  name: tiny-llama\n  device: cpu\n"
                    "ppo:\n  num_steps: 4\n  minibatch_size: 4\n  epochs: 1\nrun:\n  tensorboard: false\n" + text)
    return path


# ------------------------------------------------------------------ one process per run
def test_a_second_process_on_a_running_run_is_refused_and_changes_nothing(tmp_path):
    run = tmp_path / "run"
    cfg = tiny_config(tmp_path)
    train_ppo(load_train_config(cfg, ["ppo.total_frames=8"]), run, progress=False, say=lambda _: None)
    before = snapshot(run)
    with RunDir(run).lock():  # this process is the training that holds the run
        done = glamrl("train", "--config", str(cfg), "--run-dir", str(run), "ppo.total_frames=8")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert f"PID {os.getpid()}" in done.stderr and "in use by another glamrl process" in done.stderr
    assert snapshot(run) == before


def test_a_run_directory_is_locked_once_in_a_process(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.lock():
        for _ in range(2):  # a refusal leaves the first hold alone: the second try is refused too
            with pytest.raises(RunDirError, match="already locked by this process"), run.lock():
                pass
        assert run.lock_file.read_text().strip() == str(os.getpid())
    with run.lock():  # released: it can be taken again
        pass


def test_the_loop_trains_under_the_one_lock_that_decided_about_resuming(tmp_path):
    run, seen = RunDir(tmp_path / "run"), []

    def loop(cfg, run_dir, resume, progress, say):
        with pytest.raises(RunDirError, match="already locked"), RunDir(run_dir).lock():
            pass
        seen.append(resume)
        return TrainResult(run_dir, 0, "update", 0, None, None)

    train_run_dir(run, load_train_config(None, TINY), loop=loop)
    assert seen == [False]


# ------------------------------------------------------------------ --config on an existing run
def test_config_rule_on_an_existing_run(tmp_path, capsys):
    run, cfg = tmp_path / "run", tiny_config(tmp_path)
    assert main(["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress", "ppo.total_frames=8"]) == 0
    before = snapshot(run)

    # another config file: refused, with the way to resume or start afresh, and nothing touched
    other = tmp_path / "other.yaml"
    other.write_text(cfg.read_text().replace("epochs: 1", "epochs: 1\n  lr: 0.5"))
    code, err = run_cli(capsys, "train", "--config", str(other), "--run-dir", str(run), "ppo.total_frames=8")
    assert_one_line(code, err, "ppo.lr", "--run-dir", "--overwrite")
    assert snapshot(run) == before

    # the same config resumes (re-running the same command is safe)
    assert main(["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress", "ppo.total_frames=8"]) == 0
    assert "resuming" in capsys.readouterr().out

    # overrides on resume extend the run and are recorded in its config
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16"]) == 0
    assert "total_frames: 16" in (run / "config.yaml").read_text()
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]

    # --overwrite starts afresh
    assert main(["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress", "--overwrite",
                 "ppo.total_frames=8", "ppo.lr=1e-3"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1]
    assert "lr: 0.001" in (run / "config.yaml").read_text()


def test_a_start_that_fails_leaves_no_config_behind(tmp_path, capsys):
    run, cfg = tmp_path / "run", tiny_config(tmp_path)
    code, err = run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(run), NO_MODEL)
    assert_one_line(code, err, "/no/such/model")
    assert not (run / "config.yaml").exists()
    assert main(["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress", "ppo.total_frames=8"]) == 0


# ------------------------------------------------------------------ checkpoints
def test_resuming_from_the_backup_keeps_the_backup(tmp_path):
    run = tmp_path / "run"
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=16"]), run, progress=False, say=lambda _: None)
    last, backup = RunDir(run).last_checkpoint, RunDir(run).backup_checkpoint
    good_backup = backup.read_bytes()
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # a torn write

    with pytest.warns(UserWarning, match="resuming from"):
        train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=16"]), run, resume=True, progress=False,
              say=lambda _: None)
    assert backup.read_bytes() == good_backup  # the corrupt last.pt was not rotated into it
    assert torch.load(last, weights_only=True)["log_rows"] == 2
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]


def test_a_run_whose_checkpoints_were_removed_is_refused_not_trained_over(tmp_path, capsys):
    """A run kept without its checkpoints (results/ keeps finished runs so) cannot resume; training it from scratch
    would replace its log. A run killed before its first checkpoint (checkpoint_every rows) starts over."""
    run = tmp_path / "run"
    config = tiny_config(tmp_path)
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--no-progress", "ppo.total_frames=16"]) == 0
    for file in RunDir(run).checkpoints.iterdir():
        file.unlink()
    kept = snapshot(run)
    assert_one_line(*run_cli(capsys, "train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=24"),
                    f"{run} has 2 log rows but no checkpoint", "--overwrite")
    assert snapshot(run) == kept

    # checkpoints every 4 rows, none written yet: it starts over
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=24", "run.checkpoint_every=4"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2, 3]


def test_kill_9_at_ten_random_moments_loses_nothing(tmp_path):
    """SIGKILL during collection, update or checkpoint writes, ten times; every update logged exactly once."""
    run, cfg = tmp_path / "run", tiny_config(tmp_path)
    args = ["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress", "ppo.total_frames=320"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rng = random.Random(0)
    log = run / "log.csv"
    for _ in range(10):
        rows_before = len(log.read_text().splitlines()) if log.exists() else 1
        proc = subprocess.Popen([sys.executable, "-m", "glamrl.cli", *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:  # past start-up: it has logged an update
            if log.exists() and len(log.read_text().splitlines()) > rows_before:
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = glamrl(*args)
    assert done.returncode == 0, done.stderr
    rows = RunDir(run).read_log()
    assert [r["update"] for r in rows] == list(range(1, 41))
    assert [r["frames"] for r in rows] == [8 * u for u in range(1, 41)]
    assert RunDir(run).load_checkpoint().progress.log_rows == 40
    assert not [p.name for p in run.rglob(".*tmp-*")]  # the killed writers' temporaries were removed


# ------------------------------------------------------------------ bad input, one line
@pytest.mark.parametrize("override", [
    "ppo.max_grad_norm=-1", "ppo.value_coef=-1", "ppo.adam_eps=-1", "model.lora_dropout=2",
    "run.eval_episodes=-1", "ppo.adam_beta1=1.5", "run.checkpoint_every=0", "env.seed=-1", "ppo.lr=.nan",
])
def test_impossible_values_are_refused_before_any_model_is_loaded(tmp_path, capsys, override):
    code, err = run_cli(capsys, "train", "--config", str(tiny_config(tmp_path)), "--run-dir", str(tmp_path / "r"),
                        NO_MODEL, override)
    assert_one_line(code, err, override.partition("=")[0])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("text", "message"), [
    ("", "is empty"),
    ("ppo:\n  lr: 1.0e-3\n  lr: 1.0e-4\n", "'lr' is given twice"),
    ("env: [unclosed", "not valid YAML"),
])
def test_bad_config_files_are_refused(tmp_path, capsys, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert_one_line(*run_cli(capsys, "train", "--config", str(path), "--run-dir", str(tmp_path / "r")), message)


def test_an_override_given_twice_is_refused(tmp_path, capsys):
    code, err = run_cli(capsys, "train", "--config", str(tiny_config(tmp_path)), "ppo.lr=1", "ppo.lr=2")
    assert_one_line(code, err, "ppo.lr is given twice")


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe binary", b"env: [unclosed", b"ppo:\n  nope: 1\n"])
def test_a_damaged_config_inside_a_run_dir_is_one_line(tmp_path, capsys, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_bytes(content)
    code, err = run_cli(capsys, "train", "--run-dir", str(run))
    assert_one_line(code, err, "config")


def test_run_dir_that_is_a_file_or_read_only(tmp_path, capsys):
    cfg = tiny_config(tmp_path)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert_one_line(*run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(a_file)), "is a file")
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    if subprocess.run(["chattr", "+i", str(frozen)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available to make a directory read-only for root")
    try:
        assert_one_line(*run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(frozen)), "not writable")
    finally:
        subprocess.run(["chattr", "-i", str(frozen)])


@pytest.mark.parametrize("command", [
    ["eval", "--agent", "random", "--env", "BabyAI-TurnToObject-v0", "--episodes", "2"],
    ["plot", "RUN"],
])
def test_unwritable_out_is_refused_before_the_work(tmp_path, capsys, command):
    run, blocker = tmp_path / "run", tmp_path / "a_file"
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=8"]), run, progress=False, say=lambda _: None)
    blocker.write_text("x")
    args = [str(run) if a == "RUN" else a for a in command]
    for out, message in ((blocker / "out.json", "not a directory"), (tmp_path, "is a directory")):
        code, err = run_cli(capsys, *args, "--out", str(out))
        assert_one_line(code, err, message)
    assert capsys.readouterr().out == ""  # nothing was evaluated or drawn


def test_messages_name_the_real_problem(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = run_cli(capsys, "eval", "--agent", "llm", "--run", str(empty), "--episodes", "1")
    assert_one_line(code, err, "not a glamrl run directory")
    assert "--config" not in err
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00" * 10)
    code, err = run_cli(capsys, "eval", "--agent", "llm", "--model", str(junk), "--episodes", "1")
    assert_one_line(code, err, "is a file but not a .gguf model")


def test_run_dir_names_every_path_of_a_run(tmp_path):
    run = RunDir(tmp_path / "run")
    data = (run.config, run.history, run.log, run.probes, run.checkpoints, run.tensorboard, run.lock_file)
    assert tuple(p.relative_to(run.path).as_posix() for p in data) == RUN_DATA
    assert (*RUN_DATA, run.curves.name) == RUN_FILES
    assert run.last_checkpoint.parent == run.backup_checkpoint.parent == run.checkpoints
    assert RunDir(run) == RunDir(str(run)) == run and not run.is_run and not run.path.exists()  # names touch nothing
