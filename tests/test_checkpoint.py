import io
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from glamrl.files import writing
from glamrl.run.checkpoint import (Checkpoint, CheckpointError, Progress, load_checkpoint, rng_state, save_checkpoint,
                                   set_rng_state)
from glamrl.run.dir import RunDir


def _files(run_dir) -> tuple:
    """The run directory's last and backup checkpoint files."""
    run = RunDir(run_dir)
    return run.last_checkpoint, run.backup_checkpoint


def _trained_state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "update": 3,
            "frames": 1536, "lr": 1e-2, "history": [0.1, 0.2], "rng": rng_state()}


def _assert_equal(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_equal(x, y)
    else:
        assert a == b


def test_round_trip_is_bitwise_equal(tmp_path):
    state = _trained_state()
    path = save_checkpoint(*_files(tmp_path), state)
    assert path == tmp_path / "checkpoints" / "last.pt"
    _assert_equal(state, load_checkpoint(*_files(tmp_path)))


def test_no_checkpoint_returns_none(tmp_path):
    assert load_checkpoint(*_files(tmp_path)) is None


def test_rotation_keeps_previous_as_backup(tmp_path):
    save_checkpoint(*_files(tmp_path), {"update": 1})
    assert not (tmp_path / "checkpoints" / "backup.pt").exists()
    save_checkpoint(*_files(tmp_path), {"update": 2})
    save_checkpoint(*_files(tmp_path), {"update": 3})
    assert load_checkpoint(*_files(tmp_path))["update"] == 3
    backup = torch.load(tmp_path / "checkpoints" / "backup.pt", weights_only=True)
    assert backup["update"] == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["backup.pt", "last.pt"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_last_falls_back_to_backup(tmp_path, damage):
    save_checkpoint(*_files(tmp_path), _trained_state(1))
    save_checkpoint(*_files(tmp_path), {"update": 2, "w": torch.randn(100)})
    last = tmp_path / "checkpoints" / "last.pt"
    data = last.read_bytes()
    last.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x80not a checkpoint" * 50, "empty": b""}[damage])
    with pytest.warns(UserWarning, match="last.pt"):
        state = load_checkpoint(*_files(tmp_path))
    assert state["update"] == 3  # the backup, from _trained_state


def test_missing_last_falls_back_to_backup(tmp_path):
    save_checkpoint(*_files(tmp_path), {"update": 1})
    save_checkpoint(*_files(tmp_path), {"update": 2})
    (tmp_path / "checkpoints" / "last.pt").unlink()
    with pytest.warns(UserWarning, match="backup"):
        assert load_checkpoint(*_files(tmp_path))["update"] == 1


def test_both_corrupt_raises(tmp_path):
    save_checkpoint(*_files(tmp_path), {"update": 1})
    save_checkpoint(*_files(tmp_path), {"update": 2})
    for name in ("last.pt", "backup.pt"):
        (tmp_path / "checkpoints" / name).write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="last.pt.*backup.pt"):
        load_checkpoint(*_files(tmp_path))


def test_rng_state_round_trip_through_checkpoint(tmp_path):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    np.random.randn()  # leave a cached gaussian in numpy's state
    save_checkpoint(*_files(tmp_path), {"rng": rng_state()})
    expected = (random.random(), np.random.randn(3).tolist(), torch.rand(3))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    set_rng_state(load_checkpoint(*_files(tmp_path))["rng"])
    got = (random.random(), np.random.randn(3).tolist(), torch.rand(3))
    assert expected[:2] == got[:2] and torch.equal(expected[2], got[2])


@pytest.mark.parametrize("bad", [np.zeros(3), np.float64(0.5), {"x": object()}])
def test_values_a_safe_load_refuses_are_rejected_at_save(tmp_path, bad):
    with pytest.raises(TypeError, match="plain Python values"):
        save_checkpoint(*_files(tmp_path), {"metric": bad})
    assert not (tmp_path / "checkpoints" / "last.pt").exists()


class _Killed(BaseException):
    pass


@pytest.mark.parametrize("step", [0, 1])
def test_interrupted_rotation_leaves_a_good_checkpoint(tmp_path, monkeypatch, step):
    save_checkpoint(*_files(tmp_path), {"update": 1})
    save_checkpoint(*_files(tmp_path), {"update": 2})
    calls, real_replace = [], os.replace

    def replace(src, dst):
        if len(calls) == step:
            raise _Killed
        calls.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr("glamrl.run.checkpoint.os.replace", replace)
    with pytest.raises(_Killed):
        save_checkpoint(*_files(tmp_path), {"update": 3})
    assert load_checkpoint(*_files(tmp_path))["update"] == 2  # no warning: last.pt is still good

    # the next save rotates as ever, though after step 1 backup.pt and last.pt are links to one file (rename()
    # between two such names does nothing) and leaves no temporary behind
    monkeypatch.undo()
    save_checkpoint(*_files(tmp_path), {"update": 4})
    assert load_checkpoint(*_files(tmp_path))["update"] == 4
    assert torch.load(tmp_path / "checkpoints" / "backup.pt", weights_only=True)["update"] == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["backup.pt", "last.pt"]


def test_kill_9_during_saves_leaves_a_loadable_checkpoint(tmp_path):
    script = ("import sys, torch\nfrom glamrl.run.checkpoint import save_checkpoint\n"
              "from glamrl.run.dir import RunDir\n"
              "run = RunDir(sys.argv[1])\n"
              "for i in range(10**6):\n"
              "    save_checkpoint(run.last_checkpoint, run.backup_checkpoint,\n"
              "                    {'update': i, 'w': torch.randn(200_000)})\n"
              "    print(i, flush=True)\n")
    for delay in (0.05, 0.21):
        proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE)
        proc.stdout.readline()  # one save done
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # last.pt itself must be good
            assert load_checkpoint(*_files(tmp_path))["update"] >= 0


def test_one_schema_reads_the_checkpoints_every_loop_wrote(tmp_path):
    weights, common = {"w": torch.ones(2)}, {"optimizer": {"state": {}, "param_groups": []}, "rng": rng_state()}
    ppo = {"trainer": "ppo", "policy": weights, **common, "log_rows": 3, "frames": 96, "episodes": 7,
           "duration": 1.5, "config": {"env": {}}, "value_norm": {"weight": torch.tensor(0.5)}}
    state = Checkpoint.from_dict(ppo)
    assert state.progress == Progress(log_rows=3, frames=96, episodes=7, duration=1.5)
    assert state.extra.keys() == {"value_norm"}
    _assert_equal(state.to_dict(), ppo)  # the same keys and values: what the loops write
    # older checkpoints: the rows stored as "update"; before that, no trainer; BC's with no episodes, and its
    # optimizer steps as its rows (its log's `update` column held them)
    old = {("update" if key == "log_rows" else key): value for key, value in ppo.items()}
    assert Checkpoint.from_dict(old).progress == state.progress
    _assert_equal(Checkpoint.from_dict(old).to_dict(), ppo)  # saved again, in today's keys, extra state kept
    unnamed = {key: value for key, value in old.items() if key != "trainer"}  # before checkpoints named their loop
    assert Checkpoint.from_dict(unnamed).trainer == "ppo"
    bc = {"trainer": "bc", "policy": weights, **common, "update": 4, "frames": 32, "data": {"sha256": "ab"},
          "duration": 2.0, "config": {}}
    assert Checkpoint.from_dict(bc).progress == Progress(4, 32, 0, 2.0)
    assert Checkpoint.from_dict(bc).extra == {"data": {"sha256": "ab"}}
    run = RunDir(tmp_path / "run")
    run.save_checkpoint(state)
    _assert_equal(run.load_checkpoint().to_dict(), ppo)
    with pytest.raises(ValueError, match="common keys"):
        Checkpoint("ppo", Progress(), weights, {}, {}, None, extra={"update": 1})  # the older key of log_rows


def test_locking_a_run_removes_the_temporaries_its_killed_writers_left(tmp_path):
    """A writer killed inside its last checkpoint write leaves a temporary no later save would replace. Only the
    lock's holder writes the run's data, so the lock removes each of its temporaries even where /proc shows a live
    process of that PID (a PID reused, or a clock /proc reads differently); another output's keeps its live writer's."""
    run = RunDir(tmp_path / "run")
    save_checkpoint(*_files(run), _trained_state())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid, now = int(dead.stdout), time.time_ns()
    left = [run.checkpoints / f".backup.pt.tmp-{dead_pid}-1", run.path / f".log.csv.tmp-{dead_pid}-2",
            run.checkpoints / f".last.pt.tmp-{dead_pid}-3",
            run.checkpoints / f".last.pt.tmp-{os.getpid()}-{now}",  # a live PID: not a holder, so a killed one's
            run.path / f".config.yaml.tmp-{os.getpid()}-{now}", run.path / f".eval.json.tmp-{dead_pid}-4"]
    live = run.path / f".eval.json.tmp-{os.getpid()}-{now}"  # `glamrl eval --out RUN/eval.json`, still running
    for path in [*left, live]:
        path.write_bytes(b"partial")
    with run.lock():
        assert [p for p in left if p.exists()] == []
        assert live.exists()
    assert load_checkpoint(*_files(run))["update"] == 3


def test_an_interrupt_inside_torchs_writer_stays_an_interrupt_not_a_disk_failure():
    class Interrupted(io.BytesIO):
        """A file whose fourth write meets Ctrl-C (or SIGTERM, which glamrl.cli raises as one)."""
        writes = 0

        def write(self, data):
            self.writes += 1
            if self.writes > 3:
                raise KeyboardInterrupt
            return super().write(data)

    with pytest.raises(KeyboardInterrupt):  # torch wraps it in a RuntimeError that reads as a failed write
        with writing(Path("unused.pt")):
            torch.save({"w": torch.randn(100_000)}, Interrupted())
