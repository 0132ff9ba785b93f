"""How a seed becomes its episodes (env.seeding): under spread two seeds share no episode, in training or in
evaluation; offset is glamrl's first scheme, which runs saved before env.seeding keep, in training, evaluation
and experiments."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glamrl.cli import main
from glamrl.config import ConfigError, EnvConfig, load_train_config
from glamrl.envs import make_env
from glamrl.experiment import is_finished, load_experiment, mismatch
from glamrl.run.checkpoint import seed_everything
from glamrl.run.dir import RunDir
from glamrl.seeds import eval_seed, train_seed
from glamrl.trainers.ppo import train_ppo

pytestmark = pytest.mark.usefixtures("one_thread")

LEVEL = "BabyAI-GoToLocalS6N3-v0"
ENVS, EPISODES = 16, 32


def episode(seed: int) -> tuple:
    """What an episode is: its mission, the whole grid and where the agent starts, facing which way."""
    env = make_env(LEVEL).unwrapped
    obs, _ = env.reset(seed=seed)
    return obs["mission"], env.grid.encode().tobytes(), tuple(env.agent_pos), env.agent_dir


def episodes(env: EnvConfig) -> tuple[set, set]:
    """The first episode of each of the run's training envs, and its evaluation episodes."""
    return ({episode(env.train_seed + i) for i in range(ENVS)},
            {episode(env.eval_seed + k) for k in range(EPISODES)})


def test_spread_seeds_share_no_episode_and_offset_seeds_share_all_but_one():
    for seeding, shared in (("spread", 0), ("offset", ENVS - 1)):
        train_1, eval_1 = episodes(EnvConfig(id=LEVEL, seed=1, seeding=seeding))
        train_2, eval_2 = episodes(EnvConfig(id=LEVEL, seed=2, seeding=seeding))
        assert len(train_1) == len(train_2) == ENVS and len(eval_1) == len(eval_2) == EPISODES  # all distinct
        assert len(train_1 & train_2) == shared
        assert len(eval_1 & eval_2) == (0 if seeding == "spread" else EPISODES - 1)
        assert not (train_1 | train_2) & (eval_1 | eval_2)  # training never plays an evaluation episode


def test_spread_keeps_every_seeds_streams_apart():
    """Seeds 0..99, each with a million training seeds (its resets: resumes, DRRN's rows, ranks) and a million
    evaluation episodes: no two ranges overlap."""
    ranges = sorted((start, start + 10**6) for seed in range(100)
                    for start in (train_seed(seed, "spread"), eval_seed(seed, "spread")))
    assert all(end <= next_start for (_, end), (next_start, _) in zip(ranges, ranges[1:]))
    assert (train_seed(7, "offset"), eval_seed(7, "offset")) == (7, 1_000_007)  # the first scheme, unchanged


def test_the_global_rngs_take_a_spread_evaluation_seed():
    draws = []
    for seed in (eval_seed(1, "spread"), eval_seed(2, "spread"), eval_seed(1, "spread")):
        seed_everything(seed)
        draws.append(np.random.random())
    assert draws[0] == draws[2] != draws[1]


@pytest.fixture(scope="module")
def legacy_run(tmp_path_factory):
    """A tiny run whose config.yaml is as glamrl wrote it before env.seeding existed (no such key)."""
    directory = tmp_path_factory.mktemp("legacy") / "run"
    overrides = [f"env.id={LEVEL}", "env.num_envs=2", "env.seed=3", "env.seeding=offset", "model.name=tiny-llama",
                 "model.device=cpu", "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1",
                 "ppo.total_frames=8", "run.tensorboard=false", "run.eval_episodes=2", "prompt.nbr_obs=1"]
    train_ppo(load_train_config(None, overrides), directory, progress=False, say=lambda _: None)
    config = RunDir(directory).config
    kept = [line for line in config.read_text().splitlines() if not line.strip().startswith("seeding:")]
    config.write_text("\n".join(kept) + "\n")
    return directory


def test_a_run_saved_before_seeding_reads_resumes_and_evaluates_as_offset(legacy_run, tmp_path):
    assert RunDir(legacy_run).read_config().env.seeding == "offset"
    before = json.loads((legacy_run / "eval_before.json").read_text())
    assert before["provenance"]["episode_seeds"]["first"] == eval_seed(3, "offset")

    out = tmp_path / "eval.json"
    assert main(["eval", "--run", str(legacy_run), "--seed", "3", "--episodes", "2", "--num-envs", "2",
                 "--device", "cpu", "--out", str(out)]) == 0  # --seeding: the run's
    assert json.loads(out.read_text())["eval_seed"] == eval_seed(3, "offset")
    assert main(["eval", "--run", str(legacy_run), "--seed", "3", "--seeding", "spread", "--episodes", "2",
                 "--num-envs", "2", "--device", "cpu", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["eval_seed"] == eval_seed(3, "spread")

    assert main(["train", "--run-dir", str(legacy_run), "--no-progress", "ppo.total_frames=16"]) == 0  # resumed
    assert RunDir(legacy_run).read_log()[-1]["frames"] == 16
    assert "seeding: offset" in RunDir(legacy_run).config.read_text()  # written back as what it ran


def test_a_fresh_agent_plays_spread_episodes_unless_told(tmp_path):
    for flags, first in (([], eval_seed(4, "spread")), (["--seeding", "offset"], eval_seed(4, "offset"))):
        out = tmp_path / "eval.json"
        assert main(["eval", "--agent", "bot", "--env", LEVEL, "--seed", "4", "--episodes", "2", *flags,
                     "--out", str(out)]) == 0
        data = json.loads(out.read_text())
        assert (data["eval_seed"], data["provenance"]["episode_seeds"]["first"]) == (first, first)


def test_the_kept_ablation_runs_stay_this_experiments_runs():
    """configs/experiments/cpu_goto_local_s6n3.yaml names seeding: offset, so that the runs kept in results/
    (trained before env.seeding) are its finished runs; under spread they would be another experiment's."""
    experiment = load_experiment(Path("configs/experiments/cpu_goto_local_s6n3.yaml"))
    kept = [(spec, seed) for spec, seed in experiment.tasks
            if (experiment.out / f"{spec.name}-seed{seed}").is_dir()]
    assert {spec.name for spec, _ in kept} >= {"base", "random", "bot", "bc-ppo"}
    for spec, seed in kept:
        assert mismatch(experiment, spec, seed) is None, spec.name
        assert is_finished(experiment, spec, seed) or spec.clone is not None, spec.name  # a clone: demos not kept
    spread = dataclasses.replace(experiment, seeding="spread")
    for spec, seed in kept:
        assert mismatch(spread, spec, seed) is not None and "seeding" in mismatch(spread, spec, seed), spec.name


def test_bad_seedings_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="env.seeding must be one of spread, offset, got 'stride'"):
        load_train_config(None, ["env.seeding=stride"])
    exp = tmp_path / "exp.yaml"
    exp.write_text("out: x\nseeding: stride\nruns:\n  random:\n    agent: random\n")
    with pytest.raises(ConfigError, match="seeding must be one of spread, offset, got 'stride'"):
        load_experiment(exp)
    done = subprocess.run([sys.executable, "-m", "glamrl.cli", "eval", "--agent", "bot", "--seeding", "stride"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "invalid choice: 'stride'" in done.stderr
