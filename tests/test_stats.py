import math
import random
import statistics
from collections import Counter

import numpy as np
import pytest

from glamrl.stats import (METRICS, explainable_variance, interval_over_episodes, interval_over_seeds, iqm,
                          one_frame_per_visit)


def test_explainable_variance_by_hand():
    # within-key sums of squares 2 + 2 over 2 degrees of freedom; total variance 104 / 3
    assert explainable_variance("aabb", [0.0, 2.0, 10.0, 12.0]) == pytest.approx(1 - 2 / (104 / 3))
    assert explainable_variance("aabbc", [1.0, 1.0, 5.0, 5.0, 3.0]) == 1.0   # a function of the key
    assert math.isnan(explainable_variance("abc", [1.0, 2.0, 3.0]))         # no key repeats
    assert math.isnan(explainable_variance("aa", [4.0, 4.0]))               # nothing to explain
    # two repeats (n 4 - k 2): an estimate from 2 or more, nan from fewer
    assert explainable_variance("aabb", [0.0, 2.0, 10.0, 12.0], min_repeats=2) == pytest.approx(1 - 2 / (104 / 3))
    assert math.isnan(explainable_variance("aabb", [0.0, 2.0, 10.0, 12.0], min_repeats=3))


def test_explainable_variance_keeps_one_frame_per_key_and_episode_by_hand():
    # "a" twice in episode 0 (equal returns, so either draw gives the same answer), once in episode 1
    keys, episodes, values = "aaabb", [0, 0, 1, 0, 1], [1.0, 1.0, 3.0, 10.0, 14.0]
    # kept: a {1, 3}, b {10, 14}: within 2 + 8 over 2 dof; total variance 110 / 3
    assert explainable_variance(keys, values, episodes) == pytest.approx(1 - 5 / (110 / 3))
    # every frame: a {1, 1, 3} (sum of squares 8 / 3), b {10, 14} (8) over 3 dof; total variance 138.8 / 4
    assert explainable_variance(keys, values) == pytest.approx(1 - (32 / 9) / (138.8 / 4))


def test_one_frame_per_visit_draws_among_the_repeats():
    keys, episodes = ["a"] * 4 + ["b"] + ["a"], [0, 0, 0, 0, 0, 1]
    kept = one_frame_per_visit(keys, episodes, seed=0)
    assert len(kept) == 3 and kept[1:] == [4, 5]                  # (a, 0), (b, 0), (a, 1) in first-seen order
    assert kept == one_frame_per_visit(keys, episodes, seed=0)    # the seed fixes the draw
    assert {one_frame_per_visit(keys, episodes, seed=s)[0] for s in range(20)} == {0, 1, 2, 3}  # not the first
    # a key that occurs once per episode, like (prompt, step count), keeps every frame
    assert one_frame_per_visit([("p", 0), ("p", 1), ("p", 0)], [0, 0, 1]) == [0, 1, 2]


def test_explainable_variance_corrects_the_overfit_of_in_sample_group_means():
    # y = key's mean (variance 1 across keys) + noise of variance 3: the true share is 1 / 4, while the
    # in-sample group means with 3 draws per key would "explain" 1/4 + (3/4) * (1/3) = 1/2
    rng = random.Random(0)
    means = {k: rng.gauss(0, 1) for k in range(2000)}
    keys = [k for k in means for _ in range(3)]
    values = [means[k] + rng.gauss(0, math.sqrt(3)) for k in keys]
    assert explainable_variance(keys, values) == pytest.approx(0.25, abs=0.04)


def in_sample_r2(keys, values):
    groups = {}
    for k, v in zip(keys, values):
        groups.setdefault(k, []).append(v)
    within = sum(sum((v - statistics.fmean(g)) ** 2 for v in g) for g in groups.values())
    return 1 - within / (statistics.pvariance(values) * len(values))


def test_explainable_variance_on_rare_keys_seen_once_or_twice():
    # frames drawn independently from 3,000 keys with Zipf-like frequencies: in 6,000 frames most keys are seen
    # once or twice. The truth is frame-weighted: Var(E[y | key]) / Var(y) over the key distribution.
    rng = random.Random(1)
    weights = [1 / (k + 10) for k in range(3000)]
    p = [w / sum(weights) for w in weights]
    means = [rng.gauss(0, 1) for _ in p]
    centre = sum(pk * m for pk, m in zip(p, means))
    between = sum(pk * (m - centre) ** 2 for pk, m in zip(p, means))
    truth = between / (between + 2.0)                                               # noise variance 2
    keys = rng.choices(range(len(p)), weights=p, k=6000)
    values = [means[k] + rng.gauss(0, math.sqrt(2)) for k in keys]
    seen = Counter(keys)
    assert sum(n == 1 for n in seen.values()) > len(seen) / 3                      # singletons abound
    assert in_sample_r2(keys, values) > truth + 0.15                               # the in-sample fit: 0.510
    assert explainable_variance(keys, values) == pytest.approx(truth, abs=0.04)  # seed 1: 0.317, truth 0.318


def episodes_with_repeats(seed: int, n_keys: int = 1000, n_episodes: int = 2000):
    """Frames of episodes that each visit 3 prompts and stay on each for 1 + Geometric(0.4) steps (bumping into a
    wall). A frame's return is its prompt's mean (variance ~1 across prompts) + its episode's outcome (variance
    3, shared by all its frames) + noise (variance 0.09). The repeats do not depend on the prompt, so the truth
    is the prompts' variance over the total."""
    rng = random.Random(seed)
    means = [rng.gauss(0, 1) for _ in range(n_keys)]
    keys, values, episodes = [], [], []
    for episode in range(n_episodes):
        outcome = rng.gauss(0, math.sqrt(3))
        for key in rng.sample(range(n_keys), 3):
            repeats = 1
            while rng.random() < 0.6:
                repeats += 1
            for _ in range(repeats):
                keys.append(key)
                episodes.append(episode)
                values.append(means[key] + outcome + rng.gauss(0, 0.3))
    between = statistics.pvariance(means)
    return keys, values, episodes, between / (between + 3 + 0.09)


def test_repeats_within_an_episode_do_not_inflate_the_ceiling():
    keys, values, episodes, truth = episodes_with_repeats(seed=0)  # 14,934 frames, 6,000 (prompt, episode) pairs
    # seed 0: truth 0.238, every frame 0.378, one frame per (prompt, episode) 0.252
    naive = explainable_variance(keys, values)            # every frame: repeats pair up nearly equal returns
    fixed = explainable_variance(keys, values, episodes)  # one frame per (prompt, episode)
    assert naive > truth + 0.08
    assert fixed == pytest.approx(truth, abs=0.04)


# -------------------------------------------------------------------------------- over seeds (rliable)
SUCCESS, LENGTH = METRICS["success"], METRICS["length"]


def rliable_interval(scores, func, task_bootstrap, reps, seed):
    """rliable called as its README does, numpy's global RNG seeded first (its bootstrap draws from it)."""
    from rliable import library

    np.random.seed(seed)
    points, intervals = library.get_interval_estimates({"x": scores}, func, task_bootstrap=task_bootstrap, reps=reps)
    return points["x"][0], tuple(intervals["x"][:, 0])


@pytest.mark.parametrize("aggregate", ["iqm", "mean"])
def test_interval_over_seeds_is_rliables(aggregate):
    from rliable import metrics

    values = [0.1, 0.35, 0.4, 0.8, 0.9]
    func = {"iqm": metrics.aggregate_iqm, "mean": metrics.aggregate_mean}[aggregate]
    point, (low, high) = rliable_interval(np.array(values)[:, None], lambda x: np.array([func(x)]), False, 500, 7)
    ours = interval_over_seeds(values, SUCCESS, aggregate, reps=500, seed=7)
    assert (ours.point, ours.low, ours.high) == pytest.approx((point, low, high), rel=1e-12)
    assert ours.basis == "seeds"


@pytest.mark.parametrize("aggregate", ["iqm", "mean"])
def test_interval_over_episodes_is_rliables_two_level_bootstrap(aggregate):
    from rliable import metrics

    outcomes = (np.random.default_rng(0).random((30, 5)) < [0.2, 0.3, 0.5, 0.6, 0.9]).astype(float)  # (episodes, seeds)
    func = {"iqm": metrics.aggregate_iqm, "mean": metrics.aggregate_mean}[aggregate]
    point, (low, high) = rliable_interval(outcomes, lambda x: np.array([func(x.mean(axis=0)[:, None])]), True,
                                          500, 3)
    ours = interval_over_episodes(outcomes, SUCCESS, aggregate, reps=500, seed=3)
    assert (ours.point, ours.low, ours.high) == pytest.approx((point, low, high), rel=1e-12)
    assert ours.basis == "seeds and episodes" and (ours.seeds, ours.episodes) == (5, 30)


def test_fast_iqm_is_rliables():
    from rliable import metrics

    rng = np.random.default_rng(1)
    for shape in [(1, 1), (2, 1), (3, 1), (4, 1), (7, 1), (5, 3), (12, 1)]:
        scores = rng.random(shape)
        assert iqm(scores) == pytest.approx(metrics.aggregate_iqm(scores), rel=1e-12)


def test_iqm_over_seeds_by_hand():
    # four seeds of four episodes: per-seed success 0, 0.25, 0.5, 1; the IQM drops the lowest and highest seed
    outcomes = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=float).T
    assert interval_over_episodes(outcomes, SUCCESS, "iqm").point == pytest.approx((0.25 + 0.5) / 2)
    assert interval_over_episodes(outcomes, SUCCESS, "mean").point == pytest.approx(1.75 / 4)
    # of fewer than 4 seeds the IQM trims none: it is their mean
    assert interval_over_seeds([0.31, 0.72], SUCCESS, "iqm").point == pytest.approx(0.515)
    # over seeds, not over pooled episodes: 0/1 outcomes at 0.8 would have a pooled IQM of 1
    every_seed_at_08 = np.array([[1, 1, 1, 1, 0]] * 3, dtype=float).T
    assert interval_over_episodes(every_seed_at_08, SUCCESS, "iqm").point == pytest.approx(0.8)


def test_one_seed_mean_and_interval_over_its_episodes_by_hand():
    # 3 successes in 4 episodes; a resample's mean is Binomial(4, 0.75) / 4: P(<= 0.25) = 13/256 > 2.5% > P(0),
    # P(1) = 81/256 > 2.5%, so the percentile interval is [0.25, 1] (with thousands of resamples)
    found = interval_over_episodes(np.array([[1.0], [1.0], [1.0], [0.0]]), SUCCESS, "mean")
    assert (found.point, found.low, found.high) == pytest.approx((0.75, 0.25, 1.0))
    assert found.basis == "episodes" and found.format(".2f") == "0.75 [0.25, 1.00]"
    # a single value has nothing to resample
    alone = interval_over_seeds([0.31], SUCCESS)
    assert alone.basis == "none" and math.isnan(alone.low) and alone.format(".2f") == "0.31"


def test_the_bootstrap_is_seeded_and_leaves_numpys_rng_alone():
    outcomes = (np.random.default_rng(2).random((40, 3)) < 0.5).astype(float)
    np.random.seed(11)
    before = np.random.get_state()[1].copy()
    first = interval_over_episodes(outcomes, SUCCESS, seed=5)
    assert (np.random.get_state()[1] == before).all()
    assert interval_over_episodes(outcomes, SUCCESS, seed=5) == first
    assert interval_over_episodes(outcomes, SUCCESS, seed=6) != first


@pytest.mark.parametrize("aggregate", ["iqm", "mean"])
def test_intervals_never_leave_the_metrics_range(aggregate):
    rng = np.random.default_rng(3)
    for seeds in (1, 2, 3, 5):
        for p in (0.0, 0.02, 0.5, 0.98, 1.0):
            outcomes = (rng.random((20, seeds)) < p).astype(float)
            found = interval_over_episodes(outcomes, SUCCESS, aggregate, reps=200)
            assert 0.0 <= found.low <= found.point <= found.high <= 1.0
        lengths = rng.choice([0.0, 1.0, 64.0], size=(20, seeds))
        found = interval_over_episodes(lengths, LENGTH, aggregate, reps=200)
        assert 0.0 <= found.low <= found.high
    # two seeds at 0.31 and 0.72, where mean +- 1.96 SE read [0.12, 0.92]: the bootstrap stays between them
    spread = interval_over_seeds([0.31, 0.72], SUCCESS, aggregate)
    assert (spread.low, spread.high) == pytest.approx((0.31, 0.72))
    assert interval_over_seeds([0.02, 0.0], METRICS["return"], aggregate).low >= 0.0
