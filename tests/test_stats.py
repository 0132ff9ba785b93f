import math
import random

import pytest

from glamrl.stats import explainable_variance


def test_explainable_variance_by_hand():
    # within-key sums of squares 2 + 2 over 2 degrees of freedom; total variance 104 / 3
    assert explainable_variance("aabb", [0.0, 2.0, 10.0, 12.0]) == pytest.approx(1 - 2 / (104 / 3))
    assert explainable_variance("aabbc", [1.0, 1.0, 5.0, 5.0, 3.0]) == 1.0   # a function of the key
    assert math.isnan(explainable_variance("abc", [1.0, 2.0, 3.0]))         # no key repeats
    assert math.isnan(explainable_variance("aa", [4.0, 4.0]))               # nothing to explain


def test_explainable_variance_is_unbiased_where_in_sample_group_means_overfit():
    # y = key's mean (variance 1 across keys) + noise of variance 3: the true share is 1 / 4, while the
    # in-sample group means with 3 draws per key would "explain" 1/4 + (3/4) * (1/3) = 1/2
    rng = random.Random(0)
    means = {k: rng.gauss(0, 1) for k in range(2000)}
    keys = [k for k in means for _ in range(3)]
    values = [means[k] + rng.gauss(0, math.sqrt(3)) for k in keys]
    assert explainable_variance(keys, values) == pytest.approx(0.25, abs=0.04)
