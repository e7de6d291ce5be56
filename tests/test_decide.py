"""The suite study's tables on synthetic data: complete tasks, primaries per task."""

import math

import pandas as pd
import pytest

from vitplast import decide, studies

PRIMARIES = studies.SUITE_STUDY["primaries"]


def _picked(task, acc):
    return [dict(task=task, config=c, test_acc=a) for c, a in acc.items()]


def test_complete_tasks_are_those_whose_every_search_ended():
    state = pd.DataFrame(dict(task=["a", "a", "b", "b"], next=[[], [], [], [0.3]]))
    assert decide.complete_tasks(state) == ["a"]


def test_primary_values_per_task():
    acc = {"head": 60, "MHA": 70, "FC1": 68, "FC2": 66, "LN1": 64, "LN2": 62,
           "MHA sparse": 63, "FC1 sparse": 62, "FC2 sparse": 61}
    picked = pd.DataFrame(_picked("t", acc) + _picked("u", {k: 50 for k in acc}))
    plastic = pd.DataFrame(dict(task="t", component=["MHA", "FC1", "FC2", "LN1", "LN2"],
                                plasticity=[5.0, 4.0, 3.0, 2.0, 1.0]))
    out = decide.primary_values(picked, plastic, PRIMARIES).set_index("task")
    assert out.loc["t", "P1"] == pytest.approx(62 - 63)  # sparse mean 62, LayerNorms 63
    assert out.loc["t", "P2"] == pytest.approx(70 - 64)
    assert out.loc["t", "P3"] == pytest.approx(1.0)  # gains in the plasticity order
    assert out.loc["u", "P1"] == 0 and math.isnan(out.loc["u", "P3"])  # no plasticity for u
    flipped = plastic.assign(plasticity=plastic["plasticity"][::-1].to_numpy())
    assert decide.primary_values(picked, flipped, PRIMARIES).set_index("task").loc[
        "t", "P3"] == pytest.approx(-1.0)


def test_distance_reads_head_only_and_the_probe():
    picked = pd.DataFrame(_picked("t", {"head": 55.0, "MHA": 70.0}))
    probes = pd.DataFrame(dict(task=["t"], test_acc=[48.0]))
    out = decide.distance(picked, probes)
    assert out.to_dict("records") == [dict(task="t", head_acc=55.0, probe_acc=48.0)]
