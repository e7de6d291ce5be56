"""Measured plasticity (``vitplast.measure.empirical``): the tables of notebook 02 computed from
rates (layers pooled over tasks, along pretraining, precision, per-task orders), and measurements
cached per checkpoint, task and protocol."""

import pandas as pd
import pytest
from helpers import tiny_vit

from vitplast.measure import empirical, plasticity


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


def test_notebook_04_inputs_are_stored_beside_the_study_and_recomputed_when_an_input_changes(
        tmp_path, monkeypatch):
    """``finetuning_inputs`` measures each task's plasticity (per protocol) and probe once,
    keeps them as companions of the store, reads them back; another ``n_pairs`` is measured
    anew; its rates give ``plasticity.ranking`` the stored per-block plasticity's mean."""
    from vitplast.experiments.store import Store
    from vitplast.train import probes

    measured, probed = [], []

    def layers(tasks, *, protocol, n_pairs):
        measured.append((tuple(tasks), protocol, n_pairs))
        return pd.DataFrame([dict(task=tasks[0], layer=b, component=c, ci95=0.1,
                                  plasticity=float(b + i + (protocol == "hidden")))
                             for b in range(2) for i, c in enumerate(["LN1", "MHA"])])

    def linear_probes(model_name, tasks):
        probed.append(tuple(tasks))
        return pd.DataFrame([dict(task=tasks[0], train_acc=99.0, val_acc=90.0, test_acc=88.0,
                                  n_train=10, n_features=4)])

    monkeypatch.setattr(empirical, "embedded_layers", layers)
    monkeypatch.setattr(probes, "linear_probes", linear_probes)
    rates, probe = probes.finetuning_inputs(["digits", "fmnist_snow"], tmp_path, n_pairs=4)
    assert len(measured) == 4 and probed == [("digits",), ("fmnist_snow",)]
    assert probe.to_dict() == {"digits": 88.0, "fmnist_snow": 88.0}
    ranked = plasticity.ranking(rates).set_index(["task", "protocol", "component"])
    assert ranked.loc[("digits", "hidden", "MHA"), "plasticity"] == pytest.approx(2.5)
    assert ranked.loc[("digits", "embedding", "LN1"), "plasticity"] == pytest.approx(0.5)
    again = probes.finetuning_inputs(["digits", "fmnist_snow"], tmp_path, n_pairs=4)
    assert len(measured) == 4 and len(probed) == 2  # read, not measured
    pd.testing.assert_frame_equal(again[0], rates)
    probes.finetuning_inputs(["digits"], tmp_path, protocols=["hidden"], n_pairs=8)
    assert measured[-1] == (("digits",), "hidden", 8) and len(probed) == 2
    assert Store(tmp_path).audit().empty  # companions, not foreign files


def test_notebook_04_and_the_suite_study_keep_plasticity_in_one_file(tmp_path, monkeypatch):
    """``stored_layers`` and ``task_measures.task_plasticity`` name and fill the same companion for
    the same settings: the suite's files serve notebook 04's 7 tasks as they are."""
    from vitplast.experiments import task_measures

    monkeypatch.setattr(empirical, "embedded_layers", lambda tasks, *, protocol, n_pairs:
                        pd.DataFrame([dict(task=tasks[0], layer=0, component="MHA",
                                           plasticity=1.5, ci95=0.1)]))
    mine = empirical.stored_layers(tmp_path / "a", "digits", n_pairs=4, protocol="hidden")
    suite = task_measures.task_plasticity(tmp_path / "b", "digits", n_pairs=4, protocol="hidden")
    [a], [b] = (tmp_path / "a").glob("plasticity-*"), (tmp_path / "b").glob("plasticity-*")
    assert a.name == b.name and a.read_text() == b.read_text()
    pd.testing.assert_frame_equal(mine, suite)


def test_layer_summary_puts_median_and_mean_without_layer_0_beside_the_mean():
    pooled = pd.DataFrame([dict(protocol="hidden", layer=layer, component=c, plasticity=v)
                           for layer, vals in enumerate([(0.1, 1.0), (3.0, 1.1), (2.0, 1.2)])
                           for c, v in zip(("MHA", "FC1"), vals)])
    table = empirical.layer_summary(pooled)
    assert table.loc["MHA", ("mean", "hidden")] == pytest.approx(5.1 / 3)
    assert table.loc["MHA", ("median", "hidden")] == 2.0
    assert table.loc["MHA", ("mean without layer 0", "hidden")] == 2.5
    assert table.loc["FC1", ("median", "hidden")] == 1.1
