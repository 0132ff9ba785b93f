import numpy as np
import pytest
import torch

from benchmarks.critic_ceiling import main


@pytest.mark.parametrize("args, message", [
    (["{tmp}/no_such_run"], "no_such_run is not a directory"),
    (["{tmp}", "--steps", "0"], "--steps 0"),
    (["{tmp}"], "is not a glamrl run directory"),   # a directory with no config.yaml
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


def test_the_report_on_a_tiny_run_prints_each_ceiling_and_probe(tmp_path, capsys, one_thread):
    from glamrl.config import load_train_config
    from glamrl.trainers.ppo import train_ppo

    run = tmp_path / "run"
    cfg = load_train_config(None, ["env.id=BabyAI-GoToObjS4-v0", "env.max_steps=3", "env.num_envs=2",
                                   "model.name=tiny-llama", "model.device=cpu", "ppo.total_frames=8",
                                   "ppo.num_steps=2", "ppo.minibatch_size=4", "ppo.epochs=1", "ppo.value_norm=true",
                                   "run.eval_episodes=0", "run.tensorboard=false"])
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    capsys.readouterr()
    assert main([str(run), "--steps", "12"]) == 0
    out = capsys.readouterr().out
    assert "24 frames" in out and out.count("ceiling of the best") == 2 and "head (squared correlation" in out
    for probe in ("the hidden state", "the step count alone", "both"):
        assert f"  {probe}" in out
