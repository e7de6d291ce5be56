"""What is measured once per task beside a searched study's runs, stored as companions: the
linear probe and relative plasticity, each computed once and read back."""

import pandas as pd
import pytest

from vitplast import cached
from vitplast.experiments import task_measures
from vitplast.report import suite_findings


def test_a_task_s_probe_is_computed_once_and_stored_as_a_companion(tmp_path, monkeypatch):
    from vitplast.experiments.store import Store
    from vitplast.train import probes

    calls = []

    def fake(model_name, tasks, options=None):
        calls.append(tasks)
        return pd.DataFrame([dict(task=tasks[0], train_acc=99.0, val_acc=90.0, test_acc=89.5,
                                  n_train=4000, n_features=128)])

    monkeypatch.setattr(probes, "linear_probes", fake)
    assert task_measures.task_probes(tmp_path, ["digits"]).empty  # nothing stored, nothing computed
    assert task_measures.task_probe(tmp_path, "digits")["test_acc"] == 89.5
    table = task_measures.task_probes(tmp_path, ["digits", "fmnist_invert"])
    assert table.to_dict("records") == [dict(task="digits", test_acc=89.5, val_acc=90.0,
                                             train_acc=99.0)]
    assert calls == [["digits"]]  # read back, not recomputed
    assert Store(tmp_path).audit().empty  # a companion, not a foreign file


def test_relative_plasticity_is_a_companion_beside_plasticity_with_its_own_hash(tmp_path,
                                                                               monkeypatch):
    """The same mechanism (plasticity-<hash>.json): relative plasticity's settings add
    ``quantity``, so plasticity's stored files keep their names; measured once, read back,
    never measured with ``compute=False``; an unknown quantity names the valid ones."""
    from vitplast.experiments.store import Store
    from vitplast.measure import empirical, relative

    calls = []

    def fake(tasks, *, protocol, n_pairs):
        calls.append((tasks, protocol))
        return pd.DataFrame([dict(task=tasks[0], layer=0, component=c, relative_plasticity=r,
                                  plasticity=2 * r, s_in=1.0, s_out=2.0)
                             for c, r in zip(["LN1", "MHA", "LN2", "FC1", "FC2"], range(1, 6))])

    monkeypatch.setattr(relative, "embedded_layers", fake)
    monkeypatch.setattr(empirical, "embedded_layers", lambda *a, **k: pytest.fail("measured"))
    assert task_measures.component_plasticity(tmp_path, ["digits"], 8, "hidden", "relative",
                                       compute=False).empty
    got = task_measures.component_plasticity(tmp_path, ["digits"], 8, "hidden", "relative")
    assert got.set_index("component")["relative_plasticity"].to_dict() == dict(
        LN1=1, MHA=2, LN2=3, FC1=4, FC2=5)
    task_measures.task_plasticity(tmp_path, "digits", 8, "hidden", "relative")  # read back
    assert calls == [(["digits"], "hidden")]
    plain = cached.config_hash(dict(task="digits", n_pairs=8, protocol="hidden"))
    assert not (tmp_path / f"plasticity-{plain}.json").exists()
    assert Store(tmp_path).audit().empty
    with pytest.raises(ValueError, match="valid: \\['plasticity', 'relative'\\]"):
        task_measures.task_plasticity(tmp_path, "digits", quantity="relative plasticity")
    rho = suite_findings.spearman_plasticity_gain(pd.DataFrame(
        [dict(task="digits", config=c, test_acc=a) for c, a in
         zip(["head", "LN1", "MHA", "LN2", "FC1", "FC2"], [50, 51, 52, 53, 54, 55])]),
        got, value="relative_plasticity")
    assert rho["digits"] == pytest.approx(1.0)
