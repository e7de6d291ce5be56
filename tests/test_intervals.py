"""Intervals: lower <= bound for Props. 1-4 on random weights and on random models, every column
documented; Takeaway 1's rankings compare as stated."""

import pandas as pd
import pytest
import torch
from conftest import tiny_vit

from vitplast import intervals, plasticity


def stressed(model, scale=8.0):
    """A tiny ViT whose attention is far from uniform (timm's init makes it almost linear)."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(scale)
            block.attn.qkv.bias.normal_()
    return model


# Random weights
def test_random_checks_all_hold():
    df = intervals.random_checks(n_seeds=2, n_pairs=16, power_iters=10)
    assert len(df) == 8 and set(df.proposition) == {"P1", "P2", "P3", "P4"}
    assert df.bound_holds.all()
    assert (df.max_rate >= df.plasticity).all()
    p1 = df[df.proposition == "P1"]
    assert (p1.local_lipschitz > 0.9 * p1.bound).all()  # P1 is nearly attained


# Intervals on a model
@pytest.mark.parametrize("protocol", plasticity.PROTOCOLS)
def test_intervals_bounds_hold_on_random_models(images, protocol):
    x, y = images
    for seed in range(2):
        df = intervals.intervals(stressed(tiny_vit(seed=seed)), x, y, protocol=protocol,
                                 n_lipschitz=4, power_iters=10)
        assert list(df.columns) == intervals._COLUMNS
        assert all(f"``{c}``" in intervals.__doc__ for c in df.columns)  # every column documented
        assert len(df) == 10 and (df.protocol == protocol).all()
        assert (df.max_rate >= df.plasticity).all() and (df.lower >= df.max_rate).all()
        assert df.bound_holds.all()
        assert (df.lower <= df.bound * (1 + 1e-5)).all()  # local Lipschitz too
        mha = df[df.component == "MHA"]
        assert mha.tight_holds.all() and mha.bound_tight.notna().all()
        assert mha.r_max.ge(mha.r_rms).all() and (mha.bound >= mha.bound_rms).all()
        ln = df[df.component.isin(["LN1", "LN2"])]
        assert ln.sigma.le(ln.sigma_mean).all() and ln.r_max.isna().all()
        assert df[df.component != "MHA"].tight_holds.isna().all()


def test_intervals_accept_pairs_dataset(images):
    x, y = images
    model = tiny_vit()
    a = intervals.intervals(model, x, y, n_lipschitz=2, power_iters=3)
    b = intervals.intervals(model, plasticity.make_pairs(x, y, n_pairs=24), n_lipschitz=2,
                            power_iters=3)
    pd.testing.assert_frame_equal(a, b)
    text = intervals.what_this_shows(a, intervals.random_checks(1, n_pairs=8, power_iters=2))
    assert "P1 on random weights" in text and "Ranking measured" in text


def test_rankings():
    comps = ["LN1", "MHA", "LN2", "FC1", "FC2"]
    df = pd.DataFrame(dict(protocol="hidden", layer=[0] * 5 + [1] * 5, component=comps * 2,
                           plasticity=[0.3, 7, 0.5, 4, 2] * 2, bound=[1, 50, 2, 9, 8] * 2))
    theory = intervals.theoretical_ranking(df)
    assert list(theory.component) == ["MHA", "FC1", "FC2", "LN2", "LN1"]
    assert list(theory.columns) == ["protocol", "component", "bound", "rank"]
    cmp = intervals.compare_rankings(df)
    assert cmp.attrs["match"] and cmp.attrs["kendall_tau"] == pytest.approx(1.0)
    assert cmp.attrs["theory"] == "MHA > FC1 > FC2 > LN2 > LN1"
    df.loc[df.component == "LN1", "bound"] = 100
    cmp = intervals.compare_rankings(df)
    assert not cmp.attrs["match"] and cmp.attrs["theory"].startswith("LN1")
    assert set(cmp.columns) >= {"rank_measured", "rank_bound", "plasticity", "bound"}
