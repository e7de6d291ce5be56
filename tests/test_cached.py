"""Load-or-compute (``vitplast.cached``): a table round-trips exactly and is computed once;
the hash that names it ignores key order and tells parameters apart. A kept table
(``kept_table``) is a companion beside a study that round-trips exactly, is computed once, and
is computed again when an input changes or the file is stale, edited or fails its schema."""

import json
import re

import pytest

from vitplast import cached
from vitplast.experiments.store import Store
from vitplast.files import read_json, write_json


def test_the_hash_ignores_key_order_and_tells_parameters_apart():
    a = cached.config_hash({"task": "digits", "n_pairs": 8})
    assert a == cached.config_hash({"n_pairs": 8, "task": "digits"})
    assert len(a) == 16 and int(a, 16) >= 0
    assert a != cached.config_hash({"task": "digits", "n_pairs": 9})
    assert cached.config_hash is cached.config_hash  # the store's companions use the same one


def test_the_cache_stores_tables_as_data_and_gives_them_back_exactly(tmp_path):
    """``load_or_compute``: a table round-trips exactly (dtypes, categories, missing text,
    ``attrs``), is computed once, and is stored as arrays numpy reads without pickle (a
    shared cache cannot run code); anything but a table is refused."""
    import numpy as np
    import pandas as pd

    df = pd.DataFrame({"layer": pd.Categorical([0, 1, 1]), "rate": np.float32([0.5, 1.5, 2.5]),
                       "pair": [3, 4, 5], "task": pd.array(["a", None, "c"], dtype="str"),
                       "component": pd.Categorical(["MHA", "LN1", "MHA"],
                                                   categories=["MHA", "FC1", "LN1"]),
                       "ok": [True, False, True]})
    df.attrs["excluded"] = np.int64(2)
    calls = []

    def compute():
        calls.append(1)
        return df

    first = cached.load_or_compute("t", {"a": 1}, compute, folder=tmp_path)
    again = cached.load_or_compute("t", {"a": 1}, compute, folder=tmp_path)
    assert calls == [1] and first is df
    pd.testing.assert_frame_equal(again, df, check_exact=True)
    assert again.attrs == {"excluded": 2}
    (saved,) = tmp_path.glob("t-*.npz")
    with np.load(saved, allow_pickle=False) as z:
        assert "schema" in z.files
    with pytest.raises(TypeError, match="caches tables"):
        cached.load_or_compute("u", {}, lambda: {"not": "a table"}, folder=tmp_path)


def test_an_unreadable_cache_file_is_computed_again(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"x": [1, 2]})
    path = tmp_path / f"t-{cached.config_hash({'a': 1})}.npz"
    path.write_bytes(b"not an npz")
    with pytest.warns(UserWarning, match=r"is not used \(unreadable: .*\): computed again"):
        got = cached.load_or_compute("t", {"a": 1}, lambda: df, folder=tmp_path)
    pd.testing.assert_frame_equal(got, df)
    pd.testing.assert_frame_equal(cached.load_or_compute("t", {"a": 1}, lambda: None,
                                                         folder=tmp_path), df)
    with pytest.raises(TypeError, match="default index"):
        cached.load_or_compute("u", {}, lambda: df.set_index("x", drop=False), folder=tmp_path)


def _damage(path, index_change):
    """Rewrite the cached table at ``path`` with its index changed by ``index_change``."""
    import json

    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    index = index_change(json.loads(str(arrays.pop("schema"))))
    np.savez(path.with_suffix(".tmp.npz"), schema=np.asarray(json.dumps(index)), **arrays)
    path.with_suffix(".tmp.npz").replace(path)


@pytest.mark.parametrize("change, problem", [
    (lambda i: {"attrs": i["attrs"]}, r"index: columns is missing: expected an array"),
    (lambda i: {**i, "columns": {"0": i["columns"][0]}},
     r"index: columns=\{'0'.* is not valid: expected an array"),
    (lambda i: {**i, "columns": [{**i["columns"][0], "kind": "pickle"}]},
     r"index: columns\[0\].kind='pickle' is not valid: expected one of \['numeric', 'masked', "
     r"'text', "
     r"'category'\]"),
    (lambda i: {**i, "columns": [*i["columns"], {"name": "y", "dtype": "int64",
                                                 "kind": "numeric"}]},
     r"column 1 \('y'\): array values1 is missing"),
], ids=["key missing", "wrong type", "out of range", "array missing"])
def test_a_table_whose_index_fails_is_named_and_computed_again(tmp_path, change, problem):
    """``table_problems`` and ``audit`` name the file and why; ``load_or_compute`` does not
    use it: it warns and computes again."""
    import pandas as pd

    df = pd.DataFrame({"x": [1, 2]})
    cached.load_or_compute("t", {"a": 1}, lambda: df, folder=tmp_path)
    (path,) = tmp_path.glob("t-*.npz")
    assert cached.table_problems(path) == [] and cached.audit(tmp_path).empty
    _damage(path, change)
    (row,) = cached.audit(tmp_path).to_dict("records")
    assert row["file"] == path.name and row["kind"] == "invalid table"
    assert re.search(problem, row["problem"]), row["problem"]
    again = pd.DataFrame({"x": [3, 4]})
    with pytest.warns(UserWarning, match=f"{path.name} is not used \\(.*\\): computed again"):
        got = cached.load_or_compute("t", {"a": 1}, lambda: again, folder=tmp_path)
    assert got is again and cached.audit(tmp_path).empty


def test_nullable_columns_with_missing_values_come_back_without_recomputing(tmp_path):
    """A nullable boolean or integer column with a missing value (intervals' ``p4_holds``, NA
    where no Prop. 4 exists) is stored as values and a mask, not as objects NumPy will not
    read back: the second call reads the file instead of computing again."""
    import pandas as pd

    from vitplast.cached import load_or_compute

    df = pd.DataFrame(dict(holds=pd.array([True, None, False], dtype="boolean"),
                           count=pd.array([1, None, 3], dtype="Int64"), x=[1.0, 2.0, 3.0]))
    calls = []
    for _ in range(2):
        got = load_or_compute("t", {"k": 1}, lambda: calls.append(1) or df, folder=tmp_path)
        pd.testing.assert_frame_equal(got, df)
    assert len(calls) == 1


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

    first = cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    again = cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    assert calls == [1]
    for got in (first, again):
        pd.testing.assert_frame_equal(got, _table())
        assert got.attrs == {"excluded": 2} and got["component"].cat.categories.tolist() == [
            "MHA", "FC1", "LN1"]
    [path] = tmp_path.glob("table-*.json")
    saved = read_json(path)
    assert saved["params"] == {"a": 1} and saved["table"] == "t"
    assert {"machine", "date", "git_commit", "seconds"} <= set(saved["provenance"])
    assert cached.companion_problems(path) == [] and Store(tmp_path).audit().empty
    assert not (tmp_path / "cache").exists()  # kept in the study, not in the user's cache


def test_a_kept_table_is_computed_again_when_an_input_changes_or_the_file_is_stale(tmp_path):
    """Other parameters name another file (computed); a file whose parameters or rows are
    not the ones asked for (stale, edited) is computed again and replaced, with a warning;
    one that fails its schema is set aside and computed again."""
    calls = []

    def compute():
        calls.append(1)
        return _table()

    cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    cached.kept_table("t", {"a": 2}, compute, root=tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("table-*.json"))) == 2
    path = tmp_path / f"table-{cached.config_hash(dict(table='t', params={'a': 1}))}.json"
    saved = read_json(path)
    stale = [dict(saved, params={"a": 3}), dict(saved, rows=[r[:-1] for r in saved["rows"]]),
             dict(saved, rows=[[0, 0.5, "a", "FC2", True]])]
    for content in stale:
        write_json(path, content)
        with pytest.warns(UserWarning, match="is not used .*computed again"):
            cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
        assert read_json(path)["rows"] == saved["rows"]  # replaced by the fresh one
    assert len(calls) == 5
    write_json(path, dict(saved, columns=[]))  # fails the schema: set aside
    with pytest.warns(UserWarning, match="does not pass the table schema"):
        cached.kept_table("t", {"a": 1}, compute, root=tmp_path)
    assert len(calls) == 6 and len(list(tmp_path.glob(f"{path.name}.invalid-*"))) == 1


def test_without_a_study_folder_a_kept_table_is_the_users_load_or_compute(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    got = cached.kept_table("t", {"a": 1}, _table)
    assert [p.name for p in tmp_path.glob("*")] == ["cache"]
    assert len(list((tmp_path / "cache" / "results").glob("t-*.npz"))) == 1
    assert got.equals(cached.load_or_compute("t", {"a": 1}, lambda: 1 / 0))
    with pytest.raises(TypeError, match="keeps tables"):
        cached.kept_table("u", {}, lambda: [1, 2], root=tmp_path)


def test_a_large_kept_table_is_kept_as_arrays_read_back_and_computed_again_when_stale(
        tmp_path):
    """``kept_table(..., arrays=True)``: ``table-<hash>.npz`` beside the study (not a JSON
    companion), read back exactly without computing; other parameters name another file; a
    file kept for other parameters, or whose index fails, is computed again and replaced with
    a warning."""
    import shutil

    import numpy as np
    import pandas as pd

    calls = []

    def compute():
        calls.append(1)
        return _table()

    first = cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True)
    again = cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True)
    assert calls == [1] and not list(tmp_path.glob("*.json"))
    for got in (first, again):
        pd.testing.assert_frame_equal(got, _table())
    [path] = tmp_path.glob("table-*.npz")
    assert path.stem == f"table-{cached.config_hash(dict(table='t', params={'a': 1}))}"
    with np.load(path, allow_pickle=False) as z:
        kept = json.loads(str(z["kept"]))
    assert kept["params"] == {"a": 1} and "seconds" in kept["provenance"]
    cached.kept_table("t", {"a": 2}, compute, root=tmp_path, arrays=True)
    assert len(calls) == 2 and len(list(tmp_path.glob("table-*.npz"))) == 2
    other = tmp_path / f"table-{cached.config_hash(dict(table='t', params={'a': 2}))}.npz"
    shutil.copyfile(other, path)  # kept for {"a": 2} under {"a": 1}'s name: stale
    with pytest.warns(UserWarning, match="stale.*computed again"):
        cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True)
    path.write_bytes(b"not an npz")
    with pytest.warns(UserWarning, match="unreadable.*computed again"):
        got = cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True)
    assert len(calls) == 4 and got.equals(_table())
    assert cached.kept_table("t", {"a": 1}, compute, root=tmp_path, arrays=True).equals(got)
    assert len(calls) == 4
