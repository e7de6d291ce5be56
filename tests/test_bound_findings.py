"""Notebook 03's findings (``vitplast.bound_findings``): every verdict follows from the numbers,
on synthetic tables where everything agrees with the paper or everything fails, and on a tiny
model; the layer medians and means are both stated where an order rests on them."""

import math

import pandas as pd
from helpers import tiny_vit

from vitplast import bound_findings, findings, intervals


def synthetic(agree: bool):
    """An intervals table and random checks where everything agrees with the paper, or where
    every claim fails (a bound below an observed rate, Prop. 4 looser, tokens not sharing
    sigma, the bounds in the opposite order of plasticity)."""
    comps = ["LN1", "MHA", "LN2", "FC1", "FC2"]
    plast = [0.3, 7.0, 0.5, 4.0, 2.0]
    bound = [1.0, 50.0, 2.0, 9.0, 8.0] if agree else [100.0, 0.1, 50.0, 3.0, 8.0]
    df = pd.DataFrame(dict(protocol="hidden", layer=[0] * 5 + [1] * 5, component=comps * 2,
                           plasticity=plast * 2, max_rate=[1.2 * p for p in plast] * 2,
                           bound=bound * 2))
    df["lipschitz_lower"] = df.max_rate
    mha = df.component == "MHA"
    df["bound_p4"] = df.bound.where(mha) * (0.5 if agree else 2.0)
    df["plugin"] = df.bound * (0.9 if agree else 0.1)
    df["lipschitz_upper"] = df[["bound", "bound_p4"]].min(axis=1)
    df["width"] = df.lipschitz_upper / df.lipschitz_lower
    df["sigma_cv"] = (0.01 if agree else 0.3)
    df.loc[~df.component.isin(["LN1", "LN2"]), "sigma_cv"] = math.nan
    checks = pd.DataFrame(dict(proposition=["P1", "P2", "P3", "P4"], bound=[2.0, 3.0, 9.0, 5.0],
                               lipschitz_lower=[1.9, 3.0, 1.0, 1.0 if agree else 6.0]))
    return df, checks


def test_bounds_findings_follow_from_the_numbers():
    good = bound_findings.bounds(*synthetic(agree=True)).set_index("claim")["verdict"]
    bad = bound_findings.bounds(*synthetic(agree=False)).set_index("claim")["verdict"]
    assert list(good.index) == list(bad.index) and len(good) == 15
    assert good.str.startswith("holds in all").sum() == 5
    violated = bad[bad.str.startswith("violated in")].index
    assert [c.split(" >=")[0] for c in violated] == ["every bound", "Prop. 2", "Prop. 3", "Prop. 4"]
    assert bad[bad.index.str.startswith("every bound")].iloc[0] == "violated in 1 of 4 cases"
    for claim in good.index:
        if "Takeaway 1" in claim:
            assert good[claim].startswith("same as the paper (untested)")
            assert bad[claim].startswith("differs from the paper (untested)")
        elif "vs order of measured plasticity" in claim:
            assert (good[claim], bad[claim]) == ("same order", "different order")
    assert good["Prop. 4 below Prop. 3 for MHA"] == "Prop. 4 smaller in every layer"
    assert bad["Prop. 4 below Prop. 3 for MHA"] == "Prop. 4 larger in 2 of 2 layers"
    assert good["tokens of a LayerNorm's input share sigma"].startswith("assumption holds")
    assert bad["tokens of a LayerNorm's input share sigma"].startswith("assumption fails")
    plug = [c for c in good.index if "plug-in values (" in c][0]
    assert good[plug] == "above every observed rate" and bad[plug].endswith("not a bound")


def test_bounds_findings_on_a_model_render(images):
    df = intervals.intervals(tiny_vit(), *images, n_lipschitz=2, power_iters=3, progress=False)
    table = bound_findings.bounds(df, intervals.random_checks(1, n_pairs=8, power_iters=2))
    assert table.test.eq("none").all() and len(findings.render(table).splitlines()) == len(table)
    proven = table[table.claim.str.contains(">= the lower end")]
    assert (proven.verdict.str.startswith("holds in all")).all()
    assert list(proven.n) == [4, 4, 4, 2, 2]


def _intervals(ln1_layer0_bound: float, ln1_layer0_plasticity: float = 3.0) -> pd.DataFrame:
    """Three layers; layer 0's LN1 bound set by one small-sigma token."""
    base = dict(MHA=(3.0, 0.7), FC1=(2.5, 0.65), FC2=(2.2, 0.62), LN2=(1.5, 0.61), LN1=(1.4, 0.6))
    rows = [dict(layer=layer, component=c, bound=b, plasticity=p)
            for layer in range(3) for c, (b, p) in base.items()]
    df = pd.DataFrame(rows)
    df.loc[(df.layer == 0) & (df.component == "LN1"), ["bound", "plasticity"]] = \
        [ln1_layer0_bound, ln1_layer0_plasticity]
    return df


def test_medians_and_means_of_layers_are_both_stated_where_an_order_rests_on_them():
    rows = {r["claim"]: r for r in bound_findings._median_rows(_intervals(14.47))}
    bounds = rows["order of the proven bounds (Props. 1-3), layer MEDIANS, vs Takeaway 1"]
    assert bounds["measured"] == "MHA > FC1 > FC2 > LN2 > LN1"
    assert bounds["verdict"].startswith("same as the paper") and "another order" in \
        bounds["verdict"]  # the means put LN1 first: the verdict depends on the average
    plast = rows["order of measured plasticity: layer means vs layer MEDIANS"]
    assert plast["measured"] == ("means LN1 > MHA > FC1 > FC2 > LN2; "
                                 "medians MHA > FC1 > FC2 > LN2 > LN1")
    assert plast["verdict"] == "the order depends on the average (mean vs median over layers)"
    calm = {r["claim"]: r for r in bound_findings._median_rows(_intervals(1.4, 0.6))}
    assert calm["order of measured plasticity: layer means vs layer MEDIANS"]["verdict"] == \
        "same order"
