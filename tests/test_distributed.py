"""DD-PPO and FSDP2 with real torch.distributed (gloo): two ranks launched by torchrun on the CPU."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from glamrl.cli import main
from glamrl.run.dir import RunDir

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


def failure(done: subprocess.CompletedProcess, probe_dir: Path) -> str:
    """What a failed torchrun printed, then where each rank's probe stopped (its last rows, observations aside)."""
    where = []
    for log in sorted(probe_dir.glob("rank*.jsonl")):
        rows = [row for row in map(json.loads, log.read_text().splitlines()) if row["kind"] not in ("obs", "weights")]
        where.append(f"{log.stem} last recorded: {rows[-3:]}")
    return "\n".join([done.stdout + done.stderr, *where])


def probe_rows(probe_dir: Path, rank: int, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (probe_dir / f"rank{rank}.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def test_two_ranks_train_in_lockstep_on_different_episodes_and_resume(tmp_path):
    cfg, run, probes = tmp_path / "tiny.yaml", tmp_path / "run", tmp_path / "probes"
    cfg.write_text(CONFIG)
    probes.mkdir()
    done = torchrun(probes, "train", "--config", str(cfg), "--run-dir", str(run), "--no-progress",
                    "ppo.total_frames=48", "run.check_replicas=true")
    assert done.returncode == 0, failure(done, probes)

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
    rows = RunDir(run).read_log()
    assert [r["update"] for r in rows] == [1, 2, 3] and [r["frames"] for r in rows] == [16, 32, 48]
    assert done.stdout.count("trained 3 updates") == 1  # one rank speaks
    # each rank left the process group whole: its gloo threads were joined before the interpreter's shutdown
    assert [probe_rows(probes, rank, "exit")[0]["gloo_threads"] for rank in (0, 1)] == [[], []]

    # a resumed 2-rank run continues the log
    done = torchrun(probes, "train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=80")
    assert done.returncode == 0, failure(done, probes)
    assert "resuming" in done.stdout
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2, 3, 4, 5]
    assert [r["frames"] for r in RunDir(run).read_log()] == [16, 32, 48, 64, 80]

    # and so does one process: the checkpoint does not depend on the number of ranks
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=88"]) == 0
    assert [r["frames"] for r in RunDir(run).read_log()][-1] == 88
    assert RunDir(run).load_checkpoint().progress.log_rows == 6


def test_a_killed_rank_stops_the_whole_run(tmp_path):
    cfg, run, probes = tmp_path / "tiny.yaml", tmp_path / "run", tmp_path / "probes"
    cfg.write_text(CONFIG)
    probes.mkdir()
    proc = torchrun(probes, "train", "--config", str(cfg), "--run-dir", str(run), "--no-progress",
                    "ppo.total_frames=100000", wait=False)
    deadline = time.time() + 180
    while time.time() < deadline and not RunDir(run).last_checkpoint.exists():  # a row is logged before its save
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    os.kill(probe_rows(probes, 1, "pid")[0]["pid"], signal.SIGKILL)
    try:
        output, _ = proc.communicate(timeout=120)  # stops, does not hang
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "Signal 9 (SIGKILL)" in output or "lost the other ranks" in output
    assert RunDir(run).load_checkpoint().progress.log_rows >= 1  # what was saved survives


# ------------------------------------------------------------------ FSDP2 sharding (run.sharding=fsdp)
def commands_rows(probe_dir: Path, rank: int, kind: str) -> dict[str, list[list[dict]]]:
    """A probe's rows of `kind`, per run directory, per command run on it (dist_probe.py ... --then ...)."""
    runs: dict[str, list[list[dict]]] = {}
    for line in (probe_dir / f"rank{rank}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["kind"] == "command":
            current = runs.setdefault(Path(row["args"][row["args"].index("--run-dir") + 1]).name, [])
            current.append([])
        elif row["kind"] == kind:
            current[-1].append(row)
    return runs


def assert_same_state(ddp: dict, fsdp: dict) -> None:
    """The FSDP checkpoint holds the DD-PPO one's trainable weights and Adam moments (whole tensors)."""
    assert fsdp["log_rows"] == ddp["log_rows"] and fsdp["policy"].keys() == ddp["policy"].keys()
    for name, weight in ddp["policy"].items():
        torch.testing.assert_close(fsdp["policy"][name], weight, rtol=0, atol=1e-6)
    assert fsdp["optimizer"]["state"].keys() == ddp["optimizer"]["state"].keys()
    for i, moments in ddp["optimizer"]["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(fsdp["optimizer"]["state"][i][key], value, rtol=0, atol=1e-6)


def test_fsdp_trains_as_dd_ppo_does_and_its_checkpoint_serves_every_mode(tmp_path):
    cfg, probes = tmp_path / "tiny.yaml", tmp_path / "probes"
    cfg.write_text(CONFIG)
    probes.mkdir()
    ddp, fsdp, t5_ddp, t5_fsdp = (tmp_path / name for name in ("ddp", "fsdp", "t5-ddp", "t5-fsdp"))
    # one 2-rank job, six commands: tiny-llama, one update in each mode, then each resumes for a second
    # one; tiny-t5 (encoder and decoder blocks, tied embeddings), one update in each mode
    new = ["--config", str(cfg), "ppo.total_frames=16", "model.batching=padded"]
    runs = [(ddp, "none", new), (fsdp, "fsdp", new), (ddp, "none", ["ppo.total_frames=32"]),
            (fsdp, "fsdp", ["ppo.total_frames=32"]), (t5_ddp, "none", [*new, "model.name=tiny-t5"]),
            (t5_fsdp, "fsdp", [*new, "model.name=tiny-t5"])]
    commands = [["--then", "train", "--run-dir", str(run), "--no-progress", *args, f"run.sharding={mode}"]
                for run, mode, args in runs]
    done = torchrun(probes, *[arg for command in commands for arg in command][1:])
    assert done.returncode == 0, failure(done, probes)
    assert done.stdout.count(f"resuming {fsdp} after update 1") == 1
    assert [r["update"] for r in RunDir(fsdp).read_log()] == [1, 2]

    # the only difference is the sharding: the same episodes, losses, clipped gradient norms and states
    for rank in (0, 1):
        obs, weights = commands_rows(probes, rank, "obs"), commands_rows(probes, rank, "weights")
        assert obs["fsdp"] == obs["ddp"] and len(obs["fsdp"]) == 2 and obs["t5-fsdp"] == obs["t5-ddp"]
        assert all(w["sharded"] for rows in weights["fsdp"] + weights["t5-fsdp"] for w in rows)  # DTensor shards
        assert not any(w["sharded"] for rows in weights["ddp"] + weights["t5-ddp"] for w in rows)
    for sharded, replicated in ((fsdp, ddp), (t5_fsdp, t5_ddp)):
        for term in ("grad_norm", "loss", "value_loss"):  # the norm over the shards is the whole one
            assert [r[term] for r in RunDir(sharded).read_log()] == pytest.approx(
                [r[term] for r in RunDir(replicated).read_log()], rel=1e-5)
    after_one = [torch.load(run / "checkpoints" / "backup.pt", weights_only=True) for run in (ddp, fsdp)]
    after_two = [RunDir(run).load_checkpoint().to_dict() for run in (ddp, fsdp)]
    assert_same_state(*after_one)
    assert_same_state(*after_two)  # the FSDP run resumed from its own checkpoint as DD-PPO did
    assert_same_state(RunDir(t5_ddp).load_checkpoint().to_dict(), RunDir(t5_fsdp).load_checkpoint().to_dict())
    first, second = after_one[1]["policy"], after_two[1]["policy"]
    assert any(not torch.equal(first[name], second[name]) for name in first)  # the second update trained

    # one process resumes the FSDP run without sharding, and evaluates it
    assert main(["train", "--run-dir", str(fsdp), "--no-progress", "ppo.total_frames=40", "run.sharding=none"]) == 0
    assert [r["update"] for r in RunDir(fsdp).read_log()] == [1, 2, 3]
    assert main(["eval", "--run", str(fsdp), "--env", "BabyAI-TurnToObject-v0", "--episodes", "2"]) == 0


def test_fsdp_without_torchrun_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(CONFIG)
    code = main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "run.sharding=fsdp",
                 "model.batching=padded"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "torchrun" in err[0] and "run.sharding=none" in err[0]
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(("overrides", "fragment"), [
    (["model.lora=true"], "model.lora"), (["model.train_layers=1"], "model.train_layers"),
    ([], "model.batching=padded"), (["run.check_replicas=true"], "run.check_replicas"),
    (["agent.kind=symbolic"], "agent.kind"),
])
def test_fsdp_refuses_what_it_cannot_shard_in_one_line(tmp_path, capsys, overrides, fragment):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(CONFIG)
    padded = ["model.batching=padded"] if fragment != "model.batching=padded" else []
    code = main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "run.sharding=fsdp",
                 *padded, *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and fragment in err[0], err


@pytest.mark.parametrize(("cuda", "gpus", "ranks_here", "expected"),
                         [(False, 0, 2, "gloo"), (True, 2, 2, "nccl"), (True, 1, 2, "gloo"), (True, 8, 4, "nccl")])
def test_ranks_that_share_a_gpu_use_gloo(monkeypatch, cuda, gpus, ranks_here, expected):
    from glamrl.parallel.distributed import backend
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)  # no GPU here: the count is the input
    assert backend(cuda, ranks_here) == expected
