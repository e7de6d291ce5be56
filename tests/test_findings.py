"""Findings: verdicts computed from synthetic tables, Holm's correction within families,
primaries, power, the LR tie rule and the fragile flag, the task as the unit."""

import math

import numpy as np
import pandas as pd
import pytest

from vitplast import findings, power, results, studies

TASKS = [f"t{i}" for i in range(7)]


def test_holm_matches_its_definition():
    p = [0.01, 0.04, 0.03, np.nan, 0.2]
    # sorted 0.01, 0.03, 0.04, 0.2 (m = 4): 0.04, 0.09, max(0.09, 0.08), max(0.09, 0.2)
    assert findings.holm(p) == pytest.approx([0.04, 0.09, 0.09, np.nan, 0.2], nan_ok=True)
    assert findings.holm([0.6, 0.5]).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("shift, expected, verdict", [
    (2.0, 1, "agrees with the paper"), (-2.0, 1, "disagrees with the paper"),
    (0.0, 1, "not resolved"), (2.0, 0, "disagrees with the paper"),
    (-2.0, math.nan, "resolved: negative")])
def test_a_verdict_follows_sign_significance_and_the_paper(shift, expected, verdict):
    rng = np.random.default_rng(0)
    a = pd.Series(80 + rng.normal(0, 1, 7), index=TASKS)
    b = a - shift + pd.Series(rng.normal(0, 0.2, 7), index=TASKS)
    row = findings.paired_test("a - b", a, b, paper="x", expected=expected, unit="points")
    table = findings.table([row])
    assert list(table.columns[:9]) == findings.COLUMNS
    assert table.loc[0, "verdict"].startswith(verdict) and table.loc[0, "n"] == 7
    assert table.loc[0, "measured"] == pytest.approx((a - b).mean())


def test_holm_turns_a_lone_significance_into_not_resolved():
    """One p = 0.03 among ten tests is significant alone but not after Holm."""
    rng = np.random.default_rng(1)
    rows = []
    for i in range(10):
        d = rng.normal(0, 1, 7) if i else rng.normal(1.0, 1.0, 7)
        rows.append(findings.mean_test(f"claim {i}", d, paper="x", expected=1, unit="points"))
    table = findings.table(rows)
    assert table.loc[0, "p"] < 0.05 <= table.loc[0, "p_holm"]
    assert table.loc[0, "verdict"].startswith("not resolved")
    assert (table["p_holm"] >= table["p"]).all()


def test_too_few_units_are_never_resolved():
    row = findings.mean_test("tiny", [5.0, 5.1], paper="x", expected=1, unit="points")
    assert findings.table([row]).loc[0, "verdict"] == "descriptive (n = 2 < 3, untested)"
    row = findings.mean_test("none", [], paper="x", expected=1, unit="points")
    assert math.isnan(row["measured"]) and row["n"] == 0


def test_render_is_one_line_per_row_from_the_table():
    rows = [findings.mean_test("c", [1.0, 2.0, 3.0, 4.0], paper="p", expected=1, unit="u"),
            findings.descriptive("d", "A > B", paper="B > A", verdict="differs (untested)", n=3,
                                 unit="mean over tasks")]
    text = findings.render(findings.table(rows)).splitlines()
    assert len(text) == 2 and text[1].endswith("Verdict: differs (untested).")


def _main(acc: dict) -> pd.DataFrame:
    """A main_table-like frame from {config: per-task accuracies}."""
    rows = [dict(task=t, config=c, test_acc_mean=v, lr=0.1) for c, vals in acc.items()
            for t, v in zip(TASKS, vals)]
    return pd.DataFrame(rows)


def test_finetuning_findings_use_tasks_as_units():
    """Synthetic per-task accuracies where MHA beats LN1 by exactly 3 points on every task
    (plus noise in the others): the table tests over 7 tasks, not 21 seeds."""
    rng = np.random.default_rng(2)
    base = 80 + rng.normal(0, 2, 7)
    acc = {"MHA": base + 3, "FC1": base + 2, "FC2": base + 1, "LN2": base + 0.5, "LN1": base,
           "full": base + 3.2, "head": base - 4}
    bands = pd.DataFrame([dict(task=t, config=c, delta=d, width=w, drop_x3=1.0)
                          for t in TASKS for c, w in (("MHA", 1.5), ("LN1", 1.0), ("LN2", 1.0))
                          for d in (1.0, 2.0)])
    corr = pd.DataFrame([dict(protocol="hidden", task=t, component=c, spearman=0.5,
                              rank_x=r, rank_y=r) for t in TASKS
                         for r, c in enumerate(["MHA", "FC1", "FC2", "LN2", "LN1"], 1)])
    grads = pd.DataFrame([dict(task=t, config=c, kind=k, grad_norm=g) for t in TASKS
                          for c, k, g in (("MHA", "total", 10.0), ("LN1", "total", 1.0),
                                          ("LN2", "total", 1.0), ("MHA", "per parameter", 0.01),
                                          ("LN1", "per parameter", 0.1),
                                          ("LN2", "per parameter", 0.1))])
    probe = pd.Series(base - 10, index=TASKS)
    t = dict(main=_main(acc), bands=bands, corr=corr, grads=grads)
    table = findings.finetuning(t, probe, studies.get("main").primaries)
    assert (table.loc[table["test"] != "none", "n"] == 7).all()
    by_claim = table.set_index("claim")
    assert by_claim.loc["MHA - FC1, test accuracy", "measured"] == pytest.approx(1.0)
    assert by_claim.loc["LN2 - LN1, test accuracy", "verdict"] == "agrees with the paper"
    grad = by_claim.filter(like="per parameter", axis=0)
    assert grad["measured"].iloc[0] == pytest.approx(-1.0)
    assert grad["verdict"].iloc[0] == "resolved: negative"
    mha = by_claim.filter(like="where MHA sits", axis=0)
    assert mha["verdict"].iloc[0] == "same as the paper (untested)"
    primary = table[table["family"] == "primary"].set_index("claim")
    assert len(primary) == 3 and primary.index[1] == "MHA - LN1, test accuracy"
    assert primary["measured"].iloc[0] == pytest.approx((3 + 2 + 1) / 3 - 0.25)
    assert primary["measured"].iloc[2] == pytest.approx(0.5)  # the corr table's rho
    assert not table["claim"].str.contains("high-plasticity").any()


def test_lr_bands_are_exact_on_a_known_curve():
    """Accuracy 90 at lr 0.1, 89.5 at 0.03 and 0.3, 87 at 0.01 and 1, chance (diverged) at 3:
    within 1 point the band runs from 0.03 to 0.3 and beyond, to where the line crosses 89."""
    lrs = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    acc = [0.87, 0.895, 0.90, 0.895, 0.87, None]
    df = pd.DataFrame(dict(task="a", config="MHA", lr=lrs, seed=0,
                           status=["ok"] * 5 + ["diverged"], best_val_acc=acc))
    bands = results.lr_bands(df).set_index("delta")
    # below: from log10(0.03) toward log10(0.01), 89.5 -> 87 crosses 89 at t = 0.2
    lo = math.log10(0.03) + 0.2 * (math.log10(0.01) - math.log10(0.03))
    hi = math.log10(0.3) + 0.2 * (math.log10(1.0) - math.log10(0.3))
    assert bands.loc[1.0, "width"] == pytest.approx(hi - lo)
    assert bands.loc[1.0, "bracketed"] and bands.loc[1.0, "best_lr"] == pytest.approx(0.1)
    # 3x the best LR is 0.3 (89.5); a third of it lies between 0.03 and 0.1 in log-LR
    assert bands.loc[1.0, "drop_x3"] == pytest.approx(0.5)
    curve = [87, 89.5, 90, 89.5, 87, 10]
    third = np.interp(math.log10(0.1 / 3), np.log10(lrs), curve)
    assert bands.loc[1.0, "drop_div3"] == pytest.approx(90 - third)
    # within 5 points: still 87 at both ends of the ok runs, and chance (10) at lr 3
    wide = results.lr_bands(df, within=(5.0,)).iloc[0]
    assert not wide["bracketed"] and math.isnan(wide["width"])  # the band reaches lr 0.01


def test_within_task_correlation_never_pools_tasks():
    """Two tasks whose components order perfectly within each (rho = +1 each) but whose
    pooled points anti-correlate: within tasks gives +1."""
    rows = []
    for task, offset in (("a", 0.0), ("b", 10.0)):
        for i, comp in enumerate(["MHA", "FC1", "FC2", "LN2", "LN1"]):
            rows.append(dict(protocol="hidden", task=task, component=comp,
                             plasticity=5 - i + offset, gain_pp=5 - i - 3 * offset))
    corr = results.within_task_correlation(pd.DataFrame(rows))
    assert corr.drop_duplicates("task")["spearman"].tolist() == pytest.approx([1.0, 1.0])
    assert corr.set_index(["task", "component"]).loc[("a", "MHA"), "rank_x"] == 1


def test_runtime_knobs_never_split_a_setting():
    """Runs of one setting made on a GPU (precision recorded) and on a CPU (none) are one
    setting: their LR is chosen together."""
    df = pd.DataFrame(dict(task="a", config="MHA", lr=[0.1, 0.1, 1.0, 1.0], seed=[0, 1, 0, 1],
                           status="ok", best_val_acc=[0.9, 0.8, 0.5, 0.5], test_acc=0.5,
                           precision=["fp32", None, "fp32", None], workers=[0, 4, 0, 4]))
    chosen = results.select_lr(df)
    assert len(chosen) == 1 and chosen.loc[0, "n_seeds"] == 2


def _rows(values: dict, family: str = "exploratory") -> list[dict]:
    return [{**findings.mean_test(k, v, paper="x", expected=1, unit="points"), "family": family}
            for k, v in values.items()]


def test_holm_runs_over_the_primaries_only():
    """Two primaries with p about 0.02 and 0.03: each resolved under Holm over 2, and adding
    twenty exploratory rows (some significant, some not) changes neither verdict nor p_holm."""
    rng = np.random.default_rng(3)
    primaries = _rows({"P1": 1.0 + rng.normal(0, 1, 8), "P2": 1.0 + rng.normal(0, 1, 8)},
                      "primary")
    alone = findings.table(primaries)
    more = findings.table(primaries + _rows({f"e{i}": rng.normal(2.0 * (i % 2), 1, 8)
                                             for i in range(20)}))
    assert alone["family"].tolist() == ["primary"] * 2
    assert (alone["p_holm"] == more.iloc[:2]["p_holm"]).all()
    assert alone["verdict"].tolist() == more.iloc[:2]["verdict"].tolist()
    explo = more[more["family"] == "exploratory"]
    assert explo["p_holm"].tolist() == pytest.approx(findings.holm(explo["p"]).tolist())
    assert (more.iloc[:2]["level"] == 0.025).all() and (explo["level"] == 0.05 / 20).all()


def test_more_than_three_primaries_fail():
    with pytest.raises(ValueError, match="at most 3"):
        findings.table(_rows({f"P{i}": [1.0, 2.0, 3.0] for i in range(4)}, "primary"))
    for name in ("main", "confounds"):
        declared = studies.get(name).primaries
        assert 1 <= len(declared) <= findings.MAX_PRIMARIES
        assert all(p.expected in (1, -1) and p.source for p in declared)


def test_a_primary_is_a_difference_of_groups_or_a_named_statistic():
    acc = pd.DataFrame({"A": [1.0, 2.0, 3.0], "B": [3.0, 4.0, 5.0], "C": [0.0, 0.0, np.nan]},
                       index=["t0", "t1", "t2"])
    p = findings.Primary("A, B - C", a=("A", "B"), b=("C",))
    assert p.values(acc).tolist() == [2.0, 3.0]  # t2 lacks C: left out
    assert findings.Primary("A - D", a=("A",), b=("D",)).values(acc).empty
    rho = pd.Series([0.5, 0.1], index=["t0", "t1"])
    q = findings.Primary("rho", statistic="s", paper=1.0, source="Fig. 2")
    assert q.values(acc, {"s": rho}).equals(rho) and q.row(acc, {"s": rho})["effect_paper"] == 1.0
    with pytest.raises(ValueError, match="unknown statistic"):
        q.values(acc, {})


@pytest.mark.parametrize("effect, sd, n, alpha", [(0.93, 1.5, 7, 0.05), (0.93, 1.5, 7, 0.05 / 14),
                                                  (1.0, 1.0, 10, 0.05), (-0.5, 1.0, 20, 0.01),
                                                  (2.0, 1.0, 4, 0.05)])
def test_power_matches_simulation(effect, sd, n, alpha):
    assert power.power(effect, sd, n, alpha) == pytest.approx(
        power.simulated_power(effect, sd, n, alpha, reps=40_000), abs=0.03)


def test_n_needed_is_the_smallest_n_with_power_080():
    n = power.n_needed(0.93, 1.5)
    assert power.power(0.93, 1.5, int(n)) >= 0.8 > power.power(0.93, 1.5, int(n) - 1)
    assert 20 <= n <= 30  # the reading: about 26 tasks at the paper's effect
    assert math.isnan(power.n_needed(0.0, 1.0)) and math.isnan(power.power(1.0, 0.0, 5))


def test_an_underpowered_row_says_how_many_tasks_it_needs():
    values = np.array([2.4, -1.3, 0.4, 1.9, -0.8, 1.5, 0.2])  # mean 0.6, sd 1.4, p 0.3
    row = {**findings.mean_test("MHA - LN1", values, paper="+0.93", expected=1, unit="points",
                                effect=0.93), "family": "primary"}
    r = findings.table([row]).iloc[0]
    assert r["power_paper"] == pytest.approx(power.power(0.93, values.std(ddof=1), 7, 0.05))
    assert r["power_paper"] < 0.5 and r["verdict"] == (
        f"not resolved: underpowered (about {power.n_needed(0.93, values.std(ddof=1)):.0f} "
        "tasks needed)")


def test_rows_with_fewer_than_three_units_are_descriptive():
    rows = _rows({"two": [5.0, 5.1], "big": [3.0, 3.1, 2.9, 3.2], "noise": [0.1, -0.2, 0.3, 0.0]})
    table = findings.table(rows).set_index("claim")
    assert table.loc["two", "family"] == "descriptive" and math.isnan(table.loc["two", "p"])
    assert table.loc["two", "verdict"].startswith("descriptive (n = 2")
    assert (table.loc[["big", "noise"], "level"] == 0.025).all()  # m = 2: "two" is not counted


def _tie_runs(alt_test: float) -> pd.DataFrame:
    """Configs A and B on 7 tasks, LRs 0.1 and 1, 3 seeds: A beats B by about 1 point at the
    chosen LRs; on t0, A's two LRs tie on seed-mean validation accuracy (0.80, 0.90, 0.85 vs
    0.85, 0.85, 0.85), LR 1 with the lower validation loss; its test accuracy ``alt_test``."""
    rng = np.random.default_rng(4)
    rows = []
    for i, task in enumerate(TASKS):
        for config, lr, val, loss, test in (("A", 0.1, [0.8, 0.9, 0.85], 0.6, 0.81),
                                            ("A", 1.0, [0.85] * 3, 0.5, 0.81),
                                            ("B", 0.1, [0.5] * 3, 0.5, 0.80),
                                            ("B", 1.0, [0.4] * 3, 0.5, 0.70)):
            shift = rng.normal(0, 0.001) if config == "A" else 0.0
            acc = alt_test if (task, config, lr) == ("t0", "A", 0.1) else test + shift
            if (task, config) != ("t0", "A"):
                val = [v - 0.1 * (lr == 1.0) for v in val]  # no tie elsewhere
            rows += [dict(task=task, config=config, lr=lr, seed=s, status="ok", best_val_acc=v,
                          best_val_loss=loss, test_acc=acc) for s, v in enumerate(val)]
    return pd.DataFrame(rows)


def test_lr_ties_go_to_the_lower_validation_loss():
    df = _tie_runs(0.81)
    chosen = results.select_lr(df).set_index(["task", "config"])
    assert chosen.loc[("t0", "A"), "lr"] == 1.0 and chosen.loc[("t0", "A"), "tied"] == 1
    assert chosen.loc[("t1", "A"), "lr"] == 0.1 and chosen.loc[("t1", "A"), "tied"] == 0
    assert len(results.lr_ties(df)) == 1
    alt = results.tie_alternatives(df)
    assert len(alt) == 1
    assert results.select_lr(alt[0]).set_index(["task", "config"]).loc[("t0", "A"), "lr"] == 0.1


def _ab_findings(t: dict) -> pd.DataFrame:
    main = results.main_table(t["runs"])
    acc = main[main["task"] != "average"].pivot_table(index="task", columns="config",
                                                      values="test_acc_mean")
    return findings.table([findings.paired_test("A - B", acc["A"], acc["B"], paper="x",
                                                expected=1, unit="points")])


@pytest.mark.parametrize("alt_test, fragile", [(0.81, False), (0.40, True)])
def test_a_row_is_fragile_when_the_other_tied_lr_flips_it(alt_test, fragile):
    df = _tie_runs(alt_test)
    t = dict(runs=df, ties=results.lr_ties(df),
             alternatives=[dict(runs=a) for a in results.tie_alternatives(df)])
    table = findings.with_ties(_ab_findings, t).set_index("claim")
    assert table.loc["A - B", "verdict"] == "agrees with the paper"
    assert bool(table.loc["A - B", "fragile"]) is fragile
    ties = table.filter(like="tie-break", axis=0)
    assert ties["n"].iloc[0] == 1 and ties["family"].iloc[0] == "descriptive"
