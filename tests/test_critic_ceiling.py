import numpy as np
import pytest
import torch

from benchmarks.critic_ceiling import batched, main, play, replay, replay_statistics, restore_critic


@pytest.mark.parametrize("args, message", [
    (["{tmp}/no_such_run"], "no_such_run is not a directory"),
    (["{tmp}", "--steps", "0"], "--steps 0"),
    (["{tmp}"], "is not a glamrl run directory"),   # a directory with no config.yaml
    (["{tmp}", "--replay", "1"], "--replay 1 --rollouts 6"),
    (["{tmp}", "--replay", "8", "--rollouts", "1"], "at least 2 states, 2 rollouts"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("critic_ceiling: error: ") and message in err


def episodes_with_returns(n_episodes: int, frames: int, signal: float, seed: int = 0):
    """(hidden (n, 64), returns (n,), episode ids (n,)): each episode's return is signal x its first feature
    plus noise of its own; every frame of an episode shares the episode's features and return, up to small
    per-frame noise (an agent that repeats a prompt)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n_episodes, 64))                                   # (E, 64)
    returns = signal * features[:, 0] + rng.normal(size=n_episodes)                # (E,)
    ids = np.repeat(np.arange(n_episodes), frames)                                 # (n,)
    hidden = features[ids] + 0.01 * rng.normal(size=(len(ids), 64))
    return torch.tensor(hidden), returns[ids] + 0.01 * rng.normal(size=len(ids)), ids


def test_the_probe_scores_what_generalises_to_new_episodes_not_what_it_remembers():
    from benchmarks.critic_ceiling import ridge_probe

    # features that say nothing of the return: a probe fitted on frames of the test episodes would remember them
    hidden, returns, ids = episodes_with_returns(40, 30, signal=0.0)
    assert ridge_probe(hidden, returns, ids, penalty=10) < 0.05
    # features that carry it: the true share of the variance, 1 / (1 + 1) = 0.5, on episodes never fitted (less
    # what 64 features fitted on 1,000 episodes lose to noise, about 64 / 1000 of the rest)
    hidden, returns, ids = episodes_with_returns(2000, 2, signal=1.0)
    assert 0.4 < ridge_probe(hidden, returns, ids, penalty=10) < 0.55


def tiny_run(directory):
    """A tiny random llama trained for 8 frames on GoToObjS4 with 3-step episodes, value normalisation on."""
    from glamrl.config import load_train_config
    from glamrl.trainers.ppo import train_ppo

    cfg = load_train_config(None, ["env.id=BabyAI-GoToObjS4-v0", "env.max_steps=3", "env.num_envs=2",
                                   "model.name=tiny-llama", "model.device=cpu", "ppo.total_frames=8",
                                   "ppo.num_steps=2", "ppo.minibatch_size=4", "ppo.epochs=1", "ppo.value_norm=true",
                                   "run.eval_episodes=0", "run.tensorboard=false"])
    train_ppo(cfg, directory, progress=False, say=lambda _: None)
    return cfg


def test_the_report_on_a_tiny_run_prints_each_ceiling_and_probe(tmp_path, capsys, one_thread):
    run = tmp_path / "run"
    tiny_run(run)
    capsys.readouterr()
    assert main([str(run), "--steps", "12"]) == 0
    out = capsys.readouterr().out
    assert "24 frames" in out and out.count("ceiling of the best") == 2 and "head (squared correlation" in out
    for probe in ("the hidden state", "the step count alone", "both"):
        assert f"  {probe}" in out


def test_replay_statistics_recover_a_known_ceiling_and_critic():
    """States with means m ~ N(0, 1) and returns m + N(0, 1): the best V(state) explains 0.5 of the returns'
    variance; V = m reaches it (share 1), V = m / 2 explains 1 - (1/4 + 1) / 2 = 0.375 though it ranks the states
    as well (squared correlation 0.5), V = 0 nothing."""
    rng = np.random.default_rng(0)
    means = rng.normal(size=3000)                                       # (S,)
    returns = means[:, None] + rng.normal(size=(3000, 4))              # (S, K)
    for values, explained, share, correlation in ((means, 0.5, 1.0, 0.5), (means / 2, 0.375, 0.75, 0.5),
                                                  (np.zeros(3000), 0.0, 0.0, None)):
        stats = replay_statistics(returns, values, reps=200)
        for name, truth in (("ceiling", 0.5), ("explained", explained), ("share", share), ("correlation", correlation)):
            estimate, low, high = stats[name]
            if truth is None:  # a constant critic has no correlation
                assert np.isnan(estimate)
                continue
            assert low <= truth <= high and abs(estimate - truth) < 0.04, (name, stats[name])
    two = replay_statistics(returns[:, :2], means, reps=200)["ceiling"]  # two rollouts a state are enough
    assert abs(two[0] - 0.5) < 0.05 and two[1] <= 0.5 <= two[2]


def test_replay_on_a_tiny_run_replays_the_policys_own_states(tmp_path, capsys, one_thread):
    run = tmp_path / "run"
    cfg = tiny_run(run)
    r = replay(run, states=4, rollouts=3, episodes=3, seed=777)  # raises if a replay missed its recorded prompt
    assert r.returns.shape == (4, 3) and r.values.shape == (4,) and np.isfinite(r.values).all()
    assert r.episodes == 3 and 3 <= r.frames <= 9 and 0 <= r.successes <= 3   # episodes of 1-3 steps
    # each return is one discounted reward of at most ppo.reward_scale, or nothing (a time-out ends the return)
    assert ((r.returns >= 0) & (r.returns <= cfg.ppo.reward_scale)).all()
    capsys.readouterr()
    assert main([str(run), "--replay", "4", "--rollouts", "3", "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "4 states drawn from the" in out and "3 rollouts from each" in out
    assert "ceiling of the best V(state)" in out and "head: explained variance" in out
    assert main([str(run), "--replay", "40", "--rollouts", "2", "--episodes", "2"]) == 2  # 40 of at most 6 frames
    assert "give more --episodes" in capsys.readouterr().err


def test_play_bootstraps_a_time_out_from_v_of_its_last_observation(tmp_path, one_thread):
    """With ppo.bootstrap_truncation an episode cut by the time limit returns gamma^n V(last observation), in the
    returns' units, where without it it returns nothing; the same draws, so the same episodes, in both."""
    import dataclasses

    from glamrl.agents.factory import make_agent

    run = tmp_path / "run"
    tiny_run(run)
    cfg, policy, real = restore_critic(run)
    vector = cfg.env.make_vector_env()
    envs = list(vector.envs)

    def played(bootstrap: bool):
        ppo = dataclasses.replace(cfg.ppo, bootstrap_truncation=bootstrap)
        agent = make_agent(dataclasses.replace(cfg, ppo=ppo), policy, vector)
        obs = [env.reset(seed=50 + i)[0] for i, env in enumerate(envs)]
        torch.manual_seed(0)
        actions, _, returns, _, success = play(dataclasses.replace(cfg, ppo=ppo), agent, envs, obs, real)
        return agent, obs, actions, returns, success

    _, _, actions, plain, success = played(False)
    agent, last, same_actions, booted, _ = played(True)
    assert same_actions == actions
    timed_out = [i for i in range(len(envs)) if not success[i] and len(actions[i]) == cfg.env.max_steps]
    assert timed_out, "no episode timed out: pick other seeds"
    for i in range(len(envs)):
        if i in timed_out:  # the agent's history stands at the episode's end: V reads it as training would
            v = real(agent.values(batched([last[i]]), [i])).item()
            assert plain[i] == 0 and booted[i] == pytest.approx(cfg.ppo.gamma ** cfg.env.max_steps * v, rel=1e-5)
            assert v != 0
        else:
            assert booted[i] == plain[i]
    vector.close()
