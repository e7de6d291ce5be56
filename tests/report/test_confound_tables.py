"""The confound study's tables (``vitplast.report.confound_tables``): per-block correlations
stay within a component and a task; the partial rank correlation is that of rank residuals;
the control rows are found by their fields; each preserved rescale is paired with its own
control, run by run."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import acc_table, tiny_vit

from vitplast.experiments import confound_variants, runs
from vitplast.report import confound_findings, confound_tables
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


def _rescale_records(table: dict, acc: dict, misnamed: dict | None = None) -> pd.DataFrame:
    """``with_variant`` results of ``table``'s variants on task digits at LRs 0.1 (seeds 0
    and 1) and 1.0 (seed 0, diverged), with and without clipping; test accuracy 0.70 but
    where ``acc`` says otherwise (name -> (clipping, seed, accuracy)); ``misnamed``: stored
    names replaced (old -> new) after the fields are set."""
    rows = []
    for clip in (1.0, 0.0):
        for lr, seed in ((0.1, 0), (0.1, 1), (1.0, 0)):
            for name, variant in table.items():
                run = runs.make_run("digits", lr=lr, seed=seed, clip_grad_norm=clip,
                                      **variant.keywords())
                value = acc.get(name, {}).get(("on" if clip else "off", seed), 0.70)
                rows.append(dict(run, status="diverged" if lr == 1.0 else "ok",
                                 test_acc=np.nan if lr == 1.0 else value))
    df = confound_variants.with_variant(pd.json_normalize(rows))
    return df.assign(variant=df["variant"].replace(misnamed or {}))


def test_rescale_pairs_compare_each_run_with_its_control_and_state_the_verdict():
    """Without clipping the preserved rescale and its control end identically in every run
    (a diverged pair counts as identical); with clipping one pair differs by 2 points."""
    table = {k: v for k, v in confound_variants.all_variants(tiny_vit(), {"LN1": 2.0}).items()
             if k in ("LN1 x 2 (preserved)", "LN1 lr/c^2 (c=2)", "LN1 x 2 (raw)")}
    df = _rescale_records(table, {"LN1 lr/c^2 (c=2)": {("on", 1): 0.72}})
    pairs = confound_tables.rescale_pairs(df).set_index("clipping")
    assert pairs["variant"].to_dict() == {"on": "LN1 x 2 (preserved)",
                                          "off": "LN1 x 2 (preserved) (no clip)"}
    assert pairs.loc["off", ["pairs", "identical"]].tolist() == [3, 3]
    assert pairs.loc["on", ["pairs", "identical"]].tolist() == [3, 2]
    assert pairs.loc["on", "max_diff"] == pytest.approx(2.0)
    grads = pd.DataFrame(columns=["task", "config", "kind", "grad_norm"])
    corr = pd.DataFrame(columns=["task", "component", "spearman", "spearman_depth"])
    t = ConfoundTables(acc=acc_table(LN1=[70.0]), counts={}, corr=corr, grads=grads,
                       rescale=pairs.reset_index(), fields=confound_variants.variant_fields(df))
    table = confound_findings.confounds(t).set_index("claim")
    off = table.loc["LN1 x 2 (preserved) (no clip) vs its lr/c^2 control, run by run (task, LR, "
                    "seed), gradient clipping off"]
    assert off["verdict"] == "equal test accuracy, as derived" and off["n"] == 3
    on = table.loc["LN1 x 2 (preserved) vs its lr/c^2 control, run by run (task, LR, seed), "
                   "gradient clipping on"]
    assert on["verdict"] == "differs, as clipping allows"
    assert on["measured"] == ("2 of 3 pairs with equal status and test accuracy, the largest "
                              "difference 2.00")


def test_rescale_pairs_match_the_control_by_fields_not_by_name():
    """Two scales whose controls carry each other's names: each rescale is paired with the
    control of its own c (read from the control's lr_scales), within a relative tolerance;
    a control of another component or clipping is never its pair."""
    table = confound_variants.all_variants(tiny_vit(), {"LN1": 2.0, "LN2": 3.0})
    table = {k: v for k, v in table.items() if "preserved" in k or "lr/c^2" in k}
    table["LN1 lr/c^2 (c=3)"] = confound_variants.Variant("LN1 lr/c^2 (c=3)", "lr/c^2", "LN1",
                                                  c=3.0 * (1 + 1e-9))
    table["LN1 x 3 (preserved)"] = confound_variants.Variant(
        "LN1 x 3 (preserved)", "rescale", "LN1", c=3.0, preserve=True)
    acc = {"LN1 lr/c^2 (c=3)": {("on", 0): 0.50}, "LN2 lr/c^2 (c=3)": {("on", 1): 0.60}}
    swap = {"LN1 lr/c^2 (c=2)": "LN1 lr/c^2 (c=3)", "LN1 lr/c^2 (c=3)": "LN1 lr/c^2 (c=2)"}
    df = _rescale_records(table, acc, misnamed=swap)
    pairs = confound_tables.rescale_pairs(df).set_index(["variant", "clipping"])
    assert pairs["identical"].to_dict() == {
        ("LN1 x 2 (preserved)", "on"): 3, ("LN1 x 3 (preserved)", "on"): 2,
        ("LN2 x 3 (preserved)", "on"): 2, ("LN1 x 2 (preserved) (no clip)", "off"): 3,
        ("LN1 x 3 (preserved) (no clip)", "off"): 3, ("LN2 x 3 (preserved) (no clip)", "off"): 3}
    assert set(pairs["pairs"]) == {3}
    assert pairs.loc[("LN1 x 3 (preserved)", "on"), "max_diff"] == pytest.approx(20.0)
    assert pairs.loc[("LN2 x 3 (preserved)", "on"), "max_diff"] == pytest.approx(10.0)
