import re

import numpy as np
import pytest

from benchmarks.bot_agreement import SITUATIONS, agreement, main, situation
from glamrl.envs import make_env


@pytest.mark.parametrize("args, message", [
    (["{tmp}/no_such_run"], "is not a glamrl run directory"),
    (["{tmp}", "--episodes", "0"], "--episodes 0"),
    (["{tmp}", "--num-envs", "0"], "--num-envs 0"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("bot_agreement: error: ") and message in err


@pytest.mark.parametrize("agent_pos, agent_dir, expected", [
    ((2, 4), 0, "goal straight ahead"),      # facing east, the goal two cells east
    ((2, 3), 0, "goal ahead to one side"),   # two cells east, one to the right (south)
    ((4, 3), 0, "goal on the right"),        # level with the agent, south of it
    ((4, 5), 0, "goal on the left"),         # north of it
    ((5, 4), 1, "goal on the right"),        # facing south, the goal west of it
    ((4, 6), 3, "goal straight ahead"),      # facing north, two cells up
    ((6, 4), 0, "goal out of view"),         # behind it
])
def test_the_situation_is_where_the_goal_object_is_for_the_agent(agent_pos, agent_dir, expected):
    env = make_env("BabyAI-GoToObj-v0")
    env.reset(seed=0)
    u = env.unwrapped
    assert u.instrs.desc.obj_poss == [(4, 4)]  # seed 0: go to the green key, at (4, 4) of the 8x8 room
    u.agent_pos, u.agent_dir = np.array(agent_pos), agent_dir
    assert situation(env, u.gen_obs()["image"]) == expected


def test_a_mission_of_two_objects_has_no_single_goal():
    env = make_env("BabyAI-PutNextLocal-v0")
    obs, _ = env.reset(seed=0)
    assert situation(env, obs["image"]) == "no single goal object"


def test_agreement_counts_each_situation_and_all_frames():
    situations = ["goal on the left", "goal straight ahead", "goal straight ahead"]
    bot = np.array([0, 2, 2])
    probs = np.array([[0.6, 0.1, 0.3],    # argmax the bot's turn
                      [0.5, 0.0, 0.5],    # argmax turn left (the first of a tie), the bot goes forward
                      [0.1, 0.1, 0.8]])
    rows = {r["situation"]: r for r in agreement(situations, bot, probs)}
    assert list(rows) == ["goal straight ahead", "goal on the left", "all"]  # SITUATIONS' order, then all
    ahead = rows["goal straight ahead"]
    assert ahead["frames"] == 2 and ahead["argmax_is_bot"] == 0.5 and ahead["p_bot"] == pytest.approx(0.65)
    np.testing.assert_allclose(ahead["bot"], [0, 0, 1])
    np.testing.assert_allclose(ahead["policy"], [0.3, 0.05, 0.65])
    everything = rows["all"]
    assert everything["frames"] == 3 and everything["argmax_is_bot"] == pytest.approx(2 / 3)
    assert everything["p_bot"] == pytest.approx((0.6 + 0.5 + 0.8) / 3)


def test_the_report_on_a_tiny_run_scores_every_decision_of_the_bot(tmp_path, capsys, one_thread):
    from glamrl.config import load_train_config
    from glamrl.trainers.ppo import train_ppo

    run = tmp_path / "run"
    cfg = load_train_config(None, ["env.id=BabyAI-GoToLocalS6N3-v0", "env.num_envs=2", "model.name=tiny-llama",
                                   "model.device=cpu", "ppo.total_frames=8", "ppo.num_steps=4",
                                   "ppo.minibatch_size=4", "ppo.epochs=1", "run.eval_episodes=0",
                                   "run.tensorboard=false"])
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    capsys.readouterr()
    for start in ([], ["--start"]):
        assert main([str(run), "--episodes", "6", *start]) == 0
        out = capsys.readouterr().out
        decisions = int(re.search(r"(\d+) decisions of the bot in 6 episodes", out).group(1))
        rows = {line[:24].strip(): line[24:].split() for line in out.splitlines()[3:]}
        assert set(rows) <= {*SITUATIONS, "all"} and "all" in rows
        assert sum(int(r[0]) for name, r in rows.items() if name != "all") == int(rows["all"][0]) == decisions
        bot_shares = [float(cell.split("/")[1]) for cell in rows["all"][1:7]]
        assert sum(bot_shares) == pytest.approx(1, abs=0.03)  # two decimals each
        assert ("before training" in out) == bool(start)
