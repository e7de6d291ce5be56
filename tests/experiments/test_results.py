"""The records table of one or more stores (``vitplast.experiments.results``): one row per run
however many stores hold it, the validation loss read at the kept weights, the logged curves
by metric, and how much of a grid a store holds."""

import pytest
from helpers import TINY

from vitplast.experiments import results, runs
from vitplast.experiments.store import Store


def _save(root, lr, status="ok"):
    run = runs.make_run("digits", "MHA", lr=lr, seed=0, **TINY)
    history = [dict(step=0, loss=2.0, val_loss=1.5), dict(step=1, loss=1.0, val_loss=0.5)]
    Store(root).save(run, dict(status=status, history=history, best_step=1,
                               best_val_acc=0.8 if status == "ok" else None,
                               test_acc=0.7 if status == "ok" else None))
    return run


def test_the_records_table_holds_each_run_once_over_stores(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shared = _save(a, 0.1)
    _save(b, 0.1)  # the same run in a second store: one row
    _save(b, 1.0, status="diverged")
    table = results.records_table(a, b).set_index("lr")
    assert len(table) == 2 and table.loc[0.1, "run"] == runs.run_hash(shared)
    assert table["status"].to_dict() == {0.1: "ok", 1.0: "diverged"}
    assert table.loc[0.1, "best_val_loss"] == 0.5  # at best_step 1, read off the curve
    assert table.loc[0.1, "test_acc"] == pytest.approx(0.7)
    assert table["task"].eq("digits").all() and table["config"].eq("MHA").all()


def test_history_keeps_the_metrics_asked_for(tmp_path):
    _save(tmp_path, 0.1)
    curves = results.history(tmp_path, metrics=["loss"])
    assert curves["metric"].unique().tolist() == ["loss"]
    assert curves.sort_values("step")["value"].tolist() == [2.0, 1.0]
    assert set(results.history(tmp_path)["metric"]) == {"loss", "val_loss"}


def test_coverage_counts_the_expected_runs_by_status(tmp_path):
    stored = [_save(tmp_path, 0.1), _save(tmp_path, 1.0, status="diverged")]
    missing = runs.make_run("digits", "LN1", lr=0.1, seed=0, **TINY)
    table = results.records_table(tmp_path)
    assert results.coverage(table, [*stored, missing]) == {"expected": 3, "ok": 1,
                                                           "diverged": 1, "missing": 1}
