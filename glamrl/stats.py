"""95% confidence intervals for a success rate (Wilson) and a mean return (normal approximation); the IQM or
mean over seeds with rliable's stratified-bootstrap intervals (Agarwal et al., NeurIPS 2021); the share of a
variance that a function of a key can explain (the ceiling of a critic that reads only that key)."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

Z95 = 1.959964  # two-sided 95% quantile of the standard normal


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (stays inside [0, 1], sane at 0 and n)."""
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """Mean ± z * standard error (sample std, n - 1); a single value gives a zero-width interval."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan)
    mean = sum(values) / n
    if n == 1:
        return (mean, mean)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = z * std / math.sqrt(n)
    return (mean - half, mean + half)


def one_frame_per_visit(keys: Sequence[Hashable], episodes: Sequence[Hashable], seed: int = 0) -> list[int]:
    """Indices of one frame per (key, episode) pair, drawn uniformly among that pair's frames with `seed`, in
    the order the pairs first appear.

    A prompt that repeats within an episode (bumping into a wall, a no-op action) repeats with nearly the
    same return, so its repeats are not independent draws of the return given the prompt. A random frame
    rather than the first: the first visit of a repeated prompt is its earliest, so it would shift the
    kept frames towards the start of each run of repeats (and their returns with it).
    """
    visits: dict[tuple[Hashable, Hashable], list[int]] = defaultdict(list)
    for i, (key, episode) in enumerate(zip(keys, episodes, strict=True)):
        visits[key, episode].append(i)
    rng = random.Random(seed)
    return [rng.choice(frames) for frames in visits.values()]


MIN_REPEATS = 30
"""The fewest repeats (frames beyond each key's first, n - k) from which a rollout's ceiling is given. The
within-key mean square over d degrees of freedom has a relative standard deviation of about sqrt(2 / d): 0.26
at 30; at 7, two standard deviations take a true ceiling of 0.5 anywhere from 0 to 1. Estimates on single
256-frame rollouts of GoToLocalS6N3, where one-observation prompts seldom repeat, read from -4.0 to 1.0."""


def explainable_variance(keys: Sequence[Hashable], values: Sequence[float],
                         episodes: Sequence[Hashable] | None = None, seed: int = 0, min_repeats: int = 1) -> float:
    """The share of the variance of `values` that the best function of `keys` explains, Var(E[y | key]) /
    Var(y): the explained-variance ceiling of a critic whose input is the key. The key is whatever the
    critic reads (the prompt; (prompt, step count) for a critic that also reads the step count).

    Estimated as one-way ANOVA's adjusted R^2, 1 - (within-key mean square, SSW / (n - k)) / (total
    variance, SST / (n - 1)), over n frames and k distinct keys. If the frames are independent draws and
    the within-key variance is the same for every key, the two mean squares have expectations
    E[Var(y | key)] and Var(y), and their ratio is consistent (with a small ratio bias). The in-sample
    R^2, 1 - SSW / SST, reads high: each key's sample mean fits its own noise, so it explains about
    (k - 1) / (n - 1) of the noise on top of the truth, much where most keys are seen once or twice. A
    key seen once is fitted exactly: it adds nothing to SSW nor to n - k and counts only in the total
    variance, so the rare keys are taken to be as noisy as the repeated ones. Not the random-effects
    (intraclass correlation) estimator, (MSB - MSW) / n0 over that plus MSW: it weights keys alike,
    where the critic's loss weights frames.

    `episodes` (the episode id of each frame; None: every frame is its own episode) keeps one frame per
    (key, episode), drawn at random with `seed` (`one_frame_per_visit`). Frames of one episode share
    its outcome, and a prompt repeated within an episode makes within-key pairs of nearly equal
    returns, which shrink SSW and read the ceiling high. Across episodes the draws of a key are
    independent. What is measured then weights a key by the episodes it appears in rather than by its
    frames, as the critic's loss does; the two differ only where the number of repeats varies with
    the key or the return. Frames drawn at random from many episodes would keep the frames' weights,
    but need a pool of episodes many times the sample to make two draws from one episode rare. A key
    that already occurs once per episode, like (prompt, step count), keeps every frame.

    nan when fewer than `min_repeats` frames repeat a key (n - k; `MIN_REPEATS` for a rollout's estimate) or the
    values do not vary.
    """
    if episodes is not None:
        kept = one_frame_per_visit(keys, episodes, seed)
        keys, values = [keys[i] for i in kept], [values[i] for i in kept]
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for key, value in zip(keys, values, strict=True):
        groups[key].append(float(value))
    within = sum(sum((v - sum(g) / len(g)) ** 2 for v in g) for g in groups.values())  # SSW
    dof = len(values) - len(groups)                                                      # n - k
    n = len(values)
    mean = sum(float(v) for v in values) / n if n else math.nan
    total = sum((float(v) - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    if dof < max(min_repeats, 1) or total == 0:
        return math.nan
    return 1 - (within / dof) / total


# -------------------------------------------------------------------------------- over seeds (rliable)
@dataclass(frozen=True)
class Metric:
    """A quantity tabled over seeds, with the range that its values, and so its intervals, stay in."""

    name: str
    """its key among an evaluation's `per_episode` outcomes (success, return, length), or in a report."""
    title: str
    low: float
    high: float
    fmt: str
    """format of its values in tables."""
    summary_key: str | None = None
    """the key of a seed's value in an evaluation summary (`glamrl.rollout.summarize`)."""


METRICS = {m.name: m for m in (
    Metric("success", "Success rate", 0.0, 1.0, ".3f", "success_rate"),
    Metric("return", "Mean return", 0.0, 1.0, ".3f", "mean_return"),  # BabyAI: 1 - 0.9 steps / max_steps, or 0
    Metric("length", "Mean episode length", 0.0, math.inf, ".1f", "mean_length"),
    Metric("frames", "Frames", 0.0, math.inf, ".0f"),
    Metric("minutes", "Minutes", 0.0, math.inf, ".1f"),
)}
AGGREGATES = ("iqm", "mean")
"""rliable's interquartile mean (the mean of the middle half) and mean, over seeds."""
AGGREGATE_TITLES = {"iqm": "IQM over seeds (of fewer than 4 seeds: their mean)", "mean": "Mean over seeds"}
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Estimate:
    """An aggregate over seeds with its 95% interval (nan, nan: nothing to resample)."""

    point: float
    low: float
    high: float
    seeds: int
    episodes: int
    """episodes of each seed that the interval resampled; 0: the seeds' values only."""

    @property
    def basis(self) -> str:
        """What the interval resampled: "seeds and episodes", "seeds", "episodes" (one seed) or "none"."""
        if self.seeds > 1:
            return "seeds and episodes" if self.episodes > 1 else "seeds"
        return "episodes" if self.episodes > 1 else "none"

    def format(self, fmt: str) -> str:
        """"point [low, high]", or the point alone when there is no interval."""
        if math.isnan(self.low):
            return f"{self.point:{fmt}}"
        return f"{self.point:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def interval_over_seeds(values: Sequence[float], metric: Metric, aggregate: str = "iqm",
                        reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED) -> Estimate:
    """rliable's `aggregate` of one value per seed, with its 95% percentile-bootstrap interval over the seeds (the
    seeds as rliable's runs of one task), clipped to the metric's range. One seed: no interval."""
    scores = np.asarray(values, dtype=float).reshape(-1, 1)  # (seeds, 1)
    exact, fast = _aggregate(aggregate)
    return _estimate(scores, exact, lambda x: np.array([fast(x)]), metric, len(scores), 0, False, reps, seed)


def interval_over_episodes(outcomes: np.ndarray, metric: Metric, aggregate: str = "iqm",
                           reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED) -> Estimate:
    """rliable's `aggregate` of the seeds' mean outcomes, with a 95% percentile-bootstrap interval that resamples
    the seeds and, within each seed, its episodes; clipped to the metric's range. One seed: over its episodes.

    `outcomes` is (episodes, seeds): column s holds seed s's per-episode outcomes. rliable's stratified bootstrap
    resamples the rows (its runs, here the episodes) within each column (its tasks, the seeds), and with
    `task_bootstrap` the columns as well: a two-level bootstrap, seeds then episodes within each.

    The aggregate is over per-seed values, as rliable's are over runs: the IQM trims the outer quarter of the
    seeds at each end, so of fewer than 4 seeds it is their mean. Not the IQM of the pooled episodes: of 0/1
    successes at rate p that is 2p - 0.5 clipped to [0, 1] (a success rate of 0.8 has an IQM of 1).
    """
    scores = np.asarray(outcomes, dtype=float)  # (episodes, seeds)
    if scores.ndim != 2 or not scores.size:
        raise ValueError(f"outcomes must be a non-empty (episodes, seeds) matrix, got shape {scores.shape}")
    exact, fast = _aggregate(aggregate)
    return _estimate(scores, lambda x: exact(x.mean(axis=0)[:, None]),
                     lambda x: np.array([fast(x.mean(axis=0)[:, None])]),  # (seeds, 1): rliable's runs x tasks
                     metric, scores.shape[1], scores.shape[0], scores.shape[1] > 1, reps, seed)


def iqm(scores: np.ndarray) -> float:
    """rliable's `aggregate_iqm` (scipy's `trim_mean` cutting 25% at each end, over every entry), computed as
    scipy does but without its per-call argument checks, which take ten times the arithmetic of a small matrix:
    the bootstrap calls it once per resample. tests/test_stats.py compares the two."""
    a = np.ravel(scores)
    low = int(0.25 * a.size)
    return float(np.mean(np.partition(a, (low, a.size - low - 1))[low:a.size - low]))


def _aggregate(name: str) -> tuple[Callable[[np.ndarray], float], Callable[[np.ndarray], float]]:
    """(rliable's function, the same computed fast) of the aggregate `name`."""
    from rliable import metrics  # rliable imports arch, statsmodels and pandas: seconds, so only when needed

    if name not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {name!r}")
    return {"iqm": (metrics.aggregate_iqm, iqm), "mean": (metrics.aggregate_mean, metrics.aggregate_mean)}[name]


def _estimate(scores: np.ndarray, point: Callable[[np.ndarray], float], func: Callable[[np.ndarray], np.ndarray],
              metric: Metric, seeds: int, episodes: int, task_bootstrap: bool, reps: int, seed: int) -> Estimate:
    """`point` of `scores` and rliable's 95% percentile interval of `func` (the same aggregate, as a 1-array) on
    them, with numpy's global RNG seeded with `seed` for the bootstrap and restored after it: rliable's
    StratifiedBootstrap draws from that RNG (it hands `random_state` to arch, whose draws it replaces), so a
    fixed seed gives the same table every time, whatever else is tabled with it."""
    from rliable import library

    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}")
    value = float(point(scores))
    if scores.size == 1:
        return Estimate(value, math.nan, math.nan, seeds, episodes)
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        _, intervals = library.get_interval_estimates({metric.name: scores}, func, task_bootstrap=task_bootstrap,
                                                      reps=reps)
    finally:
        np.random.set_state(state)
    low, high = np.clip(intervals[metric.name][:, 0], metric.low, metric.high)
    return Estimate(value, float(low), float(high), seeds, episodes)
