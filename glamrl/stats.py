"""95% confidence intervals for a success rate (Wilson) and a mean return (normal approximation)."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
