"""LR selection (``vitplast.lr_selection``): the LR is chosen on validation, and failed and
diverged runs are missing (never zeros)."""

import pandas as pd
import pytest
from helpers import run_row

from vitplast import lr_selection

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
