"""The cross-gauge study's pairs and identity reruns (``vitplast.experiments.cross_gauge``) on
synthetic stores, and the checks read from them: pairs by run hash, the LR up to which
trajectories agree."""

import pandas as pd
import pytest

from vitplast.experiments import cross_gauge
from vitplast.report import cross_gauge_findings


def _picked(task, acc):
    return [dict(task=task, config=c, test_acc=a) for c, a in acc.items()]


def _gauge_record(root, lr, losses, test_acc, gauge, config="LN1", task="digits", **runtime):
    from vitplast.experiments import runs
    from vitplast.experiments.store import Store

    run = runs.make_run(task, config, lr=lr, **runtime)
    if gauge:
        run = dict(run, prepare="gauge", ablation=dict(c=8.0))
    Store(root).save(run, dict(status="ok", test_acc=test_acc, best_val_acc=test_acc,
                               device="cpu", history=[dict(step=i, loss=v)
                                                      for i, v in enumerate(losses)]))


def test_gauge_pairs_match_the_same_run_at_two_gauges_and_the_checks_read_them(tmp_path):
    _gauge_record(tmp_path, 0.1, [2.0, 1.5, 1.0], 0.70, gauge=False)
    _gauge_record(tmp_path, 0.1, [2.0, 1.5002, 1.0], 0.70, gauge=True)  # stable, the same
    _gauge_record(tmp_path, 1.0, [2.0, 3.0, 1.0], 0.60, gauge=False)  # a spike: unstable
    _gauge_record(tmp_path, 1.0, [2.0, 3.5, 1.2], 0.65, gauge=True)
    _gauge_record(tmp_path, 0.3, [2.0, 1.0, 0.5], 0.72, gauge=False)  # no c = 8 twin
    pairs = cross_gauge.gauge_pairs(tmp_path).sort_values("lr").reset_index(drop=True)
    assert pairs[["lr", "loss_rose"]].to_dict("list") == dict(lr=[0.1, 1.0],
                                                             loss_rose=[False, True])
    assert pairs["first_diff"].tolist() == [0.0, 0.0]
    assert pairs["max_loss_diff"].tolist() == pytest.approx([2e-4, 0.5])
    assert pairs["test_diff"].tolist() == pytest.approx([0.0, 5.0])
    picked = pd.DataFrame(_picked("a", {"LN1": 70.0, "LN1 c=8": 70.0, "head": 60.0})
                          + _picked("b", {"LN1": 71.0, "LN1 c=8": 73.0, "head": 61.0}))
    picked["loss_rose"] = [0.0, 1.0, 0.0, 1.0, 1.0, float("nan")]
    checks = cross_gauge_findings.gauge_checks
    first, same, agree, rose, ln1 = checks(pairs, picked)  # head: no c = 8
    assert (agree["measured"], agree["n"]) == (0.0, 1)
    assert first["verdict"] == "the same, as derived" and first["n"] == 2
    assert same["measured"] == "0.0002 (LR 0.1), 0.5 (LR 1)"
    assert same["verdict"] == ("the same trajectory up to LR 0.1, as derived; above it the "
                               "pairs part by up to 0.5 from first-step differences of at most "
                               "0: large steps amplify rounding (the pairs ran on cpu)")
    assert (rose["measured"], rose["n"]) == (60.0, 5)
    assert rose["verdict"] == "3 of 5 chosen runs had a training loss that rose above its start"
    assert ln1["measured"] == 1.0 and ln1["n"] == 2
    calm = checks(pairs.assign(max_loss_diff=[2e-4, 5e-4]), picked)[1]
    assert calm["verdict"] == "the same trajectory at every LR stored (up to 1), as derived"
    broken = checks(pairs.assign(max_loss_diff=[0.01, 0.5], first_diff=[0.01, 0]), picked)
    assert broken[0]["verdict"].startswith("not the same: the derivation")
    assert broken[1]["verdict"].startswith("not the same at any LR stored")
    assert checks(pairs.iloc[:0], picked)[0]["verdict"] == "no pair stored yet"


def test_pairs_are_made_by_run_hash_whatever_their_runtime_keys(tmp_path):
    """A c = 1 record stored without ``precision`` (older CPU runs) pairs with its c = 8 twin
    that has it: runtime keys never split a pair; a different LR does."""
    _gauge_record(tmp_path, 0.1, [2.0, 1.5], 0.70, gauge=False)  # no precision key
    _gauge_record(tmp_path, 0.1, [2.0, 1.5], 0.71, gauge=True, precision="fp32")
    _gauge_record(tmp_path, 0.3, [2.0, 1.4], 0.72, gauge=True, precision="fp32")
    pairs = cross_gauge.gauge_pairs(tmp_path)
    assert pairs["lr"].tolist() == [0.1] and pairs["test_diff"].tolist() == pytest.approx([1.0])


def test_identity_reruns_the_changed_configurations_at_the_lrs_the_study_chose(monkeypatch):
    """Each task and configuration at the LR chosen for it at c = 8; the gauged parameters'
    LR at c = 1 is that LR / c^2, from ``invariance.finetuning_equivalence`` on the model."""
    from vitplast.train import invariance as module

    calls = []

    def invariance(**kw):
        calls.append((kw["task"], kw["configs"], kw["lr"], kw["c"], kw["steps"]))
        return pd.DataFrame([dict(config=kw["configs"][0], vs_original=0.2, max_grad_norm=3.0,
                                  vs_lr_scaled_clip=0.05, vs_lr_scaled_noclip=1e-4)])

    monkeypatch.setattr(module, "finetuning_invariance", invariance)
    picked = pd.DataFrame(dict(task="a", config=["MHA", "MHA c=8", "FC2 c=8"],
                               lr=[0.03, 0.1, 1.0]))
    ident = cross_gauge.identity(picked, ["a"], steps=3)
    assert calls == [("a", ("MHA",), 0.1, 8.0, 3), ("a", ("FC2",), 1.0, 8.0, 3)]
    assert ident["gauged"].tolist() == ["attn.proj", "mlp.fc2"]
    assert ident["derived_lr"].tolist() == pytest.approx([0.1 / 64, 1.0 / 64])


def test_the_identity_is_kept_beside_the_study_and_computed_again_when_an_input_changes(
        tmp_path, monkeypatch):
    """``identity`` with the study's folder: each (task, configuration) run pair is trained
    once and kept there (a ``table-*.json`` companion), read back without training, and
    trained again when an input changes (here the chosen LR)."""
    from vitplast.train import finetune

    trained, train = [], finetune.train
    monkeypatch.setattr(finetune, "train", lambda *a, **k: trained.append(k["lr"]) or train(
        *a, **k))
    picked = pd.DataFrame([dict(task="digits", config="MHA c=8", lr=0.1)])
    first = cross_gauge.identity(picked, ["digits"], ("MHA",), steps=1, root=tmp_path)
    assert len(trained) == 5 and len(list(tmp_path.glob("table-*.json"))) == 1  # 5 runs
    again = cross_gauge.identity(picked, ["digits"], ("MHA",), steps=1, root=tmp_path)
    assert len(trained) == 5  # read, not trained
    pd.testing.assert_frame_equal(first, again)
    cross_gauge.identity(picked.assign(lr=0.03), ["digits"], ("MHA",), steps=1, root=tmp_path)
    assert len(trained) == 10 and set(trained[5:]) == {0.03}
    assert len(list(tmp_path.glob("table-*.json"))) == 2


def test_notebook_07s_identity_is_read_from_the_shipped_companions(monkeypatch):
    """A fresh clone does not train 07's identity runs: the shipped gauge study holds them
    for the notebook's tasks, steps and chosen LRs (computing here fails the test)."""
    from vitplast import cached, files
    from vitplast.course import notebooks
    from vitplast.experiments import studies

    def computed(*args, **kwargs):
        raise AssertionError("not stored: notebook 07 would train it on a fresh clone")

    monkeypatch.setattr(cached, "_as_kept", computed)
    p = notebooks.notebook_parameters("07_suite")
    gauge = studies.get("gauge")
    root = files.require_results(gauge.root())
    ident = cross_gauge.identity(gauge.load(root).runs, p["identity_tasks"],
                                 steps=p["identity_steps"], root=root)
    assert len(ident) == len(p["identity_tasks"]) * len(cross_gauge.GAUGE_CHANGED)
