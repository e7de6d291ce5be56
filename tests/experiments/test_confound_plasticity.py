"""The confound study's plasticity (``vitplast.experiments.confound_plasticity``): plasticity
after finetuning is measured on the trained model, once; per-block plasticity is stored once
per protocol."""

import pandas as pd
import pytest
from helpers import acc_table, tiny_vit

from vitplast import cached
from vitplast.experiments import confound_plasticity, confound_variants
from vitplast.experiments.confound_plasticity import plasticity_after
from vitplast.report import confound_tables


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
    corr = confound_tables.layer_correlations(acc, layers, fields).set_index(
        ["protocol", "task"])
    assert corr["spearman"].to_dict() == pytest.approx({
        ("hidden", "t0"): 1.0, ("hidden", "t1"): 1.0, ("embedding", "t0"): -1.0,
        ("embedding", "t1"): -1.0})
