"""Verdicts: rows computed from synthetic tables, Holm's correction within families,
primaries, power rows, the task as the unit, the verdict words of untested and exact
comparisons. Notebook 04's table and the fragile flag: ``test_finetuning_findings.py``; the LR
tie rule: ``test_lr_selection.py``."""

import math

import numpy as np
import pandas as pd
import pytest

from vitplast import paper
from vitplast.experiments import studies
from vitplast.stats import power, primaries, verdicts

TASKS = [f"t{i}" for i in range(7)]


def test_holm_matches_its_definition():
    p = [0.01, 0.04, 0.03, np.nan, 0.2]
    # sorted 0.01, 0.03, 0.04, 0.2 (m = 4): 0.04, 0.09, max(0.09, 0.08), max(0.09, 0.2)
    assert verdicts.holm(p) == pytest.approx([0.04, 0.09, 0.09, np.nan, 0.2], nan_ok=True)
    assert verdicts.holm([0.6, 0.5]).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("shift, expected, verdict", [
    (2.0, 1, "agrees with the paper"), (-2.0, 1, "disagrees with the paper"),
    (0.0, 1, "not resolved"), (2.0, 0, "disagrees with the paper"),
    (-2.0, math.nan, "resolved: negative")])
def test_a_verdict_follows_sign_significance_and_the_paper(shift, expected, verdict):
    rng = np.random.default_rng(0)
    a = pd.Series(80 + rng.normal(0, 1, 7), index=TASKS)
    b = a - shift + pd.Series(rng.normal(0, 0.2, 7), index=TASKS)
    row = verdicts.paired_test("a - b", a, b, paper="x", expected=expected, unit="points")
    table = verdicts.table([row])
    assert list(table.columns[:9]) == verdicts.COLUMNS
    assert table.loc[0, "verdict"].startswith(verdict) and table.loc[0, "n"] == 7
    assert table.loc[0, "measured"] == pytest.approx((a - b).mean())


def test_holm_turns_a_lone_significance_into_not_resolved():
    """One p = 0.03 among ten tests is significant alone but not after Holm."""
    rng = np.random.default_rng(1)
    rows = []
    for i in range(10):
        d = rng.normal(0, 1, 7) if i else rng.normal(1.0, 1.0, 7)
        rows.append(verdicts.mean_test(f"claim {i}", d, paper="x", expected=1, unit="points"))
    table = verdicts.table(rows)
    assert table.loc[0, "p"] < 0.05 <= table.loc[0, "p_holm"]
    assert table.loc[0, "verdict"].startswith("not resolved")
    assert (table["p_holm"] >= table["p"]).all()


def test_too_few_units_are_never_resolved():
    row = verdicts.mean_test("tiny", [5.0, 5.1], paper="x", expected=1, unit="points")
    assert verdicts.table([row]).loc[0, "verdict"] == "too few tasks to test (2; a test needs 3)"
    row = verdicts.mean_test("none", [], paper="x", expected=1, unit="points")
    assert math.isnan(row["measured"]) and row["n"] == 0


def test_render_is_one_line_per_row_from_the_table():
    rows = [verdicts.mean_test("c", [1.0, 2.0, 3.0, 4.0], paper="p", expected=1, unit="u"),
            verdicts.descriptive("d", "A > B", paper="B > A", verdict="differs (untested)", n=3,
                                 unit="mean over tasks")]
    text = verdicts.render(verdicts.table(rows)).splitlines()
    assert len(text) == 2 and text[1].endswith("Verdict: differs (untested).")
    assert "95% CI +0.45 to +4.6, at Holm's level 0.05: +0.45 to +4.6;" in text[0]
    assert "; power 0.73 at the observed one" in text[0]  # the paper gives no effect here
    with_paper = dict(rows[0], effect_paper=2.5)
    assert "; power 0.73 at the paper's effect, 0.73 at the observed one" in verdicts.render(
        verdicts.table([with_paper]))


def _rows(values: dict, family: str = "exploratory") -> list[dict]:
    return [{**verdicts.mean_test(k, v, paper="x", expected=1, unit="points"), "family": family}
            for k, v in values.items()]


def test_holm_runs_over_the_primaries_only():
    """Two primaries with p about 0.02 and 0.03: each resolved under Holm over 2, and adding
    twenty exploratory rows (some significant, some not) changes neither verdict nor p_holm."""
    rng = np.random.default_rng(3)
    primaries = _rows({"P1": 1.0 + rng.normal(0, 1, 8), "P2": 1.0 + rng.normal(0, 1, 8)},
                      "primary")
    alone = verdicts.table(primaries)
    more = verdicts.table(primaries + _rows({f"e{i}": rng.normal(2.0 * (i % 2), 1, 8)
                                             for i in range(20)}))
    assert alone["family"].tolist() == ["primary"] * 2
    assert (alone["p_holm"] == more.iloc[:2]["p_holm"]).all()
    assert alone["verdict"].tolist() == more.iloc[:2]["verdict"].tolist()
    explo = more[more["family"] == "exploratory"]
    assert explo["p_holm"].tolist() == pytest.approx(verdicts.holm(explo["p"]).tolist())
    assert (more.iloc[:2]["level"] == 0.025).all() and (explo["level"] == 0.05 / 20).all()


def test_secondary_rows_are_their_own_holm_family_listed_after_the_primaries():
    """Secondary rows (the primaries asked again another declared way) get Holm over
    themselves: they move neither a primary's p_holm nor an exploratory row's."""
    rng = np.random.default_rng(4)
    prim = _rows({"P1": 1.0 + rng.normal(0, 1, 8)}, "primary")
    explo = _rows({"e1": rng.normal(0, 1, 8), "e2": rng.normal(1, 1, 8)})
    sec = _rows({"S1": 1.0 + rng.normal(0, 1, 8), "S2": rng.normal(0, 1, 8)}, "secondary")
    base = verdicts.table(prim + explo)
    both = verdicts.table(explo + sec + prim)
    assert both["family"].tolist() == ["primary", "secondary", "secondary", "exploratory",
                                       "exploratory"]
    assert both["p_holm"].tolist()[:1] + both["p_holm"].tolist()[3:] == pytest.approx(
        base["p_holm"].tolist())
    s = both[both["family"] == "secondary"]
    assert s["p_holm"].tolist() == pytest.approx(verdicts.holm(s["p"]).tolist())
    assert (s["level"] == 0.025).all()


def test_more_than_three_primaries_fail():
    with pytest.raises(ValueError, match="at most 3"):
        verdicts.table(_rows({f"P{i}": [1.0, 2.0, 3.0] for i in range(4)}, "primary"))
    for name in ("main", "confounds", "suite", "gauge"):
        declared = studies.get(name).primaries
        assert 1 <= len(declared) <= verdicts.MAX_PRIMARIES


def _primary_row(primary, shift):
    """``primary``'s row on 8 tasks whose per-task values have mean ``shift`` (0: none)."""
    rng = np.random.default_rng(5)
    acc = pd.DataFrame({"A": 80 + shift + rng.normal(0, 0.5, 8), "B": 80 + rng.normal(0, 0.5, 8)},
                       index=[f"t{i}" for i in range(8)])
    return verdicts.table([primary.row(acc)]).iloc[0]


@pytest.mark.parametrize("shift, cited, uncited", [
    (3.0, "agrees with the paper", "resolved: positive"),
    (-3.0, "disagrees with the paper", "resolved: negative"),
    (0.0, "not resolved", "not resolved")])
def test_verdict_words_follow_the_claim_a_row_cites_or_read_as_results(shift, cited, uncited):
    """A primary citing a claim of the paper reads agrees / disagrees / not resolved against
    that claim's direction; one citing none reads as a result, never against a default
    direction."""
    with_claim = primaries.Primary("A - B", a=("A",), b=("B",), cites="MHA over LN1",
                                  paper=paper.group_gap(("MHA",), ("LN1",)))
    without = primaries.Primary("A - B", a=("A",), b=("B",), note="not tested in the paper")
    r, q = _primary_row(with_claim, shift), _primary_row(without, shift)
    assert r["verdict"].startswith(cited) and q["verdict"].startswith(uncited)
    assert r["expected"] == 1 and math.isnan(q["expected"])
    assert r["paper"] == ("+0.93, Table 1 average (ViT-B/16): finetuning MHA alone gives "
                          "higher test accuracy than LN1 alone")
    assert q["paper"] == "no claim in the paper: not tested in the paper"
    for verdict in (r["verdict"], q["verdict"]):
        assert verdict.split(" (")[0].split(":")[0] in (
            "agrees with the paper", "disagrees with the paper", "not resolved", "resolved")
    assert not any(w in q["verdict"] for w in ("agrees", "disagrees"))


def test_an_underpowered_row_says_how_many_tasks_it_needs():
    values = np.array([2.4, -1.3, 0.4, 1.9, -0.8, 1.5, 0.2])  # mean 0.6, sd 1.4, p 0.3
    row = {**verdicts.mean_test("MHA - LN1", values, paper="+0.93", expected=1, unit="points",
                                effect=0.93), "family": "primary"}
    r = verdicts.table([row]).iloc[0]
    assert r["power_paper"] == pytest.approx(power.power(0.93, values.std(ddof=1), 7, 0.05))
    assert r["power_paper"] < 0.5 and r["verdict"] == (
        f"not resolved: underpowered (about {power.n_needed(0.93, values.std(ddof=1)):.0f} "
        "tasks needed to detect the paper's +0.93 points)")


def test_rows_with_fewer_than_three_units_are_descriptive():
    rows = _rows({"two": [5.0, 5.1], "big": [3.0, 3.1, 2.9, 3.2], "noise": [0.1, -0.2, 0.3, 0.0]})
    table = verdicts.table(rows).set_index("claim")
    assert table.loc["two", "family"] == "descriptive" and math.isnan(table.loc["two", "p"])
    assert table.loc["two", "verdict"].startswith("too few tasks to test (2")
    assert table.loc["two", ["ci95", "ci_low", "ci_high"]].isna().all()  # no interval below 3
    assert (table.loc[["big", "noise"], "level"] == 0.025).all()  # m = 2: "two" is not counted


def test_untested_and_exact_comparisons_say_which_they_are():
    assert verdicts.same(True) == "same as the paper"
    assert verdicts.same(False) == "differs from the paper"
    assert verdicts.exact(True) == "same as the paper (exact check)"
    assert verdicts.exact(False) == "differs from the paper (exact check)"


def test_a_correlation_row_has_r_its_fisher_z_p_and_the_interval_that_p_inverts():
    from scipy import stats

    rng = np.random.default_rng(6)
    x = rng.normal(0, 1, 30)
    y = -0.5 * x + rng.normal(0, 1, 30)
    row = verdicts.correlation_test("r", x, y, paper="none", expected=math.nan, unit="r")
    r = stats.pearsonr(x, y).statistic
    p = 2 * stats.norm.sf(abs(np.arctanh(r)) * np.sqrt(27))
    lo, hi = np.tanh(np.arctanh(r) + np.array([-1, 1]) * 1.959964 / np.sqrt(27))
    assert (row["measured"], row["p"], row["n"]) == (pytest.approx(r), pytest.approx(p), 30)
    assert row["ci95"] == pytest.approx((hi - lo) / 2, rel=1e-5)
    assert row["test"] == f"Pearson r, Fisher-z 95% CI [{lo:+.2f}, {hi:+.2f}]"
    t = verdicts.table([row])
    assert t.loc[0, "verdict"] == "resolved: negative"
    assert (t.loc[0, "ci_low"], t.loc[0, "ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    flat = verdicts.correlation_test("r", [1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0],
                                     paper="none", expected=math.nan, unit="r")
    assert math.isnan(flat["measured"]) and flat["n"] == 4


@pytest.mark.parametrize("r_true", [0.999, -0.999, 0.0])
def test_correlation_intervals_stay_inside_minus_one_to_one_at_every_level(r_true):
    """Near +-1, at n = 4 (the fewest Fisher's z takes) and at Holm's smallest levels, both
    the 95% and the Holm-step interval lie in [-1, 1], and exclude 0 exactly where p < level."""
    rng = np.random.default_rng(7)
    for n in (4, 5, 30):
        x = rng.normal(0, 1, n)
        y = r_true * x + np.sqrt(1 - r_true**2) * rng.normal(0, 1, n)
        row = verdicts.correlation_test("r", x, y, paper="x", expected=math.nan, unit="r")
        for level in (0.05, 0.05 / 3, 0.05 / 20):
            lo, hi = verdicts.interval({**row, "family": "exploratory"}, level)
            assert -1 <= lo <= row["measured"] <= hi <= 1
            assert (lo > 0 or hi < 0) == (row["p"] < level)


def test_correlations_on_three_or_fewer_tasks_are_not_tested():
    """Fisher's z needs n > 3: three pairs give a descriptive row, no interval, no p."""
    row = verdicts.correlation_test("r", [1.0, 2.0, 3.0], [1.0, 3.0, 2.0], paper="x",
                                    expected=math.nan, unit="r")
    t = verdicts.table([row]).iloc[0]
    assert t["family"] == "descriptive" and math.isnan(t["p"]) and math.isnan(t["ci_low"])
    assert t["verdict"] == "too few tasks to test a correlation (3; it needs 4)"


@pytest.mark.parametrize("values", [[0.9, 0.2, 0.99], [-1.0, -0.9, -0.2], [1.0, 1.0, 0.5, 0.9]])
def test_a_mean_of_correlations_has_its_intervals_inside_minus_one_to_one(values):
    """05's per-block partial rho: the t interval on 3 values ran past +1 (-0.94 to +1.5);
    bounded, it is cut to [-1, 1], which leaves whether it excludes 0 (the t test's verdict)
    unchanged."""
    row = verdicts.mean_test("rho", values, paper="x", expected=1, unit="rho", bounded=True)
    plain = verdicts.mean_test("rho", values, paper="x", expected=1, unit="rho")
    for level in (0.05, 0.05 / 3):
        lo, hi = verdicts.interval({**row, "family": "primary"}, level)
        plo, phi = verdicts.interval({**plain, "family": "primary"}, level)
        assert -1 <= lo <= hi <= 1 and (lo, hi) == (max(plo, -1), min(phi, 1))
        assert (lo > 0 or hi < 0) == (plo > 0 or phi < 0) == (row["p"] < level)


def test_the_interval_at_a_rows_holm_step_agrees_with_its_verdict():
    """Holm level vs 95%: a row with p between its step's level and 0.05 has a 95% interval
    that excludes 0 and a step interval that does not, and reads not resolved."""
    rng = np.random.default_rng(8)
    rows = [verdicts.mean_test("a", 1 + rng.normal(0, 1, 12), paper="x", expected=math.nan,
                               unit="points"),
            verdicts.mean_test("b", 0.8 + rng.normal(0, 1.3, 12), paper="x", expected=math.nan,
                               unit="points"),
            verdicts.mean_test("c", rng.normal(0, 1, 12), paper="x", expected=math.nan,
                               unit="points")]
    t = verdicts.table(rows).set_index("claim")
    levels = sorted(t["level_step"].dropna())
    assert levels == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])
    for claim, r in t.iterrows():
        assert (r["step_low"] > 0 or r["step_high"] < 0) == (r["p"] < r["level_step"])
        assert (r["ci_low"] > 0 or r["ci_high"] < 0) == (r["p"] < 0.05)
        assert r["verdict"].startswith("resolved") == (r["p_holm"] < 0.05)

