"""The record layout migration: old records are refused with the fix named, then migrated
byte for byte (only the key moves), hashes and file names kept, a second pass a no-op."""

import json
from pathlib import Path

import pytest

from vitplast.experiments import migrate, results
from vitplast.experiments.runs import make_run, run_hash
from vitplast.experiments.store import Store
from vitplast.files import write_json

TINY = dict(pretrained=False, steps=2, batch_size=16, eval_every=100)
OUTCOME = dict(status="ok", test_acc=0.5, best_val_acc=0.6, history=[dict(step=0, loss=1.0)])
DATA = Path(__file__).resolve().parents[2] / "data"


def old_store(root, n=3):
    """A store of ``n`` records in the older layout (the run under ``config``), as the
    sweep wrote them (``write_json``); its runs and the files' text."""
    runs = [make_run("digits", "LN1", lr=0.1 * (i + 1), **TINY) for i in range(n)]
    for run in runs:
        write_json(Store(root).path(run), {"config": run, **OUTCOME})
    return runs, {p.name: p.read_text() for p in Path(root).glob("*.json")}


def test_an_old_record_is_refused_with_the_migration_named(tmp_path):
    runs, _ = old_store(tmp_path)
    with pytest.warns(UserWarning, match="3 file"):
        assert Store(tmp_path).records() == []
    assert not Store(tmp_path).has(runs[0])
    audit = Store(tmp_path).audit()
    assert audit["kind"].tolist() == ["invalid"] * 3
    assert all(f"python -m vitplast.experiments.migrate {tmp_path}" in p for p in audit["problem"])


def test_migration_moves_only_the_key_and_keeps_every_hash(tmp_path):
    runs, before = old_store(tmp_path)
    Store(tmp_path).write_companion("study.json", {"sessions": [], "config": {"x": 1}})
    write_json(tmp_path / "notes.json", {"config": {"kept": True}, "run": 1})
    untouched = {n: (tmp_path / n).read_text() for n in ("study.json", "notes.json")}
    assert migrate.migrate(tmp_path) == dict(migrated=3, left=1)  # notes.json: foreign
    after = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    assert set(after) == set(before) | set(untouched)  # no file renamed, added or lost
    for name, text in before.items():
        assert after[name] == text.replace('\n "config": {', '\n "run": {', 1)
    assert {n: after[n] for n in untouched} == untouched
    assert Store(tmp_path).audit()["file"].tolist() == ["notes.json"]
    assert [Store(tmp_path).record(r)["run"] for r in runs] == runs
    with pytest.warns(UserWarning, match="notes.json"):  # the foreign file, named
        assert sorted(results.records_table(tmp_path)["run"]) == sorted(run_hash(r) for r in runs)
    assert migrate.migrate(tmp_path) == dict(migrated=0, left=4)  # a second pass: no change
    assert {p.name: p.read_text() for p in tmp_path.glob("*.json")} == after


def test_a_record_still_incomplete_once_migrated_is_named_and_not_written(tmp_path):
    runs, _ = old_store(tmp_path, n=1)
    bad = Store(tmp_path).path(runs[0])
    write_json(bad, {"config": {**runs[0], "lr": -1.0}, **OUTCOME})
    text = bad.read_text()
    with pytest.raises(ValueError, match=f"{bad.name}.*lr=-1.0"):
        migrate.migrate(tmp_path)
    assert bad.read_text() == text


def test_the_command_migrates_each_folder_and_refuses_a_missing_one(tmp_path, capsys):
    old_store(tmp_path / "a", n=2)
    assert migrate.main([str(tmp_path / "a")]) == 0
    assert "2 record(s) migrated, 0 file(s) left" in capsys.readouterr().out
    assert migrate.main([str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert migrate.main([]) == 2
    assert "usage: python -m vitplast.experiments.migrate FOLDER" in capsys.readouterr().err


def test_no_shipped_store_holds_an_old_record():
    old = [p for p in DATA.rglob("*.json")
           if migrate.migrated(json.loads(p.read_text())) is not None]
    assert old == []
