"""The text env wrapper and the factory: observation and info formats, options, errors."""

import numpy as np
import pytest
from minigrid.utils.baby_ai_bot import BabyAIBot

from glamrl.envs import UnknownEnvError, make_env
from glamrl.envs.actions import ACTION_NAMES, FRENCH_ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.envs.describe import describe


def test_observation_format_and_spaces():
    env = make_env("BabyAI-MixedTrainLocal-v0")
    obs, info = env.reset(seed=0)
    assert set(obs) == {"image", "direction", "mission", "descriptions", "step", "max_steps"}
    assert obs["step"] == 0 and obs["max_steps"] == env.unwrapped.max_steps > 0
    assert obs["image"].shape == (7, 7, 3) and obs["image"].dtype == np.uint8
    assert isinstance(obs["direction"], int) and isinstance(obs["mission"], str)
    assert isinstance(obs["descriptions"], tuple) and all(isinstance(s, str) for s in obs["descriptions"])
    assert obs["descriptions"] == tuple(describe(obs["image"]))
    assert env.observation_space.contains(obs)
    assert env.action_space.n == 6 and env.action_names == ACTION_NAMES
    assert info["task"] in ("go_to", "pick_up", "open", "put_next", "pick_up_seq_go_to")


def test_action_names_are_replaceable():
    env = make_env("BabyAI-GoToLocal-v0")
    env.action_names = SYNONYM_ACTION_NAMES
    assert env.action_names[2] == "move ahead"
    assert make_env("BabyAI-GoToLocal-v0", language="fr").action_names == FRENCH_ACTION_NAMES


def test_info_at_every_step_and_at_episode_end():
    env = make_env("BabyAI-MixedTrainLocal-v0", task="go_to", max_steps=5)
    _, info = env.reset(seed=3)
    assert info["task"] == "go_to"
    for step in range(1, 6):
        _, reward, terminated, truncated, info = env.step(0)  # turning never succeeds
        assert info["task"] == "go_to"
        assert ("success" in info) == (step == 5)
    assert truncated and not terminated and reward == 0
    assert info["success"] is False and info["episode_return"] == 0.0 and info["episode_length"] == 5


def test_success_reward_is_minigrids():
    env = make_env("BabyAI-MixedTrainLocal-v0")
    env.reset(seed=4)
    bot = BabyAIBot(env.unwrapped)
    terminated = truncated = False
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(bot.replan())
    assert terminated and info["success"] is True
    assert reward == pytest.approx(1 - 0.9 * info["episode_length"] / env.unwrapped.max_steps)
    assert info["episode_return"] == pytest.approx(reward)


def test_any_babyai_level_and_its_name_as_task():
    env = make_env("BabyAI-GoToLocal-v0")
    obs, info = env.reset(seed=1)
    assert info["task"] == "GoToLocal" and obs["mission"].startswith("go to")


def test_french_missions_and_descriptions():
    env = make_env("BabyAI-MixedTrainLocal-v0", language="fr")
    missions = set()
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        missions.add(obs["mission"])
        assert env.observation_space.contains(obs)
        assert all(s.startswith(("Tu vois", "Tu portes")) for s in obs["descriptions"])
    starts = ("aller à", "attraper", "ouvrir la porte", "mettre")
    assert all(m.startswith(starts) for m in missions), missions
    assert any(", puis " in m for m in missions) and any(" après avoir attrapé " in m for m in missions)


def test_faithful_wording_option():
    env = make_env("BabyAI-MixedTrainLocal-v0", language="fr", faithful=True)
    obs, _ = env.reset(seed=0)
    assert obs["descriptions"] == tuple(describe(obs["image"], language="fr", faithful=True))


def test_unknown_env_id_names_close_ones():
    with pytest.raises(UnknownEnvError, match="BabyAI-MixedTrainLocal-v0"):
        make_env("BabyAI-MixedTrainLocl-v0")
    with pytest.raises(ValueError):
        make_env("BabyAI-MixedTrainLocal-v0", language="de")


@pytest.mark.parametrize(("env_id", "task", "kinds"), [
    ("BabyAI-MixedTrainLocal-v0", None, ("go_to", "pick_up", "open", "put_next", "pick_up_seq_go_to")),
    ("BabyAI-Text-MixedTestLocal-v0", None, ("go_to", "pick_up", "open", "put_next", "pick_up_seq_go_to",
                                             "pick_up_seq_pick_up")),
    ("BabyAI-MixedTrainLocal-v0", "open", ("open",)),
    ("BabyAI-PickUpSeqGoToLocal-v0", None, ("pick_up_seq_go_to",)),
    ("BabyAI-GoToLocal-v0", None, ("GoToLocal",)),
])
def test_task_kinds_name_what_the_episodes_report(env_id, task, kinds):
    from glamrl.envs.factory import task_kinds

    assert task_kinds(env_id, task) == kinds
    env = make_env(env_id, task=task)
    reported = {env.reset(seed=seed)[1]["task"] for seed in range(30)}
    assert reported <= set(kinds) and (len(kinds) == 1) == (len(reported) == 1)
