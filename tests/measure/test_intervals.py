"""Intervals: the lower end <= Lip(f) <= the bounds for Props. 1-4 on random weights and on
random models, every column documented; Takeaway 1's rankings compare as stated. Notebook 03's
findings: ``test_bound_findings.py``."""

import math

import pandas as pd
import pytest
import torch
from helpers import tiny_vit

from vitplast.measure import intervals, pairs
from vitplast.report import bound_findings


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
    assert len(df) == 8 and set(df.proposition) == {"Prop. 1", "Prop. 2", "Prop. 3", "Prop. 4"}
    assert df.bound_holds.all() and (df.width >= 1 - 1e-5).all()
    assert (df.max_rate >= df.plasticity).all()
    p1 = df[df.proposition == "Prop. 1"]
    assert (p1.local_lipschitz > 0.9 * p1.bound).all()  # Prop. 1 is nearly attained


# Intervals on a model
@pytest.mark.parametrize("protocol", pairs.PROTOCOLS)
def test_intervals_bracket_lipschitz_on_random_models(images, protocol):
    x, y = images
    for seed in range(2):
        df = intervals.intervals(stressed(tiny_vit(seed=seed)), x, y, protocol=protocol,
                                 n_lipschitz=4, power_iters=10, progress=False)
        assert list(df.columns) == intervals._COLUMNS
        assert all(f"``{c}``" in intervals.__doc__ for c in df.columns)  # every column documented
        assert len(df) == 10 and (df.protocol == protocol).all()
        # plasticity <= max_rate <= lower end <= upper end <= each proven bound
        assert (df.max_rate >= df.plasticity).all() and (df.lipschitz_lower >= df.max_rate).all()
        assert df.bound_holds.all()
        assert (df.lipschitz_lower <= df.lipschitz_upper * (1 + 1e-5)).all()  # local Lipschitz too
        assert (df.lipschitz_upper <= df.bound).all() and (df.width >= 1 - 1e-5).all()
        assert (df[df.component.isin(["FC1", "FC2"])].width < 1.05).all()  # notebook 03 says ~1
        mha = df[df.component == "MHA"]
        assert mha.p4_holds.all() and mha.bound_p4.notna().all()
        assert (mha.lipschitz_upper == mha[["bound", "bound_p4"]].min(axis=1)).all()
        assert mha.r_max.ge(mha.r_rms).all() and (mha.bound >= mha.plugin).all()
        ln = df[df.component.isin(["LN1", "LN2"])]
        assert ln.sigma.le(ln.sigma_mean).all() and ln.r_max.isna().all()
        assert df[df.component != "MHA"].p4_holds.isna().all()


def test_holds_compares_the_bounds_with_the_lower_end(images, monkeypatch):
    """bound_holds and p4_holds mean what random_checks and bound_findings.bounds mean: the bound is
    at least lipschitz_lower (the Jacobian estimate included, not only max_rate); plugin_holds
    compares the plug-in value with max_rate."""
    model = tiny_vit()
    df = intervals.intervals(model, *images, n_lipschitz=2, power_iters=3, progress=False)
    monkeypatch.setattr(intervals.bounds, "local_lipschitz",
                        lambda f, x, iters: torch.full((len(x),), 1e9))
    high = intervals.intervals(model, *images, n_lipschitz=2, power_iters=3, progress=False)
    assert df.bound_holds.all() and (high.lipschitz_lower == 1e9).all()
    assert not high.bound_holds.any() and not high.p4_holds.any()
    assert high.p4_holds.isna().equals(df.p4_holds.isna())
    assert high.plugin_holds.equals(df.plugin_holds)
    proven = bound_findings.bounds(high, intervals.random_checks(1, n_pairs=8, power_iters=2))
    proven = proven[proven.claim.str.contains("on the model")]
    assert proven.verdict.str.startswith("no: the bound was below the lower end in").all()
    assert len(proven) == 4
    bound = pd.Series([1.0, 1.0, math.nan])
    assert intervals.holds(bound, pd.Series([1.0 + 1e-6, 1.1, 1.0])).tolist() == [True, False,
                                                                                 pd.NA]


def test_intervals_accept_pairs_dataset(images):
    x, y = images
    model = tiny_vit()
    a = intervals.intervals(model, x, y, n_lipschitz=2, power_iters=3, progress=False)
    b = intervals.intervals(model, pairs.make_pairs(x, y, n_pairs=24), n_lipschitz=2,
                            power_iters=3, progress=False)
    pd.testing.assert_frame_equal(a, b)


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


def test_cached_tables_are_computed_once_per_key(tmp_path, monkeypatch):
    """Notebook 03's tables read back from the cache equal the computed ones; another key
    computes again."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return intervals.random_checks(1, n_pairs=8, power_iters=2)

    first = intervals.cached("random-checks", dict(n_seeds=1), compute)
    again = intervals.cached("random-checks", dict(n_seeds=1), compute)
    pd.testing.assert_frame_equal(first, again, check_dtype=False)
    assert len(calls) == 1 and list(tmp_path.rglob("intervals-random-checks-*.npz"))
    intervals.cached("random-checks", dict(n_seeds=2), compute)
    assert len(calls) == 2


def test_notebooks_03_and_03b_read_their_tables_of_the_embedded_model_from_data(monkeypatch):
    """A fresh clone computes none of 03's and 03b's tables (random checks and intervals in
    03; the same intervals and the gauged ones in 03b) in the default and smoke profiles: each
    is kept in data/finetune for exactly the key the notebook builds, read without computing."""
    from vitplast import cached
    from vitplast.course import notebooks
    from vitplast.course.parameters import kept_folder

    def computed(*args, **kwargs):
        raise AssertionError("not stored: the notebook would compute it on a fresh clone")

    monkeypatch.setattr(cached, "_computed", computed)
    for profile in ("default", "smoke"):
        for name in ("03_bounds", "03b_intervals"):
            p = {**notebooks.notebook_parameters(name), **notebooks.PROFILES[profile].get(name, {})}
            kept = kept_folder(p["measured_dir"], p["model_name"])
            measured = dict(model=p["model_name"], checkpoint=p["checkpoint"],
                            weights_file=p["weights_file"], task=p["task"], source=p["source"],
                            data_root=p["data_root"], n_pairs=p["n_pairs"],
                            protocol=p["protocol"])
            df = intervals.cached("intervals", dict(measured, n_lipschitz=p["n_lipschitz"],
                                                    power_iters=p["power_iters"]), None, root=kept)
            assert len(df)
            if name == "03_bounds":
                checks = intervals.cached("random-checks", dict(
                    n_seeds=p["n_seeds"], power_iters=p["power_iters"]), None, root=kept)
                assert checks.seed.nunique() == p["n_seeds"]
            else:
                gauged = intervals.cached("gauged", dict(measured, c=p["gauge_c"]), None,
                                          root=kept)
                assert len(gauged)
