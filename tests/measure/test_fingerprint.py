"""The fingerprint of the measuring code (``vitplast.measure.fingerprint``): every table
``cached`` makes carries it; a table made by other code (another ``MEASURE_VERSION``, another
component table) is recomputed with one line saying why, never served; the estimator's code is
pinned so that a change to it bumps the version; the shipped tables carry this code's
fingerprint, and run hashes do not depend on it."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vitplast import cached, frames
from vitplast.files import read_json
from vitplast.measure import components, fingerprint

DATA = Path(__file__).resolve().parents[2] / "data"

#: ``fingerprint.estimator_hash()`` of the code that made the shipped tables. Update it with
#: ``MEASURE_VERSION`` (and the shipped tables) when the estimator's numbers change; alone when
#: an edit changes no number (a rename, a refactor checked against the shipped tables).
ESTIMATOR_HASH = "35e7a6ebbfe396ef"


def test_the_estimator_is_the_one_measure_version_names():
    assert fingerprint.estimator_hash() == ESTIMATOR_HASH, (
        "the estimator changed: bump MEASURE_VERSION and remake or re-stamp the shipped tables "
        "(vitplast.measure.fingerprint.restamp, after recomputing one and comparing); then pin "
        "the new estimator_hash here")


def test_the_fingerprint_is_stable_short_and_moves_with_the_version_and_the_components(
        monkeypatch):
    now = fingerprint.measuring()
    assert now == fingerprint.measuring() and now.startswith(f"m{fingerprint.MEASURE_VERSION}-")
    assert len(now) <= 20 and cached.stale("t", now) is None
    monkeypatch.setattr(fingerprint, "MEASURE_VERSION", fingerprint.MEASURE_VERSION + 1)
    assert fingerprint.measuring() != now
    monkeypatch.undo()
    four = components.TABLE[:4]  # the table measured with: its fingerprint, not the default's
    assert fingerprint.measuring(four) == (
        f"m{fingerprint.MEASURE_VERSION}-{components.fingerprint(four)}")
    assert fingerprint.measuring(four) != now == fingerprint.measuring(components.TABLE)


_CODE = {"as shipped": 'def f(x):\n    """Rate."""\n    return x / 2  # half\n',
         "prose edited": ('def f(x):\n    """The rate, reworded."""\n\n'
                          '    return (x\n            / 2)\n'),
         "code edited": 'def f(x):\n    """Rate."""\n    return x / 3  # half\n'}


def test_the_estimator_hash_moves_with_code_not_with_prose(tmp_path, monkeypatch):
    """Docstrings, comments and layout are not the estimator: editing them keeps the pinned
    hash (no table is invalidated); an edit of the code moves it."""
    import sys

    hashes = {}
    for name, code in _CODE.items():
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        (folder / "fp_estimator.py").write_text(code)
        monkeypatch.syspath_prepend(str(folder))
        monkeypatch.delitem(sys.modules, "fp_estimator", raising=False)
        monkeypatch.setattr(fingerprint, "ESTIMATOR", {"fp_estimator": ["f"]})
        hashes[name] = fingerprint.estimator_hash()
    assert hashes["prose edited"] == hashes["as shipped"] != hashes["code edited"]


def _table():
    return pd.DataFrame({"rate": [0.5, 1.5], "component": pd.Categorical(["MHA", "LN1"])})


@pytest.mark.parametrize("where", ["cache", "kept json", "kept arrays"])
def test_a_table_made_by_other_measuring_code_is_recomputed_with_one_line(
        where, tmp_path, monkeypatch, capsys):
    """``load_or_compute`` and ``kept_table`` (JSON and arrays) store the fingerprint; under
    another one (here: the estimator's version bumped) the table is computed again, the one
    line names the file, the old and the new fingerprint, and the fresh table is kept."""
    calls = []

    def compute():
        calls.append(1)
        return _table()

    def get():
        if where == "cache":
            return cached.load_or_compute("t", {"a": 1}, compute, folder=tmp_path)
        return cached.kept_table("t", {"a": 1}, compute, root=tmp_path,
                                 arrays=where == "kept arrays")

    old = cached.MEASURING_CODE
    get(), get()
    assert calls == [1] and capsys.readouterr().err == ""
    monkeypatch.setattr(cached, "MEASURING_CODE", "m2-other")  # as after a bump
    new = cached.MEASURING_CODE
    pd.testing.assert_frame_equal(get(), _table())
    lines = capsys.readouterr().err.splitlines()
    path = tmp_path / (f"t-{cached.config_hash({'a': 1})}.npz" if where == "cache" else
                       f"table-{cached.config_hash(dict(table='t', params={'a': 1}))}"
                       f"{'.npz' if where == 'kept arrays' else '.json'}")
    assert lines == [f"{path}: made by measuring code {old}, this is {new}: recomputing"]
    assert calls == [1, 1]
    get()  # the fresh table carries the new fingerprint: served, silently
    assert calls == [1, 1] and capsys.readouterr().err == ""


def test_a_table_from_before_fingerprints_is_recomputed_and_a_restamped_one_is_served(
        tmp_path, capsys):
    """A kept table with no ``measured_by`` (kept before fingerprints) is stale; ``restamp``
    writes this code's fingerprint into every table of a folder, values untouched, after
    which it is served without computing; ``audit`` lists the stale ones of a cache."""
    calls = []

    def compute():
        calls.append(1)
        return _table()

    cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True)
    cached.load_or_compute("c", {"a": 1}, compute, folder=tmp_path)
    files = sorted(p for p in tmp_path.iterdir() if p.suffix in (".json", ".npz")
                   and p.name != f"c-{cached.config_hash({'a': 1})}.json")
    for path in files:  # unstamp: as written before fingerprints
        if path.suffix == ".json":
            path.write_text(json.dumps({k: v for k, v in read_json(path).items()
                                        if k != "measured_by"}))
        else:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files if k != "measured_by"}
            np.savez(path, **arrays)
    assert cached.audit(tmp_path)["kind"].tolist() == ["stale table"] * 2
    cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    assert calls == [1] * 4 and "(none recorded)" in capsys.readouterr().err
    for path in files:  # unstamp again, then re-stamp
        if path.suffix == ".json":
            path.write_text(json.dumps({k: v for k, v in read_json(path).items()
                                        if k != "measured_by"}))
    assert sorted(fingerprint.restamp(tmp_path)) == files
    assert fingerprint.restamp(tmp_path) == []  # stamped: nothing to do
    assert cached.audit(tmp_path).empty
    cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True)
    cached.load_or_compute("c", {"a": 1}, compute, folder=tmp_path)
    assert calls == [1] * 4 and capsys.readouterr().err == ""


def _measured(path: Path) -> bool:
    try:
        return cached.companion_kind(path.name) in cached.MEASURED
    except ValueError:  # a run record, the runs table
        return False


def test_every_shipped_table_carries_this_code_s_fingerprint():
    """The shipped tables (kept tables, arrays, every measured companion: plasticity, advise,
    ...) were made (or re-stamped) by this measuring code: a fresh clone serves them. Failing
    after a bump: remake them, or ``fingerprint.restamp(folder)`` each folder once one
    recomputed table gives the same numbers."""
    now = fingerprint.measuring()
    tables = sorted([*DATA.glob("*/*.npz"), *filter(_measured, DATA.glob("*/*.json"))])
    assert len(tables) >= 250
    made_by = {p.relative_to(DATA).as_posix(): read_json(p).get("measured_by")
               if p.suffix == ".json" else frames.entries(p).get("measured_by")
               for p in tables}
    assert {k: v for k, v in made_by.items() if v != now} == {}


def test_a_measured_companion_made_by_other_code_is_measured_again_or_not_used(
        tmp_path, monkeypatch, capsys):
    """A store's measurement (``cached.MEASURED``, here a per-block plasticity file) is stamped
    when written; under other measuring code it is measured again with one line, and a call
    that only reads gets ``None`` (not measured by this code), with the line; a companion that
    is no measurement (a linear probe) carries no fingerprint."""
    from vitplast.experiments.store import Store

    content = dict(task="digits", n_pairs=8, protocol="hidden",
                   rows=[dict(layer=0, component="MHA", plasticity=1.5, ci95=0.1)])
    calls = []

    def compute():
        calls.append(1)
        return content

    store, name = Store(tmp_path), "plasticity-0123.json"
    old = store.companion(name, compute=compute)["measured_by"]
    assert old == cached.MEASURING_CODE == read_json(tmp_path / name)["measured_by"]
    monkeypatch.setattr(cached, "MEASURING_CODE", "m2-other")  # as after a bump
    new = cached.MEASURING_CODE
    assert store.companion(name) is None and calls == [1]
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path / name}: made by measuring code {old}, this is {new}: not used"]
    assert store.companion(name, compute=compute) == dict(content, measured_by=new)
    assert calls == [1, 1] and capsys.readouterr().err.splitlines() == [
        f"{tmp_path / name}: made by measuring code {old}, this is {new}: recomputing"]
    assert store.companion(name, compute=compute)["measured_by"] == new and calls == [1, 1]
    assert "probe" not in cached.MEASURED and "study" not in cached.MEASURED


def test_run_hashes_do_not_carry_the_fingerprint(monkeypatch):
    """The fingerprint is how a table was measured, not what a run is: shipped run hashes
    stay what they are under any measuring code."""
    from vitplast.experiments import runs

    record = next(p for p in sorted((DATA / "finetune").glob("*.json"))
                  if "run" in (read_json(p) or {}))
    run = read_json(record)["run"]
    before = runs.run_hash(run)
    monkeypatch.setattr(fingerprint, "MEASURE_VERSION", fingerprint.MEASURE_VERSION + 1)
    assert runs.run_hash(run) == before and record.stem == before


def test_the_cache_stamps_the_fingerprint_of_this_measuring_code():
    """``cached`` (base layer) does not import the measuring code: it holds the fingerprint as
    a constant, which must be this code's (else every table made here is stamped wrong)."""
    assert cached.MEASURING_CODE == fingerprint.measuring(), (
        f"the measuring code's fingerprint is {fingerprint.measuring()}: set "
        "vitplast.cached.MEASURING_CODE to it, and remake or re-stamp the shipped tables")


def test_a_process_that_never_imports_the_measuring_code_serves_the_shipped_tables():
    """Reading a shipped measurement needs no import of the measuring code's fingerprint
    (``vitplast.measure.fingerprint``) first: a fresh process that only opens a store reads its
    plasticity file, and says nothing."""
    import subprocess
    import sys

    name = next(p.name for p in sorted((DATA / "finetune").glob("plasticity-*.json")))
    done = subprocess.run([sys.executable, "-c", _READ_ONLY, name], cwd=DATA.parent,
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr


#: A process that opens a store and reads a measured companion (its name: argv[1]), no more.
_READ_ONLY = ("import sys; from vitplast.experiments.store import Store; "
              "assert Store('data/finetune').companion(sys.argv[1]) is not None; "
              "assert 'vitplast.measure.fingerprint' not in sys.modules")
