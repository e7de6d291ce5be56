"""The suite study's statistics (``vitplast.report.suite_findings``) on synthetic tables: the
primaries per task, the fixed grid's secondary rows, distance, the length check and P3 under
both protocols."""

import math

import numpy as np
import pandas as pd
import pytest

from vitplast.experiments import studies, task_measures
from vitplast.report import suite_findings

PRIMARIES = studies.get("suite").primaries


def _picked(task, acc):
    return [dict(task=task, config=c, test_acc=a) for c, a in acc.items()]


def test_primaries_per_task():
    acc = {"head": 60, "MHA": 70, "FC1": 68, "FC2": 66, "LN1": 64, "LN2": 62,
           "MHA sparse": 63, "FC1 sparse": 62, "FC2 sparse": 61}
    picked = pd.DataFrame(_picked("t", acc) + _picked("u", {k: 50 for k in acc}))
    plastic = pd.DataFrame(dict(task="t", component=["MHA", "FC1", "FC2", "LN1", "LN2"],
                                plasticity=[5.0, 4.0, 3.0, 2.0, 1.0]))
    p1, p2, _ = PRIMARIES
    wide = suite_findings.accuracy(picked)
    assert p1.values(wide).to_dict() == {"t": pytest.approx(62 - 63), "u": 0.0}
    assert p2.values(wide).to_dict() == {"t": 70 - 64, "u": 0.0}
    rho = suite_findings.spearman_plasticity_gain(picked, plastic)
    assert rho["t"] == pytest.approx(1.0) and math.isnan(rho["u"])  # no plasticity for u
    flipped = plastic.assign(plasticity=plastic["plasticity"][::-1].to_numpy())
    assert suite_findings.spearman_plasticity_gain(picked, flipped)["t"] == pytest.approx(-1.0)
    rows = suite_findings.primary_rows(studies.get("suite"), picked, plastic)
    assert [r["family"] for r in rows] == ["primary"] * 3 and [r["n"] for r in rows] == [2, 2, 1]


def test_secondary_asks_the_primaries_again_on_the_grid_s_choices():
    gauge = studies.get("gauge")
    acc = {"MHA": 70, "FC2": 60, "full": 80, "MHA c=8": 71, "FC2 c=8": 58, "full c=8": 80}
    on_grid = pd.DataFrame(_picked("t", acc) + _picked("u", {k: 50 for k in acc}))
    rows = suite_findings.secondary_rows(gauge, on_grid)
    assert [r["family"] for r in rows] == ["secondary"] * 3
    assert [r["measured"] for r in rows] == [pytest.approx(-1 / 6), 0.5, -1.0]  # means over t, u
    assert all(r["claim"].endswith("; LR from the fixed grid")
               and "each LR tuned" not in r["claim"] for r in rows)


def test_distance_reads_head_only_and_the_probe():
    picked = pd.DataFrame(_picked("t", {"head": 55.0, "MHA": 70.0}))
    probes = pd.DataFrame(dict(task=["t"], test_acc=[48.0]))
    out = suite_findings.distance(picked, probes)
    assert out.to_dict("records") == [dict(task="t", head_acc=55.0, probe_acc=48.0)]


def test_the_length_check_reads_p1_and_p2_at_each_length_and_applies_its_rule():
    p1, p2, _ = PRIMARIES
    suite_acc = {"MHA": 70, "LN1": 64, "LN2": 62, "MHA sparse": 63, "FC1 sparse": 62,
                 "FC2 sparse": 61, "head": 50}
    picked = pd.DataFrame(_picked("t", suite_acc) + _picked("u", suite_acc)
                          + _picked("v", suite_acc))  # v: no longer runs, left out
    longer = []
    for k, gap in ((2, 1.0), (4, -8.0)):  # P2 (MHA - LN1): +6 at 1x, +7 at 2x, -2 at 4x
        acc = {f"{c} {k}x": a for c, a in suite_acc.items() if c != "head"}
        acc[f"MHA {k}x"] = 70 + gap
        longer += _picked("t", acc) + _picked("u", acc)
    longer += _picked("w", {"MHA 2x": 1.0, "LN1 2x": 2.0})  # w: no 4x runs yet, left out
    values = suite_findings.by_length(pd.DataFrame(longer), picked, (p1, p2))
    assert set(values["task"]) == {"t", "u"} and set(values["steps"]) == {1, 2, 4}
    p2_means = values[values["primary"] == "P2"].groupby("steps")["value"].mean()
    assert p2_means.to_dict() == {1: 6.0, 2: 7.0, 4: -2.0}
    rule = {r["claim"].removeprefix("does ")[:2]: r for r in suite_findings.length_rule(values)}
    assert rule["P2"]["verdict"].startswith("changed") and rule["P2"]["n"] == 2
    assert rule["P2"]["measured"] == "+6.00 (1x), +7.00 (2x), -2.00 (4x)"
    assert rule["P1"]["verdict"].startswith("kept")  # P1's configurations did not move


def test_p3_under_the_other_protocol_is_a_sensitivity_row_with_what_explains_its_sign(
        monkeypatch):
    """P3 is read under the declared protocol (embedding) and, as a sensitivity row, under
    hidden; the linears alone are exploratory under each; the plasticity order per protocol
    and the gain order are descriptive rows naming what ranks on top, on how many tasks."""
    from vitplast.stats import verdicts

    gains = {"MHA": 10, "FC1": 8, "FC2": 6, "LN1": 2, "LN2": 1}
    tasks = [f"t{i}" for i in range(4)]
    picked = pd.DataFrame([dict(task=t, config=c, test_acc=60 + g + i * (c == "FC2"))
                           for i, t in enumerate(tasks)
                           for c, g in {"head": 0, **gains}.items()])
    orders = {"embedding": ["LN2", "LN1", "FC1", "FC2", "MHA"],  # opposite to the gains
              "hidden": ["MHA", "FC1", "FC2", "LN2", "LN1"]}  # the gains' order

    def plasticity(root, tasks_, n_pairs, protocol):
        return pd.DataFrame([dict(task=t, component=c, plasticity=5.0 - k)
                             for t in tasks_ for k, c in enumerate(orders[protocol])])

    monkeypatch.setattr(task_measures, "component_plasticity", plasticity)
    rows = suite_findings.protocol_findings(studies.get("suite"), picked, "unused")
    table = verdicts.table(rows).set_index("claim")
    hidden = table[table["family"] == "sensitivity"]
    assert len(hidden) == 1 and "hidden protocol" in hidden.index[0]
    assert hidden["measured"].iloc[0] > 0.8 and hidden["expected"].iloc[0] == 1
    linears = table[table.index.str.contains("three linears alone")]
    assert linears["family"].tolist() == ["exploratory"] * 2
    by = {r: table.loc[[c for c in table.index if c.startswith(r)][0]] for r in (
        "plasticity before finetuning, embedding", "plasticity before finetuning, hidden",
        "gain over head-only")}
    assert by["plasticity before finetuning, embedding"]["measured"].startswith(
        "LN2 (1.0) > LN1 (2.0) > FC1 (3.0)")
    assert by["plasticity before finetuning, hidden"]["verdict"] == (
        "same as the paper; this exact order on 4 of 4 tasks")
    assert by["gain over head-only"]["measured"] == (  # FC2 ties FC1 on t2, passes it on t3
        "MHA (1.0) > FC1 (2.4) > FC2 (2.6) > LN1 (4.0) > LN2 (5.0)")
    assert (by["gain over head-only"]["family"], by["gain over head-only"]["n"]) == (
        "descriptive", 4)


def test_the_distance_trend_is_a_correlation_row_and_the_families_a_descriptive_one():
    from vitplast.stats import verdicts

    picked = pd.DataFrame(
        [dict(task=t, config=c, test_acc=a) for t, head, gap in (
            ("digits", 90.0, 1.0), ("fmnist_contrast", 80.0, 2.0), ("fmnist_snow", 70.0, 4.0),
            ("symmetry", 60.0, 8.0))
         for c, a in (("head", head), ("MHA", head + gap), ("LN1", head))])
    effects = suite_findings.by_distance(picked, suite_findings.distance(picked))
    assert effects.set_index("task")["MHA_minus_LN1"].to_dict() == {
        "digits": 1.0, "fmnist_contrast": 2.0, "fmnist_snow": 4.0, "symmetry": 8.0}
    trend, _, families = verdicts.table(suite_findings.distance_findings(effects)).to_dict(
        "records")  # the middle row: the same r without the farthest family
    assert trend["measured"] < -0.9 and trend["n"] == 4 and trend["family"] == "exploratory"
    assert families["measured"].startswith("drawn +8.0 (1), shift +3.0 (2)")
    assert families["verdict"] == "largest on drawn, smallest on digits"


def test_the_count_row_reads_how_the_trainable_count_goes_with_the_gain():
    """P3's confound, computed: on a tiny ViT the linears train far more entries than a
    LayerNorm (MHA = FC1 > FC2 > LN1 = LN2), so a gain in that order gives rho = +1 on every
    task, and the reverse order -1 on every task."""
    from helpers import tiny_vit

    from vitplast.stats import verdicts

    model = tiny_vit()
    up = {"head": 50, "MHA": 60, "FC1": 60, "FC2": 58, "LN1": 52, "LN2": 52}
    down = {"head": 50, **{c: 110 - v for c, v in up.items() if c != "head"}}
    for acc, sign in ((up, 1.0), (down, -1.0)):
        picked = pd.DataFrame(_picked("t", acc) + _picked("u", acc) + _picked("v", acc))
        row = verdicts.table(suite_findings.count_findings(picked, model)).iloc[0]
        assert row["measured"] == pytest.approx(sign) and row["n"] == 3
        assert row["claim"].startswith("Spearman(trainable count, gain over head-only)")
        assert row["family"] == "exploratory"


def test_the_distance_trend_is_read_again_without_the_farthest_family():
    """07: r = -0.52 over the suite rested on six glyph tasks (lowest head-only accuracy)."""
    from vitplast.stats import verdicts

    rng = np.random.default_rng(0)
    near = pd.DataFrame(dict(head_acc=rng.uniform(70, 95, 20), family="shift",
                             MHA_minus_LN1=rng.normal(1, 1, 20)))
    far = pd.DataFrame(dict(head_acc=rng.uniform(10, 30, 6), family="glyphs",
                            MHA_minus_LN1=rng.normal(10, 1, 6)))
    rows = verdicts.table(suite_findings.distance_findings(pd.concat([near, far]))).set_index(
        "claim")
    whole = rows.loc[[c for c in rows.index if c.startswith("Pearson r")][0]]
    without = rows.loc[[c for c in rows.index if c.startswith("the same r without the glyphs")]]
    assert whole["measured"] < -0.7 and without["n"].iloc[0] == 20
    assert abs(without["measured"].iloc[0]) < 0.5  # the trend was the glyphs'


def test_a_kept_sign_says_how_far_the_mean_moved_and_which_task_carried_it():
    """07 section 5: "Kept" hid that P2 falls from 4.24 to 2.52 points at 4x, carried by one
    task."""
    values = pd.DataFrame([dict(task=t, steps=k, primary="P2", compares="MHA minus LN1",
                                value=v) for t, vs in (("a", (4.0, 4.0, 4.0)),
                                                       ("b", (4.0, 4.0, 3.9)),
                                                       ("c", (4.0, 4.0, -0.1)))
                           for k, v in zip((1, 2, 4), vs)])
    row, = suite_findings.length_rule(values)
    assert row["verdict"] == ("kept: the 120-step recipe stands; but it shrinks from +4.00 to "
                              "+2.60 points at 4x, 98% of the tasks' change from one task (c, "
                              "-4.10)")
