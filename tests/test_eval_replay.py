"""Evaluation replays: episode k of an evaluation plays from the seed's `eval_seed` + k, whatever the command
(eval, eval --tests, the training evaluation), num_envs or a suite test's place; a run's env settings are the
default ones of `eval --run` and `play --run`; flags that cannot apply are refused."""

import dataclasses
import json

import pytest
import torch

from glamrl.agents.bot import BotAgent
from glamrl.agents.factory import make_agent, make_model
from glamrl.cli import main
from glamrl.config import AgentConfig, EnvConfig, load_train_config
from glamrl.envs import make_vector_env
from glamrl.eval.suite import TESTS, run_suite
from glamrl.rollout import run_episodes
from glamrl.seeds import eval_seed
from glamrl.trainers.common import evaluate_policy

pytestmark = pytest.mark.usefixtures("one_thread")

LEVEL = "BabyAI-GoToObjS4-v0"
STATS = ("episodes", "success_rate", "mean_return", "mean_length", "per_task")
"""What two evaluations of the same episodes agree on."""


def eval_json(tmp_path, *args) -> dict:
    out = tmp_path / f"eval{len(list(tmp_path.glob('eval*.json')))}.json"
    assert main(["eval", *args, "--out", str(out)]) == 0
    return json.loads(out.read_text())


def stats(summary: dict) -> dict:
    return {k: summary[k] for k in STATS}


def played(results) -> list[tuple]:
    return [(r.success, r.episode_return, r.episode_length, r.task) for r in results]


def test_episode_k_is_played_from_seed_plus_k_in_index_order():
    batched = make_vector_env("BabyAI-MixedTrainLocal-v0", 4)
    results = run_episodes(batched, BotAgent(batched), 7, seed=100)
    single = make_vector_env("BabyAI-MixedTrainLocal-v0", 1)
    alone = [run_episodes(single, BotAgent(single), 1, seed=100 + k)[0] for k in range(7)]
    assert played(results) == played(alone)


@pytest.mark.parametrize("agent", ["random", "bot"])
def test_eval_does_not_depend_on_num_envs(tmp_path, agent):
    runs = [eval_json(tmp_path, "--agent", agent, "--env", LEVEL, "--episodes", "10", "--num-envs", str(n))
            for n in (1, 4, 10)]
    assert [stats(r) for r in runs[1:]] == [stats(runs[0])] * 2
    assert [r["num_envs"] for r in runs] == [1, 4, 10]


def test_eval_the_suite_and_training_evaluate_the_same_episodes(tmp_path):
    plain = eval_json(tmp_path, "--agent", "bot", "--env", LEVEL, "--episodes", "10", "--seed", "3")
    suite = eval_json(tmp_path, "--agent", "bot", "--env", LEVEL, "--tests", "no_change", "--episodes", "10",
                      "--seed", "3")
    assert plain["eval_seed"] == suite["eval_seed"] == eval_seed(3, "spread") and plain["num_envs"] == suite["num_envs"] == 4
    assert stats(plain) == stats(suite["tests"]["no_change"])
    cfg = load_train_config(None, [f"env.id={LEVEL}", "env.seed=3", "env.num_envs=3", "run.eval_episodes=10"])
    trained = evaluate_policy(dataclasses.replace(cfg, agent=AgentConfig(kind="bot")), None)
    assert stats(trained) == stats(plain)


def test_a_suite_test_does_not_depend_on_its_place():
    cfg = load_train_config(None, ["agent.kind=symbolic"])
    model = make_model(cfg)  # untrained: it samples from nearly uniform probabilities, with the global torch RNG

    def build(envs, test):
        return make_agent(cfg, model, envs, action_names=test.action_names(cfg.prompt.actions))

    first = dataclasses.replace(TESTS["no_change"], env_id=LEVEL)
    again = dataclasses.replace(first, name="again")
    both = run_suite([first, again], build, episodes=10, seed=1_000_001, num_envs=2)
    alone = run_suite([again], build, episodes=10, seed=1_000_001, num_envs=2)
    assert stats(both["again"]) == stats(both["no_change"]) == stats(alone["again"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny llm run on LEVEL with a 3-step limit."""
    from glamrl.trainers.ppo import train_ppo

    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("replay") / "run"
    cfg = load_train_config(None, [f"env.id={LEVEL}", "env.max_steps=3", "env.num_envs=2", "model.name=tiny-llama",
                                   "model.device=cpu", "ppo.total_frames=8", "ppo.num_steps=2",
                                   "ppo.minibatch_size=4", "ppo.epochs=1", "run.eval_episodes=0",
                                   "run.tensorboard=false"])
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    return run


def test_eval_and_play_of_a_run_default_to_its_level_limit_and_env_count(run, tmp_path, capsys):
    data = eval_json(tmp_path, "--run", str(run), "--episodes", "4")
    assert data["env"] == LEVEL and data["max_steps"] == 3 and data["mean_length"] <= 3
    assert data["num_envs"] == data["provenance"]["num_envs"] == 2  # the run's env.num_envs, not EnvConfig's 4
    suite = eval_json(tmp_path, "--run", str(run), "--tests", "no_change,french", "--episodes", "2")
    assert suite["num_envs"] == suite["provenance"]["num_envs"] == 2
    assert eval_json(tmp_path, "--agent", "random", "--episodes", "2")["num_envs"] == EnvConfig.num_envs
    assert eval_json(tmp_path, "--run", str(run), "--episodes", "2", "--num-envs", "3")["num_envs"] == 3
    for name, language in [("no_change", "en"), ("french", "fr")]:
        test = suite["tests"][name]
        assert test["env"] == LEVEL and test["max_steps"] == 3 and test["mean_length"] <= 3
        assert test["language"] == language and test["overrides"] == ({} if language == "en" else {"language": "fr"})
    capsys.readouterr()
    assert main(["play", "--run", str(run), "--out", str(tmp_path / "episode.gif")]) == 0
    assert LEVEL in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--run", "{run}", "--model", "tiny-t5"], "--model"),
    (["--run", "{run}", "--dtype", "bfloat16"], "--dtype"),
    (["--agent", "bot", "--tests", "no_change", "--language", "fr"], "--language"),
    (["--agent", "bot", "--suite", "paper", "--task", "go_to"], "--task"),
    (["--agent", "bot", "--model", "tiny-t5"], "--model"),
])
def test_flags_that_cannot_apply_are_refused_in_one_line(run, capsys, args, message):
    code = main(["eval", *[a.replace("{run}", str(run)) for a in args], "--episodes", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
