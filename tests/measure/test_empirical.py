"""Measured plasticity (``vitplast.empirical``): the tables of notebook 02 computed from rates
(layers pooled over tasks, along pretraining, precision, per-task orders), and measurements
cached per checkpoint, task and protocol."""

import pandas as pd
import pytest
from helpers import tiny_vit

from vitplast import empirical, plasticity


def test_notebook_02_tables_from_rates(images):
    frames = [plasticity.measure(tiny_vit(), *images, progress=False,
                                 meta=dict(checkpoint=ckpt, task=task))
              for ckpt in ("init", "final") for task in ("a", "b")]
    frames.append(plasticity.measure(tiny_vit(), *images, progress=False,
                                     meta=dict(checkpoint="final", task="c")))
    rates = pd.concat(frames, ignore_index=True)
    pooled = empirical.pooled_layers(rates, "final")
    assert len(pooled) == 2 * 5  # 2 layers x 5 components, one protocol, tasks averaged
    direct = rates[(rates.checkpoint == "final") & (rates.layer == 1) & (rates.component == "FC1")]
    assert pooled.set_index(["layer", "component"]).loc[(1, "FC1"), "plasticity"] == (
        pytest.approx(direct.groupby("task")["rate"].mean().mean()))
    along, curve = empirical.along_pretraining(rates, "not-embedded")
    assert set(along["task"]) == {"a", "b"}  # c has no init checkpoint
    assert along["checkpoint"].iloc[0] == "init" and curve["epoch"].isna().all()
    prec = empirical.precision(rates, "final")
    assert prec.loc[0, "pairs"] == 24 and prec.loc[0, "max_relative_ci95"] > 0
    assert len(empirical.task_orders(plasticity.ranking(rates))) == 3


def test_measurements_are_cached_per_checkpoint_task_and_protocol(tmp_path, monkeypatch):
    """Notebook 04 reads what notebook 02 measured: the same (checkpoint, task, protocol,
    pairs) is measured once, whatever the list of tasks or protocols it comes in."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    calls = []
    real = empirical.measure
    monkeypatch.setattr(empirical, "measure", lambda *a, **k: calls.append(k) or real(*a, **k))
    first = empirical.measure_tasks("vitplast_fmnist", ["digits"], n_pairs=4, progress=False)
    assert len(calls) == 2 and set(first["protocol"]) == {"hidden", "embedding"}
    again = empirical.measure_tasks("vitplast_fmnist", ["digits"], protocols=["hidden"],
                                    n_pairs=4, progress=False)
    assert len(calls) == 2
    pd.testing.assert_frame_equal(again, first[first["protocol"] == "hidden"]
                                  .reset_index(drop=True))


def test_layer_summary_puts_median_and_mean_without_layer_0_beside_the_mean():
    pooled = pd.DataFrame([dict(protocol="hidden", layer=layer, component=c, plasticity=v)
                           for layer, vals in enumerate([(0.1, 1.0), (3.0, 1.1), (2.0, 1.2)])
                           for c, v in zip(("MHA", "FC1"), vals)])
    table = empirical.layer_summary(pooled)
    assert table.loc["MHA", ("mean", "hidden")] == pytest.approx(5.1 / 3)
    assert table.loc["MHA", ("median", "hidden")] == 2.0
    assert table.loc["MHA", ("mean without layer 0", "hidden")] == 2.5
    assert table.loc["FC1", ("median", "hidden")] == 1.1
