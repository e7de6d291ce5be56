"""Power (``vitplast.stats.power``): the closed form matches a simulation of the one-sample t-test,
and the tasks needed are the smallest n with power 0.8."""

import math

import numpy as np
import pytest
from scipy import stats

from vitplast.stats import power


def simulated_power(effect: float, sd: float, n: int, alpha: float = 0.05, reps: int = 20_000,
                    seed: int = 0) -> float:
    """``power`` by simulation: the share of ``reps`` normal samples of ``n`` values (mean
    ``effect``, SD ``sd``) whose t test rejects at ``alpha``: an independent check."""
    x = np.random.default_rng(seed).normal(effect, sd, size=(reps, n))
    return float((stats.ttest_1samp(x, 0.0, axis=1).pvalue < alpha).mean())


@pytest.mark.parametrize("effect, sd, n, alpha", [(0.93, 1.5, 7, 0.05), (0.93, 1.5, 7, 0.05 / 14),
                                                  (1.0, 1.0, 10, 0.05), (-0.5, 1.0, 20, 0.01),
                                                  (2.0, 1.0, 4, 0.05)])
def test_power_matches_simulation(effect, sd, n, alpha):
    assert power.power(effect, sd, n, alpha) == pytest.approx(
        simulated_power(effect, sd, n, alpha, reps=40_000), abs=0.03)


def test_n_needed_is_the_smallest_n_with_power_080():
    n = power.n_needed(0.93, 1.5)
    assert power.power(0.93, 1.5, int(n)) >= 0.8 > power.power(0.93, 1.5, int(n) - 1)
    assert 20 <= n <= 30  # the reading: about 26 tasks at the paper's effect
    assert math.isnan(power.n_needed(0.0, 1.0)) and math.isnan(power.power(1.0, 0.0, 5))
