"""The vector env: seeds per copy, same-step auto-reset, finished episodes."""

import numpy as np
import pytest

from glamrl.agents.bot import BotAgent
from glamrl.config import EnvConfig
from glamrl.envs import finished_episodes, make_env, make_vector_env


def test_batched_observations_and_distinct_seeds():
    envs = make_vector_env("BabyAI-MixedTrainLocal-v0", 3)
    obs, infos = envs.reset(seed=10)
    assert obs["image"].shape == (3, 7, 7, 3) and obs["direction"].shape == (3,)
    assert len(obs["mission"]) == 3 and all(isinstance(d, tuple) for d in obs["descriptions"])
    for i in range(3):
        single, info = make_env("BabyAI-MixedTrainLocal-v0").reset(seed=10 + i)
        assert obs["mission"][i] == single["mission"] and obs["descriptions"][i] == single["descriptions"]
        assert infos["task"][i] == info["task"]
    assert len(set(map(tuple, obs["image"].reshape(3, -1).tolist()))) == 3


def test_same_step_autoreset_and_finished_episodes():
    envs = make_vector_env("BabyAI-MixedTrainLocal-v0", 2, max_steps=30)
    bot = BotAgent(envs)
    obs, _ = envs.reset(seed=0)
    lengths = np.zeros(2, dtype=int)
    results = []
    while len(results) < 4:
        actions = bot.act(obs).actions
        actions[1] = 0  # env 1 only turns: it runs out of time after 30 steps
        obs, rewards, terminations, truncations, infos = envs.step(actions)
        lengths += 1
        done = terminations | truncations
        bot.end_episodes(done)
        for result in finished_episodes(infos):
            i = result.env_index
            assert done[i] and result.episode_length == lengths[i]
            assert result.success == (i == 0) and (result.episode_return > 0) == result.success
            assert result.task == infos["final_info"]["task"][i]
            # the returned observation is already the new episode's first one
            level = envs.envs[i].unwrapped
            assert level.step_count == 0 and obs["mission"][i] == level.mission
            lengths[i] = 0
            results.append(result)
        assert not finished_episodes(infos) or "final_obs" in infos
    assert {r.env_index for r in results} == {0, 1}
    assert all(r.episode_length == 30 for r in results if r.env_index == 1)


def test_no_finished_episodes_in_a_plain_step():
    assert finished_episodes({"task": np.array(["go_to"], dtype=object), "_task": np.array([True])}) == []


def test_from_config():
    cfg = EnvConfig(id="BabyAI-MixedTestLocal-v0", num_envs=2, task="open", language="fr")
    envs = cfg.make_vector_env()
    obs, infos = envs.reset(seed=cfg.seed)
    assert envs.num_envs == 2 and all(t == "open" for t in infos["task"])
    assert all(m.startswith("ouvrir la porte") for m in obs["mission"])


def test_bad_options_fail_before_building_copies():
    with pytest.raises(ValueError):
        make_vector_env("BabyAI-MixedTrainLocal-v0", 2, task="fly")
