"""Measured plasticity (``vitplast.measure.empirical``): the tables of notebook 02 computed from
rates (layers pooled over tasks, along pretraining, precision, per-task orders), and measurements
cached per checkpoint, task and protocol."""

import numpy as np
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

    def linear_probes(model_name, tasks, options=None):
        probed.append((*tasks, *(options or {}).items()))
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
    # a study whose runs build smaller splits has its probe on those, in a file of its own
    probes.finetuning_inputs(["fmnist_snow"], tmp_path, n_pairs=4, options=dict(train_size=160))
    assert probed[-1] == ("fmnist_snow", ("train_size", 160)) and len(probed) == 3
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
    per_layer = pd.DataFrame([dict(protocol="hidden", task=t, layer=layer, component=c,
                                   plasticity=v + shift)
                              for t, shift in (("a", 0.0), ("b", 1.0))
                              for layer, vals in enumerate([(0.1, 1.0), (3.0, 1.1), (2.0, 1.2)])
                              for c, v in zip(("MHA", "FC1"), vals)])
    table = empirical.layer_summary(per_layer)
    assert table.loc["MHA", ("layer mean", "hidden")] == pytest.approx(5.1 / 3 + 0.5)
    assert table.loc["MHA", ("layer median", "hidden")] == 2.5
    assert table.loc["MHA", ("layer mean without layer 0", "hidden")] == 3.0
    assert table.loc["FC1", ("layer median", "hidden")] == pytest.approx(1.6)


def test_the_medians_of_the_table_are_those_of_the_findings_rows():
    """Notebook 02's table of layer medians and its order rows come from one computation
    (a median per task, then the mean over tasks), so their numbers are the same."""
    from vitplast.report import plasticity_findings

    rng = np.random.default_rng(0)
    per_layer = pd.DataFrame([dict(protocol=p, task=t, layer=layer, component=c,
                                   plasticity=float(rng.lognormal()))
                              for p in ("hidden", "embedding") for t in "abcd"
                              for layer in range(5) for c in ("MHA", "FC1", "LN1")])
    table = empirical.layer_summary(per_layer).round(3)
    for row in plasticity_findings.layer_summaries(per_layer):
        name, protocol = row["claim"].removeprefix("order by the ").rstrip("]").split(" [")
        for part in row["measured"].split(" > "):
            component, value = part.split()
            assert table.loc[component, (name, protocol)] == pytest.approx(float(value), abs=1e-3)


def _profile_params(notebook: str, profile: str) -> dict:
    from vitplast.course import notebooks

    return {**notebooks.notebook_parameters(notebook),
            **notebooks.PROFILES[profile].get(notebook, {})}


def _never_computed(monkeypatch):
    """Computing a kept table fails the test: it must be read from data/."""
    from vitplast import cached

    def computed(*args, **kwargs):
        raise AssertionError("not stored: the notebook would measure it on a fresh clone")

    monkeypatch.setattr(cached, "_computed", computed)


def test_notebook_02_reads_its_measurements_of_the_embedded_model_from_data(monkeypatch):
    """A fresh clone measures none of 02's tables in the default and smoke profiles: each is
    kept in data/finetune (``cached.kept_table``; the per-pair rates as arrays) for exactly
    the settings the notebook asks for, read without computing."""
    from vitplast.course.parameters import kept_folder
    from vitplast.measure import stream

    _never_computed(monkeypatch)
    for profile in ("default", "smoke"):
        p = _profile_params("02_plasticity", profile)
        kept = kept_folder(p["measured_dir"], p["model_name"])
        assert kept is not None and kept.name == "finetune"
        where = dict(source=p["source"], data_root=p["data_root"])
        rates = empirical.plasticity_study(
            p["model_name"], p["tasks"], checkpoints=p["checkpoints"],
            pretraining_tasks=p["pretraining_tasks"], n_pairs=p["n_pairs"],
            batch_size=p["batch_size"], root=kept, **where)
        assert set(rates.checkpoint) == set(p["checkpoints"]) and set(rates.task) == set(
            p["tasks"]) and rates.pair.max() == p["n_pairs"] - 1
        curve = empirical.mha_scale_curve(p["model_name"], p["tasks"][0], p["scales"],
                                          n_pairs=p["n_pairs"], batch_size=p["batch_size"],
                                          root=kept, **where)
        stats = stream.stream_statistics(p["model_name"], p["tasks"][0], p["checkpoints"],
                                         n_pairs=p["stream_pairs"], root=kept, **where)
        assert len(curve) and set(stats.checkpoint) == set(p["checkpoints"])


def test_notebook_01_reads_its_rates_of_the_embedded_model_from_data(monkeypatch):
    """01's per-pair rates (section 4, both protocols) are kept in data/finetune for the
    default and smoke profiles and read without measuring; another checkpoint is another
    table (its weights in the key)."""
    from vitplast import cached
    from vitplast.course.parameters import kept_folder

    _never_computed(monkeypatch)
    for profile in ("default", "smoke"):
        p = _profile_params("01_definitions", profile)
        kept = kept_folder(p["measured_dir"], p["model_name"])
        for protocol in ("hidden", "embedding"):
            rates = empirical.task_rates(p["model_name"], p["task"], "fmnist",
                                         checkpoint=p["checkpoint"], n_pairs=p["n_pairs"],
                                         protocol=protocol, root=kept)
            assert rates.pair.nunique() == p["n_pairs"] and set(rates.protocol) == {protocol}
    keys = []
    monkeypatch.setattr(cached, "kept_table", lambda name, key, *a, **kw: keys.append(key))
    for checkpoint in ("init", "final"):
        empirical.task_rates("vitplast_fmnist", "digits", checkpoint=checkpoint)
    assert keys[0]["weights"] != keys[1]["weights"]
