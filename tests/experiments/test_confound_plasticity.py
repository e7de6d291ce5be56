"""The confound study's plasticity (``vitplast.experiments.confound_plasticity``): per-block
correlations stay within a component and a task; plasticity after finetuning is measured on the
trained model, once; the partial rank correlation is that of rank residuals."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import acc_table, tiny_vit

from vitplast import cached
from vitplast.experiments import confound_plasticity, confound_variants
from vitplast.experiments.confound_plasticity import partial_correlation, plasticity_after


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
    long = confound_plasticity.layer_accuracy(acc, layers, fields)
    assert len(long) == 11 and long.set_index(["task", "component", "layer"]).loc[
        ("t0", "LN1", 2), "test_acc"] == 72.0
    table = confound_plasticity.layer_correlations(acc, layers, fields).set_index(
        ["task", "component"])
    assert table["spearman"].to_dict() == pytest.approx({("t0", "LN1"): 1.0, ("t1", "LN1"): -1.0,
                                                         ("t1", "MHA"): 0.5})
    # plasticity rises with the block index here, so earliness goes against it and accuracy
    assert table["plasticity_depth"].tolist() == [-1.0] * 3
    assert table["spearman_depth"].to_dict() == pytest.approx(
        {("t0", "LN1"): -1.0, ("t1", "LN1"): 1.0, ("t1", "MHA"): -0.5})


def test_plasticity_after_finetuning_is_measured_on_the_trained_model(tmp_path):
    """Head-only finetuning leaves the backbone, hence every component's plasticity, exactly
    as it was; finetuning MHA changes MHA's. Each is measured once (then read)."""
    from vitplast.experiments import runs

    kw = dict(lr=0.5, seed=0, steps=3, warmup_steps=1, eval_every=3)
    head = plasticity_after(runs.make_run("digits", "head", **kw), tmp_path, 8)
    assert (head["before"] == head["after"]).all() and len(head) == 5
    mha = plasticity_after(runs.make_run("digits", "MHA", **kw), tmp_path, 8)
    assert mha.set_index("component").loc["MHA", "ratio"] != 1.0
    assert len(list(tmp_path.glob("after-*.json"))) == 2
    again = plasticity_after(runs.make_run("digits", "MHA", **kw), tmp_path, 8,
                                       compute=False)
    pd.testing.assert_frame_equal(again, mha)
    missing = runs.make_run("digits", "LN1", **kw)
    assert plasticity_after(missing, tmp_path, 8, compute=False).empty


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


def test_per_block_plasticity_is_stored_once_per_protocol(tmp_path, monkeypatch):
    """One companion file per protocol (the declared one's name, hence the shipped file, is
    unchanged); a second call reads them; the correlations are computed per protocol, never
    pooled across them."""
    from vitplast.measure import empirical

    calls = []

    def fake(tasks, *, protocol, n_pairs):
        calls.append(protocol)
        k = 1.0 if protocol == "hidden" else -1.0  # embedding: plasticity falls with depth
        return pd.DataFrame([dict(task=t, layer=b, component="LN1", plasticity=2.0 + k * b,
                                  ci95=0.1) for t in tasks for b in range(3)])

    monkeypatch.setattr(empirical, "embedded_layers", fake)
    layers = confound_plasticity.layer_plasticity(tmp_path, ["t0", "t1"], n_pairs=8)
    again = confound_plasticity.layer_plasticity(tmp_path, ["t0", "t1"], n_pairs=8)
    assert calls == ["hidden", "embedding"] and layers.equals(again)
    assert sorted(p.name for p in tmp_path.glob("layers-*.json")) == sorted(
        f"layers-{cached.config_hash(dict(tasks=['t0', 't1'], n_pairs=8, protocol=p))}.json"
        for p in ("hidden", "embedding"))
    shipped = dict(tasks=["fmnist_contrast", "digits", "fmnist_snow"], n_pairs=256,
                   protocol="hidden")
    assert cached.config_hash(shipped) == "bb545ec5b26b373a"  # data/confounds' declared file
    acc = acc_table(**{f"LN1 block {k}": [70.0 + k, 70.0 + k] for k in range(3)})
    fields = confound_variants.catalogue(
        confound_variants.layer_variants(tiny_vit(depth=3), ("LN1",)))
    corr = confound_plasticity.layer_correlations(acc, layers, fields).set_index(
        ["protocol", "task"])
    assert corr["spearman"].to_dict() == pytest.approx({
        ("hidden", "t0"): 1.0, ("hidden", "t1"): 1.0, ("embedding", "t0"): -1.0,
        ("embedding", "t1"): -1.0})
