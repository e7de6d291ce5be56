"""Finetuning a gauged network beside the original (``vitplast.train.invariance``): where no
gauged parameter trains the two runs are one trajectory; where one does, the original with
that parameter's LR / c^2 and no clip is the same run (``invariance.finetuning_equivalence``)."""

import pytest

from vitplast.train import invariance


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    return tmp_path


def test_the_gauge_keeps_a_trajectory_where_derived_and_is_read_once(cache):
    inv = invariance.finetuning_invariance(task="digits", configs=("FC1", "MHA"), c=8.0,
                                           steps=3, batch_size=4).set_index("config")
    assert set(inv.columns) >= {"vs_original", "max_grad_norm", "vs_lr_scaled_clip",
                                "vs_lr_scaled_noclip"}
    assert inv.loc["FC1", "vs_original"] < 5e-3  # FC1 reads LN2's output: nothing it trains moves
    assert inv.loc["FC1", ["vs_lr_scaled_clip", "vs_lr_scaled_noclip"]].isna().all()
    assert inv.loc["MHA", "vs_lr_scaled_noclip"] < 5e-3  # MHA's proj is gauged: LR / c^2
    assert inv.loc["MHA", "vs_original"] > 10 * inv.loc["MHA", "vs_lr_scaled_noclip"]
    stored = list((cache / "results").glob("gauge-finetuning-*.npz"))
    assert len(stored) == 1
    again = invariance.finetuning_invariance(task="digits", configs=("FC1", "MHA"), c=8.0,
                                             steps=3, batch_size=4).set_index("config")
    assert again.equals(inv) and list((cache / "results").glob("gauge-finetuning-*.npz")) == stored
