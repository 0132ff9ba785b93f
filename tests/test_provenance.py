"""Every result file says where it came from: `glamrl eval`, its suites, and a run's eval_before/eval_after."""

import json
import os
import re
from importlib import metadata

import pytest
import torch

from glamrl.cli import main
from glamrl.config import load_train_config
from glamrl.eval import provenance as prov
from glamrl.eval.provenance import SPEED_FLAGS
from glamrl.llm.precision import cpu_fields, cpu_flags
from glamrl.seeds import eval_seed
from glamrl.trainers.ppo import train_ppo

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "env.seed=5", "model.name=tiny-llama",
        "model.device=cpu", "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1", "ppo.total_frames=16",
        "run.tensorboard=false", "run.eval_episodes=2", "prompt.nbr_obs=2"]
LEVEL = {"id": "BabyAI-TurnToObject-v0", "task": None, "language": "en", "max_steps": None, "faithful": False}


def check_common(record):
    assert record["glamrl_version"] == metadata.version("glamrl")
    assert record["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}", record["git_commit"])
    machine = record["machine"]  # what ran it, as /proc/cpuinfo and torch say
    assert machine["torch"] == torch.__version__ and machine["cpus"] == len(os.sched_getaffinity(0))
    flags = set(cpu_flags())
    assert machine["cpu_flags"] == [f for f in SPEED_FLAGS if f in flags] and set(machine["cpu_flags"]) <= flags
    assert machine["cpu"].startswith(cpu_fields().get("model name", "unknown CPU"))


def test_the_machine_record_reads_the_first_cpu_of_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
                       "model name\t: AMD EPYC\nflags\t\t: fpu avx2 sse\n\nprocessor\t: 1\nmodel name\t: Other\n"
                       "flags\t\t: avx512f\n")
    assert cpu_fields(cpuinfo)["model name"] == "AMD EPYC" and cpu_fields(cpuinfo)["cpu family"] == "25"
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "sse"}
    assert cpu_fields(tmp_path / "none") == {} and cpu_flags(tmp_path / "none") == frozenset()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("prov") / "run"
    train_ppo(load_train_config(None, TINY), directory, progress=False, say=lambda _: None)
    return directory


def test_a_training_run_saves_its_evaluations_with_their_provenance(run):
    before = json.loads((run / "eval_before.json").read_text())
    after = json.loads((run / "eval_after.json").read_text())
    for saved, checkpoint in ((before, {"update": 0, "frames": 0}), (after, {"update": 2, "frames": 16})):
        record = saved["provenance"]
        assert 0 <= saved["success_rate"] <= 1 and saved["episodes"] == 2
        assert record["checkpoint"] == checkpoint
        assert (record["run_dir"], record["model"], record["agent"]) == (str(run.resolve()), "tiny-llama", "llm")
        assert record["episode_seeds"] == {"first": eval_seed(5, "spread"), "count": 2}
        assert (record["level"], record["num_envs"], record["greedy"], record["temperature"]) == (LEVEL, 2, False, 1.0)
        check_common(record)


def test_eval_of_a_run_records_its_checkpoint(run, tmp_path):
    out = tmp_path / "eval.json"
    assert main(["eval", "--run", str(run), "--episodes", "2", "--num-envs", "2", "--seed", "7", "--greedy",
                 "--device", "cpu", "--out", str(out)]) == 0
    record = json.loads(out.read_text())["provenance"]
    assert record["checkpoint"] == {"update": 2, "frames": 16}
    assert (record["run_dir"], record["model"], record["greedy"]) == (str(run.resolve()), "tiny-llama", True)
    assert record["episode_seeds"] == {"first": eval_seed(7, "spread"), "count": 2}


def test_eval_at_a_temperature_records_it(run, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["eval", "--run", str(run), "--episodes", "2", "--num-envs", "2", "--temperature", "0.5",
                 "--device", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"(2 episodes from seed {eval_seed(1, 'spread')}, sampled at temperature 0.5)" in printed
    record = json.loads(out.read_text())["provenance"]
    assert (record["greedy"], record["temperature"]) == (False, 0.5)


def test_eval_and_suite_of_a_fresh_agent_record_level_seeds_and_version(tmp_path):
    assert main(["eval", "--agent", "random", "--env", "BabyAI-TurnToObject-v0", "--episodes", "3",
                 "--num-envs", "3", "--seed", "2", "--out", str(tmp_path / "eval.json")]) == 0
    assert main(["eval", "--agent", "random", "--env", "BabyAI-TurnToObject-v0", "--tests", "no_change",
                 "--episodes", "3", "--num-envs", "3", "--seed", "2", "--out", str(tmp_path / "suite.json")]) == 0
    for name in ("eval.json", "suite.json"):
        record = json.loads((tmp_path / name).read_text())["provenance"]
        assert (record["run_dir"], record["model"], record["checkpoint"], record["agent"]) == (None, None, None,
                                                                                               "random")
        assert record["episode_seeds"] == {"first": eval_seed(2, "spread"), "count": 3}
        assert (record["level"], record["num_envs"], record["greedy"]) == (LEVEL, 3, False)
        check_common(record)


def test_git_commit_is_none_outside_a_checkout_or_without_git(tmp_path, monkeypatch):
    prov.git_commit.cache_clear()
    try:
        monkeypatch.setattr(prov, "PACKAGE_ROOT", tmp_path)  # not a git checkout
        assert prov.git_commit() is None
        prov.git_commit.cache_clear()
        monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
        assert prov.git_commit() is None
    finally:
        prov.git_commit.cache_clear()
