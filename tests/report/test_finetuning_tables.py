"""The finetuning studies' tables (``vitplast.report.finetuning_tables``): the main table's exact
means and stds, and per-variant dynamics. LR selection: ``test_lr_selection.py``."""

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
