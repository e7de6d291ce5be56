"""A study's log and progress: the session log names no machine folder, and a study's progress
is priced in CPU hours (``vitplast.experiments.study_log``)."""

from helpers import TINY

from vitplast.experiments import runs, study_log
from vitplast.experiments.store import Store


def test_progress_counts_the_study_and_prices_what_is_missing(tmp_path):
    """Per (task, seed): exact counts by status (a run claimed by a live process is running,
    the other runs not stored pending), and the missing runs priced at the mean time
    of the stored ok runs of their configuration (of every ok run where it has none)."""
    study = runs.grid(["digits"], ["head", "LN1", "FC1"], [0.1], [0, 42], **TINY)
    by_key = {(r["config"], r["seed"]): r for r in study}
    for key, status, seconds in [(("head", 0), "ok", 3600.0), (("head", 42), "ok", 10800.0),
                                 (("LN1", 0), "ok", 1800.0), (("FC1", 0), "diverged", 99.0)]:
        Store(tmp_path).save(by_key[key], dict(run=by_key[key], status=status,
                                            seconds=seconds, test_acc=0.5,
                                            best_val_acc=0.5, history=[dict(step=0)]))
    with Store(tmp_path).claim(by_key[("LN1", 42)]):  # in flight: running, not pending
        table = study_log.study_progress(study, tmp_path)
    assert table.drop(columns="hours_left").values.tolist() == [
        ["digits", 0, 3, 2, 1, 0, 0, 0], ["digits", 42, 3, 1, 0, 0, 1, 1],
        ["all", "", 6, 3, 1, 0, 1, 1]]
    assert list(table.columns[2:-1]) == ["expected", "ok", "diverged", "failed", "running",
                                         "pending"]
    # seed 42 lacks LN1 (its ok mean: 0.5 h) and FC1 (none ok: the mean of all ok, 1.5 h)
    assert table["hours_left"].tolist() == [0.0, 2.0, 2.0]


def test_a_logged_session_names_no_machine_folder(tmp_path):
    import pandas as pd

    command = f"python -m vitplast sweep --study suite --root {tmp_path}/data/suite --shard 0/2"
    study_log.log_session(tmp_path, command, pd.DataFrame(dict(run=["a"], status=["ok"])), 1.0,
                           device="cpu")
    logged = (tmp_path / "study.json").read_text()
    assert str(tmp_path) not in logged and "--root data/suite" in logged
