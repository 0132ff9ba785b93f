"""95% confidence intervals for a success rate (Wilson) and a mean return (normal approximation); the share of
a variance that a function of a key can explain (the ceiling of a critic that reads only its prompt)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

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


def explainable_variance(keys: Sequence[Hashable], values: Sequence[float]) -> float:
    """The share of the variance of `values` that the best function of `keys` explains, E[Var(E[y | key])] /
    Var(y), estimated as 1 - (pooled within-key variance) / (total variance), both with n - 1 (unbiased
    where the within-key variance is the same across keys). Keys seen once carry no within-key information
    and are left out of the pooled variance. nan when no key repeats or the values do not vary."""
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for key, value in zip(keys, values, strict=True):
        groups[key].append(float(value))
    within = sum(sum((v - sum(g) / len(g)) ** 2 for v in g) for g in groups.values() if len(g) > 1)
    dof = sum(len(g) - 1 for g in groups.values() if len(g) > 1)
    n = len(values)
    mean = sum(values) / n if n else math.nan
    total = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    if dof == 0 or total == 0:
        return math.nan
    return 1 - (within / dof) / total
