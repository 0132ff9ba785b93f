"""glamrl.memory: the resident set as the log reports it, glibc's heap kept for reuse (run.reuse_memory), and the
bounded caches of bf16 matmul kernels (run.kernel_cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glamrl.config import load_train_config
from glamrl.memory import KERNEL_CACHE_VARIABLES, _glibc, bound_kernel_caches, peak_rss_gb, rss_gb
from glamrl.run.dir import RunDir
from glamrl.trainers.ppo import train_ppo

ROOT = Path(__file__).resolve().parents[1]
BLOCKS_MB = (113, 56, 113, 40)  # a minibatch's large blocks, e.g. SmolLM2's tied embedding gradient (113 MB);
# each is above glibc's largest default mmap threshold (32 MiB), so by default it is mapped afresh every time
PAGES = sum(BLOCKS_MB) * 2**20 // 4096
ROUNDS, SETTLED = 8, 3  # with reuse the heap settles within 3 rounds: the small allocations made between rounds
# land in the freed space, so one block of round 2 or 3 may have to extend the heap (seen in ~1 of 4 processes)

SCRIPT = f"""
import json, resource, sys, torch
from glamrl.memory import reuse_freed_memory, rss_gb
if sys.argv[1] == "reuse":
    reuse_freed_memory()
faults, rss = [], [rss_gb()]
for _ in range({ROUNDS}):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(n * 2**20, dtype=torch.uint8) for n in {BLOCKS_MB}]  # every page written
    del blocks
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    rss.append(rss_gb())
print(json.dumps([faults, rss]))
"""


def rounds(mode: str) -> tuple[list[int], list[float]]:
    """Minor page faults in each of ROUNDS rounds of allocating, writing and freeing BLOCKS_MB, in a fresh process
    (mallopt is process-wide), and the resident set (GB) before the first round and after each."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, cwd=ROOT, check=True)
    faults, rss = json.loads(done.stdout.strip().splitlines()[-1])
    return faults, rss


def test_the_resident_set_is_read_and_its_peak_follows_a_large_block():
    before = peak_rss_gb()
    assert 0 < rss_gb() <= before
    block = torch.ones(300 * 2**20, dtype=torch.uint8)  # 0.31 GB, every page touched
    assert rss_gb() >= 0.25 and peak_rss_gb() >= rss_gb()
    assert peak_rss_gb() >= before
    del block


@pytest.mark.skipif(_glibc() is None, reason="mallopt is glibc's")
def test_reused_memory_stops_page_faulting_and_stays_flat_where_glibc_maps_every_block_afresh():
    faults, rss = rounds("reuse")
    assert faults[0] > PAGES / 2  # the first round faults its blocks in
    assert sum(faults[SETTLED:]) < PAGES / 20, faults  # then they are handed out again, their pages in place
    assert max(rss[SETTLED:]) <= 1.01 * rss[SETTLED], rss  # kept for reuse, not grown
    assert rss[-1] - rss[0] < 2 * PAGES * 4096 / 1e9, rss  # and what is kept is about one round's blocks
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists() and "[always]" in thp.read_text():
        pytest.skip("transparent huge pages for every mapping: a fresh block faults 512 times fewer, nothing to compare")
    faults, rss = rounds("default")
    assert all(n > PAGES / 2 for n in faults), faults  # every round maps and faults its blocks in again
    assert max(rss) < rss[0] + 0.1, rss  # and gives them back on free


KERNELS = """
import sys, torch
from glamrl.memory import bound_kernel_caches, rss_gb
bound_kernel_caches(int(sys.argv[1]))
torch.set_num_threads(1)
layer = torch.nn.Linear(576, 1536)
def step(rows):  # a bf16 forward and backward: kernels for one more input shape
    x = torch.randn(rows, 576, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(x).float().sum().backward()
step(64)
before = rss_gb()
for rows in range(100, 460, 3):  # 120 shapes, as prompts of 120 lengths bring
    step(rows)
print(rss_gb() - before)
"""


def kernel_growth(entries: int) -> float:
    """GB the resident set of a fresh process grows by over 120 shapes of a bf16 linear layer, its caches capped at
    `entries` (and none of their variables inherited)."""
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHE_VARIABLES}
    done = subprocess.run([sys.executable, "-c", KERNELS, str(entries)], capture_output=True, text=True, cwd=ROOT,
                          env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def test_capped_kernel_caches_keep_memory_flat_over_new_shapes():
    uncapped = kernel_growth(1024)  # the libraries' own capacity
    if uncapped < 0.1:
        pytest.skip(f"this CPU's bf16 matmuls kept no per-shape kernels ({uncapped:+.3f} GB over 120 shapes)")
    capped = kernel_growth(16)
    assert capped < 0.4 * uncapped, (capped, uncapped)  # measured on a Zen 4: +0.04 against +0.29 GB


def test_kernel_caches_take_the_environment_when_it_sets_them(monkeypatch):
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "unset")  # recorded, so that teardown removes it again
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    assert bound_kernel_caches(64) == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "7"}
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"  # set for this process's libraries


TINY_RUN = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "model.name=tiny-llama", "model.device=cpu",
            "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1", "run.tensorboard=false"]


def test_every_log_row_reports_memory_and_config_yaml_records_the_choice(tmp_path):
    said: list[str] = []
    cfg = load_train_config(None, [*TINY_RUN, "ppo.total_frames=16", "run.reuse_memory=false"])
    train_ppo(cfg, tmp_path / "run", progress=False, say=said.append)
    rows = RunDir(tmp_path / "run").read_log()
    assert len(rows) == 2
    for row in rows:
        assert 0 < float(row["rss_gb"]) <= float(row["peak_rss_gb"])
    assert float(rows[1]["peak_rss_gb"]) >= float(rows[0]["peak_rss_gb"])  # a peak so far never comes down
    assert any(line.startswith("run.reuse_memory: false (glibc's own thresholds") for line in said)
    assert RunDir(tmp_path / "run").read_config().run.reuse_memory is False
    assert [line for line in said if line.startswith("run.kernel_cache: ")][0].startswith("run.kernel_cache: 64 (")


EVAL_CAPS = """
import json, os, sys
from pathlib import Path
from glamrl.eval.agents import AgentSpec, load_eval_model
fresh = AgentSpec(kind="llm", model="tiny-llama")
load_eval_model(fresh if sys.argv[1] == "fresh" else AgentSpec(run=Path(sys.argv[1])))
print(json.dumps({name: os.environ.get(name) for name in sys.argv[2:]}))
"""


def test_an_evaluation_caps_the_kernel_caches_as_its_run_did(tmp_path, monkeypatch):
    for name in KERNEL_CACHE_VARIABLES:  # training below sets them in this process: restored at teardown
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    env = dict(os.environ)  # a fresh shell's, without them
    train_ppo(load_train_config(None, [*TINY_RUN, "ppo.total_frames=8", "run.eval_episodes=0", "run.kernel_cache=48"]),
              tmp_path / "run", progress=False, say=lambda _: None)

    def caps(agent: str) -> dict:  # glamrl eval, play, demos and the suite load their agent this way
        done = subprocess.run([sys.executable, "-c", EVAL_CAPS, agent, *KERNEL_CACHE_VARIABLES], capture_output=True,
                              text=True, cwd=ROOT, env=env, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert caps(str(tmp_path / "run")) == dict.fromkeys(KERNEL_CACHE_VARIABLES, "48")  # the run's own setting
    assert caps("fresh") == dict.fromkeys(KERNEL_CACHE_VARIABLES, "64")  # a fresh agent: the default
