"""The suite study's tables on synthetic data: complete tasks, primaries per task."""

import math

import pandas as pd
import pytest

from vitplast import decide, studies

PRIMARIES = studies.get("suite").primaries


def _picked(task, acc):
    return [dict(task=task, config=c, test_acc=a) for c, a in acc.items()]


def test_complete_tasks_are_those_whose_every_search_ended():
    state = pd.DataFrame(dict(task=["a", "a", "b", "b"], next=[[], [], [], [0.3]]))
    assert decide.complete_tasks(state) == ["a"]


def test_primaries_per_task():
    acc = {"head": 60, "MHA": 70, "FC1": 68, "FC2": 66, "LN1": 64, "LN2": 62,
           "MHA sparse": 63, "FC1 sparse": 62, "FC2 sparse": 61}
    picked = pd.DataFrame(_picked("t", acc) + _picked("u", {k: 50 for k in acc}))
    plastic = pd.DataFrame(dict(task="t", component=["MHA", "FC1", "FC2", "LN1", "LN2"],
                                plasticity=[5.0, 4.0, 3.0, 2.0, 1.0]))
    p1, p2, _ = PRIMARIES
    wide = decide.accuracy(picked)
    assert p1.values(wide).to_dict() == {"t": pytest.approx(62 - 63), "u": 0.0}
    assert p2.values(wide).to_dict() == {"t": 70 - 64, "u": 0.0}
    rho = decide.spearman_plasticity_gain(picked, plastic)
    assert rho["t"] == pytest.approx(1.0) and math.isnan(rho["u"])  # no plasticity for u
    flipped = plastic.assign(plasticity=plastic["plasticity"][::-1].to_numpy())
    assert decide.spearman_plasticity_gain(picked, flipped)["t"] == pytest.approx(-1.0)
    rows = decide.findings(studies.get("suite"), picked, plastic)
    assert [r["family"] for r in rows] == ["primary"] * 3 and [r["n"] for r in rows] == [2, 2, 1]


def test_distance_reads_head_only_and_the_probe():
    picked = pd.DataFrame(_picked("t", {"head": 55.0, "MHA": 70.0}))
    probes = pd.DataFrame(dict(task=["t"], test_acc=[48.0]))
    out = decide.distance(picked, probes)
    assert out.to_dict("records") == [dict(task="t", head_acc=55.0, probe_acc=48.0)]


def test_a_task_s_probe_is_computed_once_and_stored_as_a_companion(tmp_path, monkeypatch):
    from vitplast import probes, store

    calls = []

    def fake(model_name, tasks):
        calls.append(tasks)
        return pd.DataFrame([dict(task=tasks[0], train_acc=99.0, val_acc=90.0, test_acc=89.5,
                                  n_train=4000, n_features=128)])

    monkeypatch.setattr(probes, "linear_probes", fake)
    assert decide.task_probes(tmp_path, ["digits"]).empty  # nothing stored, nothing computed
    assert decide.task_probe(tmp_path, "digits")["test_acc"] == 89.5
    table = decide.task_probes(tmp_path, ["digits", "fmnist_invert"])
    assert table.to_dict("records") == [dict(task="digits", test_acc=89.5, val_acc=90.0,
                                             train_acc=99.0)]
    assert calls == [["digits"]]  # read back, not recomputed
    assert store.audit(tmp_path).empty  # a companion, not a foreign file
