"""The confound study's tables (``vitplast.report.confound_tables``): per-block correlations
stay within a component and a task; the partial rank correlation is that of rank residuals;
the control rows are found by their fields."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import acc_table, tiny_vit

from vitplast.experiments import confound_variants
from vitplast.report import confound_tables
from vitplast.report.confound_tables import ConfoundTables, partial_correlation


def test_layer_correlations_stay_within_component_and_task():
    """Accuracy rises with plasticity over LN1's blocks on t0 and falls on t1; MHA's blocks
    are incomplete on t0 (one block lacks a run) and are left out, never pooled. A column's
    component and block are its variant's fields (one named otherwise is still LN1's block
    2); a column of another family is no block."""
    layers = pd.DataFrame([dict(task=t, layer=k, component=c, plasticity=float(k + 1), ci95=0.1)
                           for t in ("t0", "t1") for c in ("LN1", "MHA") for k in range(3)])
    acc = acc_table(**{f"LN1 block {k}": [70.0 + k, 70.0 - k] for k in range(3)},
                    **{f"MHA block {k}": [60.0 + k if k < 2 else np.nan, (50.0, 52.0, 51.0)[k]]
                       for k in range(3)}, **{"MHA block 9": [99.0, 1.0]})
    renamed = {"LN1 block 2": "LN1, the last block"}
    acc = acc.rename(columns=renamed)
    fields = confound_variants.catalogue(
        confound_variants.layer_variants(tiny_vit(depth=3), ("LN1", "MHA")))
    fields = pd.concat([fields.rename(index=renamed), confound_variants.catalogue(
        {"MHA block 9": confound_variants.Variant("MHA block 9", "sparse", "MHA", count=9)})])
    long = confound_tables.layer_accuracy(acc, layers, fields)
    assert len(long) == 11 and long.set_index(["task", "component", "layer"]).loc[
        ("t0", "LN1", 2), "test_acc"] == 72.0
    table = confound_tables.layer_correlations(acc, layers, fields).set_index(
        ["task", "component"])
    assert table["spearman"].to_dict() == pytest.approx({("t0", "LN1"): 1.0, ("t1", "LN1"): -1.0,
                                                         ("t1", "MHA"): 0.5})
    # plasticity rises with the block index here, so earliness goes against it and accuracy
    assert table["plasticity_depth"].tolist() == [-1.0] * 3
    assert table["spearman_depth"].to_dict() == pytest.approx(
        {("t0", "LN1"): -1.0, ("t1", "LN1"): 1.0, ("t1", "MHA"): -0.5})


def test_partial_rank_correlation_is_the_correlation_of_rank_residuals():
    """Spearman partial on z == Pearson correlation of the ranks of x and y after regressing
    each on the ranks of z; NaN when x is monotone in z."""
    from scipy import stats

    rng = np.random.default_rng(5)
    x, y, z = rng.normal(size=(3, 6))
    rx, ry, rz = (stats.rankdata(v) for v in (x, y, z))
    res = [r - np.polyval(np.polyfit(rz, r, 1), rz) for r in (rx, ry)]
    rho = lambda a, b: stats.spearmanr(a, b).statistic  # noqa: E731
    assert partial_correlation(rho(x, y), rho(x, z), rho(y, z)) == pytest.approx(
        np.corrcoef(*res)[0, 1])
    assert math.isnan(partial_correlation(0.5, 1.0, 0.3))


def test_controls_show_the_rows_the_control_findings_compare():
    """Section 4 of notebook 05: MHA and LN1 plain, from init and under AdamW, found by their
    fields (a renamed variant still found), every other variant left to ``t.acc``."""
    base = confound_variants.catalogue(
        confound_variants.all_variants(tiny_vit(depth=2), {"LN1": 2.0})).assign(
        optimizer="sgd", checkpoint="final")
    plain = base.loc[["MHA", "LN1"]]
    fields = pd.concat([base, plain.assign(checkpoint="init").rename(index={
        "MHA": "attention from scratch", "LN1": "LN1 (init)"}), plain.assign(
        optimizer="adamw").rename(index=lambda n: f"{n} (AdamW)")])
    acc = pd.DataFrame({name: [1.0, 2.0] for name in fields.index},
                       index=pd.Index(["t0", "t1"], name="task"))
    shown = confound_tables.controls(ConfoundTables(fields=fields, acc=acc, counts={},
                                                    corr=pd.DataFrame(), grads=pd.DataFrame()))
    assert shown.index.tolist() == ["MHA", "LN1", "attention from scratch", "LN1 (init)",
                                    "MHA (AdamW)", "LN1 (AdamW)"] and len(acc.columns) > 6
