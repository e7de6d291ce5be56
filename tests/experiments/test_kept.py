"""Measured tables kept beside a study (``vitplast.experiments.kept``): a companion
``table-<hash>.json`` that round-trips exactly, is computed once, and is computed again when an
input changes or the file is stale, edited or fails its schema; without a study's folder, the
user's load-or-compute cache."""

import pytest

from vitplast import cached, store
from vitplast.experiments.kept import kept_table


def _table():
    import numpy as np
    import pandas as pd

    df = pd.DataFrame({"layer": [0, 1, 1], "rate": np.float32([0.5, 1.5, np.nan]),
                       "task": pd.array(["a", None, "c"], dtype="str"),
                       "component": pd.Categorical(["MHA", "LN1", "MHA"],
                                                   categories=["MHA", "FC1", "LN1"]),
                       "ok": [True, False, True]})
    df.attrs["excluded"] = np.int64(2)
    return df


def test_a_kept_table_is_a_companion_beside_the_study_and_comes_back_exactly(tmp_path,
                                                                              monkeypatch):
    """``kept_table`` with a study's folder: written there once as ``table-<hash>.json`` (a
    valid companion with its parameters and provenance), read back with its dtypes,
    categories, missing values and ``attrs``; the user's cache is not touched."""
    import pandas as pd

    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    calls = []

    def compute():
        calls.append(1)
        return _table()

    first = kept_table("t", {"a": 1}, compute, root=tmp_path)
    again = kept_table("t", {"a": 1}, compute, root=tmp_path)
    assert calls == [1]
    for got in (first, again):
        pd.testing.assert_frame_equal(got, _table())
        assert got.attrs == {"excluded": 2} and got["component"].cat.categories.tolist() == [
            "MHA", "FC1", "LN1"]
    [path] = tmp_path.glob("table-*.json")
    saved = store.read_json(path)
    assert saved["params"] == {"a": 1} and saved["table"] == "t"
    assert {"machine", "date", "git_commit", "seconds"} <= set(saved["provenance"])
    assert store.companion_problems(path) == [] and store.Store(tmp_path).audit().empty
    assert not (tmp_path / "cache").exists()  # kept in the study, not in the user's cache


def test_a_kept_table_is_computed_again_when_an_input_changes_or_the_file_is_stale(tmp_path):
    """Other parameters name another file (computed); a file whose parameters or rows are
    not the ones asked for (stale, edited) is computed again and replaced, with a warning;
    one that fails its schema is set aside and computed again."""
    calls = []

    def compute():
        calls.append(1)
        return _table()

    kept_table("t", {"a": 1}, compute, root=tmp_path)
    kept_table("t", {"a": 2}, compute, root=tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("table-*.json"))) == 2
    path = tmp_path / f"table-{cached.config_hash(dict(table='t', params={'a': 1}))}.json"
    saved = store.read_json(path)
    stale = [dict(saved, params={"a": 3}), dict(saved, rows=[r[:-1] for r in saved["rows"]]),
             dict(saved, rows=[[0, 0.5, "a", "FC2", True]])]
    for content in stale:
        store.write_json(path, content)
        with pytest.warns(UserWarning, match="is not used .*computed again"):
            kept_table("t", {"a": 1}, compute, root=tmp_path)
        assert store.read_json(path)["rows"] == saved["rows"]  # replaced by the fresh one
    assert len(calls) == 5
    store.write_json(path, dict(saved, columns=[]))  # fails the schema: set aside
    with pytest.warns(UserWarning, match="does not pass the table schema"):
        kept_table("t", {"a": 1}, compute, root=tmp_path)
    assert len(calls) == 6 and len(list(tmp_path.glob(f"{path.name}.invalid-*"))) == 1


def test_without_a_study_folder_a_kept_table_is_the_users_load_or_compute(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    got = kept_table("t", {"a": 1}, _table)
    assert [p.name for p in tmp_path.glob("*")] == ["cache"]
    assert len(list((tmp_path / "cache" / "results").glob("t-*.npz"))) == 1
    assert got.equals(cached.load_or_compute("t", {"a": 1}, lambda: 1 / 0))
    with pytest.raises(TypeError, match="keeps tables"):
        kept_table("u", {}, lambda: [1, 2], root=tmp_path)
