"""LR selection (``vitplast.experiments.lr_selection``): the LR is chosen on validation, failed and
diverged runs are missing (never zeros) and a tie on accuracy is broken by the loss and
reported."""


import pandas as pd
import pytest
from helpers import run_row, tie_runs

from vitplast.experiments import lr_selection

NAN = float("nan")


def test_select_lr_on_validation_not_test():
    rows = [  # 1e-2 is better on validation, 1e-3 on test
        run_row(lr=1e-2, seed=0, val=0.90, test=0.70),
        run_row(lr=1e-3, seed=0, val=0.80, test=0.95),
        run_row(lr=1e-2, seed=1, val=0.92, test=0.72),
        run_row(lr=1e-3, seed=1, val=0.82, test=0.97),
        # missing, not zero nor one:
        run_row(lr=3e-2, seed=0, status="diverged", val=1.0, test=NAN),  # val before diverging
        run_row(lr=1e-2, seed=2, status="failed", val=NAN, test=0.0)]
    df = pd.DataFrame(rows)
    by_val = lr_selection.select_lr(df)
    assert by_val[["task", "config", "lr", "n_seeds", "selected_on"]].values.tolist() == [
        ["digits", "MHA", 1e-2, 2, "val"]]
    assert by_val["selection_score"][0] == pytest.approx(0.91)
    by_test = lr_selection.select_lr(df, on="test")
    assert by_test["lr"].tolist() == [1e-3] and by_test["selected_on"].tolist() == ["test"]
    assert by_test["selection_score"][0] == pytest.approx(0.96)
    with pytest.raises(ValueError, match="'val' or 'test'"):
        lr_selection.select_lr(df, on="train")
    # an extra config key given to some runs only (None elsewhere) is one more setting
    df["ablation.c"] = [None, None, None, None, 2.0, None]
    assert lr_selection.select_lr(df)["ablation.c"].isna().tolist() == [True]  # 2.0: diverged only
    df.loc[4, "status"] = "ok"
    assert lr_selection.select_lr(df)[["lr", "ablation.c"]].fillna(0).values.tolist() == [
        [3e-2, 2.0], [1e-2, 0]]


def test_lr_ties_go_to_the_lower_validation_loss():
    df = tie_runs(0.81)
    chosen = lr_selection.select_lr(df).set_index(["task", "config"])
    assert chosen.loc[("t0", "A"), "lr"] == 1.0 and chosen.loc[("t0", "A"), "tied"] == 1
    assert chosen.loc[("t1", "A"), "lr"] == 0.1 and chosen.loc[("t1", "A"), "tied"] == 0
    assert len(lr_selection.lr_ties(df)) == 1
    alt = lr_selection.tie_alternatives(df)
    assert len(alt) == 1
    chosen = lr_selection.select_lr(alt[0]).set_index(["task", "config"])
    assert chosen.loc[("t0", "A"), "lr"] == 0.1


def test_runtime_knobs_never_split_a_setting():
    """Runs of one setting made on a GPU (precision recorded) and on a CPU (none) are one
    setting: their LR is chosen together."""
    df = pd.DataFrame(dict(task="a", config="MHA", lr=[0.1, 0.1, 1.0, 1.0], seed=[0, 1, 0, 1],
                           status="ok", best_val_acc=[0.9, 0.8, 0.5, 0.5], test_acc=0.5,
                           precision=["fp32", None, "fp32", None], workers=[0, 4, 0, 4]))
    chosen = lr_selection.select_lr(df)
    assert len(chosen) == 1 and chosen.loc[0, "n_seeds"] == 2
