"""Power of the findings' test: could the data have resolved a claim at all?

A finding tests the mean of one value per task (a paired difference, or a per-task
correlation) with a two-sided one-sample t test. Its power at a true mean ``effect``, with
the per-task values spread with standard deviation ``sd``, is the chance that the test
rejects: P(|T| > t_crit) where T follows a noncentral t with n - 1 degrees of freedom and
noncentrality effect / sd * sqrt(n) (Cohen 1988, ch. 2). ``n_needed`` is the smallest number of
tasks that reaches a target power. The tests check both against a simulation.

Not in the paper (it reports no test).
"""

from __future__ import annotations

import math

from scipy import stats

#: The power a study is planned for (the usual 0.8).
TARGET = 0.8
#: ``n_needed`` searches up to this many tasks and reports more as NaN ("more than this").
MAX_N = 10_000


def power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """The power of the two-sided one-sample (paired) t test at level ``alpha``.

    Args:
        effect: the true mean of the per-task values (e.g. the paper's difference).
        sd: their standard deviation across tasks (e.g. the observed one).
        n: the number of tasks.

    Returns:
        P(reject) in [alpha, 1]; NaN where it is undefined (n < 2, sd not positive, NaN input).
    """
    if not (n >= 2 and sd > 0 and math.isfinite(effect) and math.isfinite(sd)):
        return math.nan
    df, nc = n - 1, abs(effect) / sd * math.sqrt(n)  # the test is symmetric in the sign
    t = stats.t.ppf(1 - alpha / 2, df)
    near, far = stats.nct.sf(t, df, nc), stats.nct.sf(t, df, -nc)  # P(T > t), P(T < -t)
    far = 0.0 if math.isnan(far) else far  # scipy's far tail is NaN where it is ~0
    return float(min(1.0, near + far))


def n_needed(effect: float, sd: float, alpha: float = 0.05, target: float = TARGET) -> float:
    """The smallest number of tasks (>= 2) whose ``power`` reaches ``target``; NaN where the
    effect is zero or undefined, or more than ``MAX_N`` tasks would be needed."""
    if not (sd > 0 and math.isfinite(effect) and math.isfinite(sd) and effect != 0):
        return math.nan
    lo, hi = 2, 2
    while power(effect, sd, hi, alpha) < target:  # power grows with n: double, then bisect
        lo, hi = hi, hi * 2
        if hi > MAX_N:
            return math.nan
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if power(effect, sd, mid, alpha) < target else (lo, mid)
    return float(hi)


