"""Findings: verdicts computed from synthetic tables, Holm's correction, the task as the unit."""

import math

import numpy as np
import pandas as pd
import pytest

from vitplast import findings, results

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
    assert table.loc[0, "verdict"] == verdict and table.loc[0, "n"] == 7
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
    assert table.loc[0, "verdict"] == "not resolved"
    assert (table["p_holm"] >= table["p"]).all()


def test_too_few_units_are_never_resolved():
    row = findings.mean_test("tiny", [5.0, 5.1], paper="x", expected=1, unit="points")
    assert findings.table([row]).loc[0, "verdict"] == "not resolved"
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
    table = findings.finetuning(_main(acc), bands, corr, grads, probe)
    assert (table.loc[table["test"] != "none", "n"] == 7).all()
    by_claim = table.set_index("claim")
    assert by_claim.loc["MHA - FC1, test accuracy", "measured"] == pytest.approx(1.0)
    assert by_claim.loc["LN2 - LN1, test accuracy", "verdict"] == "agrees with the paper"
    grad = by_claim.filter(like="per parameter", axis=0)
    assert grad["measured"].iloc[0] == pytest.approx(-1.0)
    assert grad["verdict"].iloc[0] == "resolved: negative"
    mha = by_claim.filter(like="where MHA sits", axis=0)
    assert mha["verdict"].iloc[0] == "same as the paper (untested)"


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
