"""The finetuning studies' tables (``vitplast.report.finetuning_tables``): the main table's exact
means and stds, per-variant dynamics, and the LR bands around the best LR as documented. LR
selection: ``test_lr_selection.py``."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import TINY, run_row

from vitplast.experiments import confound_variants, results, runs
from vitplast.experiments.store import Store
from vitplast.report import finetuning_tables

NAN = float("nan")


def test_main_table_mean_and_std_over_seeds_are_exact():
    test = {("a", "MHA"): [0.90, 0.92, 0.94], ("a", "LN1"): [0.80, 0.81, 0.85],
            ("b", "MHA"): [0.60, 0.70, 0.80], ("b", "LN1"): [0.50, 0.50, 0.56]}
    rows = []
    for (task, config), accs in test.items():
        for seed, acc in zip((0, 42, 3407), accs):
            rows.append(run_row(task, config, lr=1e-2, seed=seed, val=0.9, test=acc))
            # worse on validation:
            rows.append(run_row(task, config, lr=1e-3, seed=seed, val=0.1, test=1.0))
    # missing, not zero:
    rows.append(run_row("b", "LN1", lr=1e-2, seed=7, status="diverged", val=0.99, test=NAN))
    table = finetuning_tables.main_table(pd.DataFrame(rows))
    assert table["task"].tolist() == ["a", "a", "b", "b", "average", "average"]
    for (task, config), accs in test.items():
        row = table[(table.task == task) & (table.config == config)].iloc[0]
        assert row["lr"] == 1e-2 and row["n_seeds"] == 3 and row["selected_on"] == "val"
        assert row["lr_at_edge"]  # 1e-2 is the largest LR of a two-point grid
        assert row["test_acc_mean"] == pytest.approx(100 * np.mean(accs), abs=1e-12)
        assert row["test_acc_std"] == pytest.approx(100 * np.std(accs), abs=1e-12)
    average = table[table.task == "average"].set_index("config")["test_acc_mean"]
    assert average["MHA"] == pytest.approx(50 * (np.mean(test["a", "MHA"]) + 0.7))
    assert average["LN1"] == pytest.approx(50 * (np.mean(test["a", "LN1"]) + 0.52))
    sample = finetuning_tables.main_table(pd.DataFrame(rows), ddof=1)
    assert sample["test_acc_std"][0] == pytest.approx(100 * np.std(test["a", "LN1"], ddof=1))
    worst = [{**r, "lr": 1e-1, "best_val_acc": 0.0, "test_acc": 0.0} for r in rows]
    middle = finetuning_tables.main_table(pd.DataFrame(rows + worst))
    assert not middle[middle.task != "average"]["lr_at_edge"].any()  # 1e-2 of 1e-3..1e-1
    # a configuration whose runs on one task all failed: that task is NaN, so is its average
    rows = [{**r, "status": "failed"} if (r["task"], r["config"]) == ("b", "MHA") else r
            for r in rows]
    table = finetuning_tables.main_table(pd.DataFrame(rows), on="test")  # picks 1e-3 (test 100%)
    assert table["selected_on"].eq("test").all()
    row = table[(table.task == "b") & (table.config == "MHA")].iloc[0]
    assert math.isnan(row["test_acc_mean"]) and math.isnan(row["lr"])
    average = table[table.task == "average"].set_index("config")["test_acc_mean"]
    assert math.isnan(average["MHA"]) and average["LN1"] == pytest.approx(100.0)


def test_dynamics_follow_each_variant_at_its_own_lr(tmp_path):
    """Variants sharing a configuration (plain MHA, sparse MHA) are selected separately, and
    each run's gradient norms are read on the component it trains."""

    def record(config, lr, val, ablation=None):
        c = runs.make_run("digits", config, lr=lr, **TINY, **(
            {"ablation": ablation} if ablation else {}))
        history = [{"step": 0, "loss": 1.0, "grad_norm/MHA": 10 * lr, "grad_norm/FC1": 20 * lr,
                    "grad_norm_per_param/MHA": lr, "grad_norm_per_param/FC1": 2 * lr}]
        Store(tmp_path).save(c, dict(status="ok", history=history, best_val_acc=val,
                                     test_acc=val))

    record("MHA", 0.1, 0.9), record("MHA", 1.0, 0.5)
    sparse = dict(variant="MHA sparse", component="MHA", count=5)
    record("MHA", 0.1, 0.5, sparse), record("MHA", 1.0, 0.9, sparse)
    bias = dict(variant="FC1 bias", component="FC1")
    fc1_bias = ["blocks.*.mlp.fc1.bias"]
    record(fc1_bias, 0.1, 0.9, bias), record(fc1_bias, 1.0, 0.1, bias)
    df = confound_variants.with_variant(results.records_table(tmp_path))
    dyn = finetuning_tables.dynamics(df, results.history(tmp_path))
    norms = finetuning_tables.component_grad_norms(dyn)
    got = {(r.variant, r.kind): (r.lr, r.value) for r in norms.itertuples()}
    assert got == {("MHA", "total"): (0.1, 1.0), ("MHA", "per parameter"): (0.1, 0.1),
                   ("MHA sparse", "total"): (1.0, 10.0),
                   ("MHA sparse", "per parameter"): (1.0, 1.0),
                   ("FC1 bias", "total"): (0.1, 2.0), ("FC1 bias", "per parameter"): (0.1, 0.2)}


def test_lr_bands_are_exact_on_a_known_curve():
    """Accuracy 90 at lr 0.1, 89.5 at 0.03 and 0.3, 87 at 0.01 and 1, chance (diverged) at 3:
    within 1 point the band runs from 0.03 to 0.3 and beyond, to where the line crosses 89."""
    lrs = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    acc = [0.87, 0.895, 0.90, 0.895, 0.87, None]
    df = pd.DataFrame(dict(task="a", config="MHA", lr=lrs, seed=0,
                           status=["ok"] * 5 + ["diverged"], best_val_acc=acc))
    bands = finetuning_tables.lr_bands(df).set_index("delta")
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
    wide = finetuning_tables.lr_bands(df, within=(5.0,)).iloc[0]
    assert not wide["bracketed"] and math.isnan(wide["width"])  # the band reaches lr 0.01
