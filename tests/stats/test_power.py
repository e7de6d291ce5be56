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


def _family_of_three(middle_sd: float = 1.0):
    """Three exploratory rows over 7 tasks: one far from 0 (smallest p: Holm's first step,
    level 0.05 / 3), the row under study (second smallest p: its step's level is 0.05 / 2 =
    0.025) with SD ``middle_sd`` and the paper's effect 0.575 SD, and one near 0."""
    from vitplast.stats import verdicts

    z = np.array([-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5])
    z = z / z.std(ddof=1)  # SD exactly 1
    rows = [verdicts.mean_test("far", 3.0 + z, paper="x", expected=1, unit="points"),
            verdicts.mean_test("studied", 0.3 + middle_sd * z, paper="Table 1", expected=1,
                               unit="points", effect=0.575 * middle_sd),
            verdicts.mean_test("near", 0.05 + z, paper="x", expected=1, unit="points")]
    return verdicts.table(rows).set_index("claim")


def test_power_and_tasks_needed_are_at_the_level_the_row_states():
    """The issue's example (04): a row its Holm step tests at 0.025 printed "power 0.11 ...
    35 tasks", the values at alpha / m = 0.0167; at 0.025 they are 0.15 and 32. The power, the
    tasks needed and the sentence are all at the row's own level."""
    from vitplast.report import sentences

    t = _family_of_three()
    row = t.loc["studied"]
    assert row["level_step"] == pytest.approx(0.025) and row["level"] == pytest.approx(0.05 / 3)
    assert round(row["power_paper"], 2) == 0.15 and row["n_needed"] == 32
    assert round(power.power(0.575, 1.0, 7, 0.05 / 3), 2) == 0.11  # the old, wrong, level's
    assert power.n_needed(0.575, 1.0, 0.05 / 3) == 35
    said = sentences.text(t.reset_index(), "studied")
    assert "about 32 tasks" in said and "power 0.15 with these 7" in said, said
    assert "level 0.025" in said, said


def test_the_paper_effect_keeps_its_sign():
    """MHA - full: Table 1 has full finetuning 0.10 points above MHA; the row says "-0.10",
    never "0.1"."""
    from vitplast import paper
    from vitplast.stats import verdicts

    gap = paper.group_gap(("MHA",), ("full",))
    row = dict(effect_paper=gap, measured=0.4, unit="points, per task")
    assert verdicts.effect_named(row) == "the paper's -0.10 points"
    assert verdicts.effect_named({**row, "effect_paper": math.nan}) == "the observed +0.40 points"
