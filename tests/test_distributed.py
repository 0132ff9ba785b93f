"""DD-PPO with real torch.distributed (gloo): two ranks launched by torchrun on the CPU."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glamrl.checkpoint import load_checkpoint
from glamrl.cli import main
from glamrl.runlog import read_log

PROBE = Path(__file__).with_name("dist_probe.py")
CONFIG = """env:
  id: BabyAI-TurnToObject-v0
  num_envs: 2
model:
  name: tiny-llama
  device: cpu
ppo:
  num_steps: 4
  minibatch_size: 4
  epochs: 2
run:
  tensorboard: false
"""


pytestmark = pytest.mark.usefixtures("one_thread")


def torchrun(probe_dir: Path, *args: str, wait: bool = True):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(PROBE), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PROBE_DIR": str(probe_dir)}
    if wait:
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def probe_rows(probe_dir: Path, rank: int, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (probe_dir / f"rank{rank}.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def test_two_ranks_train_in_lockstep_on_different_episodes_and_resume(tmp_path):
    cfg, run, probes = tmp_path / "tiny.yaml", tmp_path / "run", tmp_path / "probes"
    cfg.write_text(CONFIG)
    probes.mkdir()
    done = torchrun(probes, "train", "--config", str(cfg), "--run-dir", str(run), "--no-progress",
                    "ppo.total_frames=48", "run.check_replicas=true")
    assert done.returncode == 0, done.stdout + done.stderr

    # the same weights on both ranks after every optimiser step (2 epochs x 2 minibatches x 3 updates)
    weights = [[r["digest"] for r in probe_rows(probes, rank, "weights")] for rank in (0, 1)]
    assert len(weights[0]) == 12 and weights[0] == weights[1]
    assert len(set(weights[0])) == 12  # and they did change at every step
    # different episodes: no observation batch is shared by the two ranks
    seen = [{json.dumps(r) for r in probe_rows(probes, rank, "obs")} for rank in (0, 1)]
    assert len(seen[0]) == len(seen[1]) == 12 and not seen[0] & seen[1]
    # rank 0 alone holds the run directory, logs every update once, with both ranks' frames
    pid0 = probe_rows(probes, 0, "pid")[0]["pid"]
    assert (run / ".lock").read_text().strip() == str(pid0)
    assert sorted(p.name for p in run.iterdir()) == [".lock", "checkpoints", "config.yaml", "curves.png", "log.csv"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["backup.pt", "last.pt"]
    rows = read_log(run)
    assert [r["update"] for r in rows] == [1, 2, 3] and [r["frames"] for r in rows] == [16, 32, 48]
    assert done.stdout.count("trained 3 updates") == 1  # one rank speaks

    # a resumed 2-rank run continues the log
    done = torchrun(probes, "train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=80")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming" in done.stdout
    assert [r["update"] for r in read_log(run)] == [1, 2, 3, 4, 5]
    assert [r["frames"] for r in read_log(run)] == [16, 32, 48, 64, 80]

    # and so does one process: the checkpoint does not depend on the number of ranks
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=88"]) == 0
    assert [r["frames"] for r in read_log(run)][-1] == 88 and load_checkpoint(run)["update"] == 6


def test_a_killed_rank_stops_the_whole_run(tmp_path):
    cfg, run, probes = tmp_path / "tiny.yaml", tmp_path / "run", tmp_path / "probes"
    cfg.write_text(CONFIG)
    probes.mkdir()
    proc = torchrun(probes, "train", "--config", str(cfg), "--run-dir", str(run), "--no-progress",
                    "ppo.total_frames=100000", wait=False)
    deadline = time.time() + 180
    while time.time() < deadline and not (run / "log.csv").exists() or len(read_log(run)) < 1:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    os.kill(probe_rows(probes, 1, "pid")[0]["pid"], signal.SIGKILL)
    try:
        output, _ = proc.communicate(timeout=120)  # stops, does not hang
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "Signal 9 (SIGKILL)" in output or "lost the other ranks" in output
    assert load_checkpoint(run)["update"] >= 1  # what was saved survives
