"""Load-or-compute: an expensive table computed once, stored under a hash of its parameters.

``load_or_compute`` keeps a DataFrame as arrays in an ``.npz`` (never a pickle) with its
parameters beside it; ``config_hash`` is the short stable hash that names it, and names the
study stores' companion files (``store.COMPANIONS``). ``vitplast.store`` re-exports both.

Each ``.npz`` holds an index (its ``schema`` entry, JSON) saying which arrays make each column;
the index passes the published ``cache-index`` schema (``vitplast/schemas/``) and names arrays
that are there, of one length, or the file is not used: ``table_problems`` says why, a warning
names it, and it is computed again. ``audit`` lists every such file of a cache folder.

Used by ``vitplast.empirical``, ``vitplast.stream``, ``vitplast.advise`` and the confound and
suite studies' measurements.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from vitplast import schema
from vitplast.files import atomic_path, write_json


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-serialisable config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]



def load_or_compute(name: str, params: dict, compute, folder: str | Path | None = None):
    """Return the cached result of ``compute()`` (a DataFrame) for ``params``, computing it
    once.

    The table is stored atomically as data, never as a pickle (a cache folder shared on a
    cluster must not be able to run code when a notebook reads it): ``<folder>/<name>-<hash
    of params>.npz``, one array per column (``numpy.load(allow_pickle=False)`` reads it), its
    dtypes, categories and ``attrs`` as JSON inside (its index), the params beside it in a
    ``.json``. A file that is unreadable or whose index fails (``table_problems``) is
    computed again, with a warning naming it and why.
    """
    import warnings

    import pandas as pd

    folder = _folder(folder)
    path = folder / f"{name}-{config_hash(params)}.npz"
    if path.exists():
        problems = table_problems(path)
        try:
            if not problems:
                return _read_frame(path)
        except Exception as err:  # readable index, unreadable table: recompute
            problems = [f"unreadable: {type(err).__name__}: {err}"]
        warnings.warn(f"{path} is not used ({'; '.join(problems)}): computed again",
                      stacklevel=2)
    result = compute()
    if not isinstance(result, pd.DataFrame):
        raise TypeError(f"load_or_compute caches tables (DataFrames), got {type(result)}")
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        _write_frame(result, f)
    write_json(path.with_suffix(".json"), params)
    return result


def table_problems(path: str | Path) -> list[str]:
    """Why the cached table at ``path`` cannot be read as stored; empty when it can: not an
    ``.npz`` numpy reads without pickle, an index that fails the ``cache-index`` schema, or
    arrays the index names that are missing or of another length."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            index = json.loads(str(z["schema"]))
            found = schema.problems("cache-index", index)
            if found:
                return [f"index: {p}" for p in found]
            lengths = {}
            for i, spec in enumerate(index["columns"]):
                names = {"category": ("codes", "categories"), "numeric": ("values",),
                         "text": ("values", "missing"),
                         "masked": ("values", "missing")}[spec["kind"]]
                for stem in names:
                    if f"{stem}{i}" not in z.files:
                        return [f"column {i} ({spec['name']!r}): array {stem}{i} is missing"]
                    if stem != "categories":
                        lengths[f"{stem}{i}"] = len(z[f"{stem}{i}"])
    except Exception as err:  # not an npz, no index, index not JSON, pickled arrays
        return [f"unreadable: {type(err).__name__}: {str(err)[:120]}"]
    if len(set(lengths.values())) > 1:
        return [f"columns of different lengths: {lengths}"]
    return []


def audit(folder: str | Path | None = None):
    """Every cached table in ``folder`` (default: the cache's) that ``load_or_compute`` would
    not use, and why: a DataFrame with ``file``, ``kind`` ("invalid table") and ``problem``."""
    import pandas as pd

    rows = [dict(file=p.name, kind="invalid table", problem="; ".join(found))
            for p in sorted(_folder(folder).glob("*.npz")) if (found := table_problems(p))]
    return pd.DataFrame(rows, columns=["file", "kind", "problem"])


def _folder(folder: str | Path | None) -> Path:
    from vitplast.models import cache_dir

    return Path(folder) if folder is not None else cache_dir() / "results"


def _write_frame(df, f) -> None:
    """``df`` as arrays in an ``.npz`` (no pickled object): numbers as they are, strings as
    unicode arrays with a mask of missing values, categoricals as codes and categories."""
    import numpy as np
    import pandas as pd

    if not df.index.equals(pd.RangeIndex(len(df))):
        raise TypeError("load_or_compute caches tables with a default index (reset_index)")
    arrays, columns = {}, []
    for i, (name, col) in enumerate(df.items()):
        spec = dict(name=name, dtype=str(col.dtype))
        if isinstance(col.dtype, pd.CategoricalDtype):
            arrays[f"codes{i}"] = col.cat.codes.to_numpy()
            arrays[f"categories{i}"] = np.asarray(col.cat.categories.tolist())
            spec.update(kind="category", ordered=bool(col.cat.ordered))
        elif isinstance(col.dtype, pd.api.extensions.ExtensionDtype) and col.hasnans and (
                pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col)):
            # nullable (boolean, Int64) with missing values: NumPy would hold them as objects
            zero = col.dtype.numpy_dtype.type(0)
            arrays[f"values{i}"] = col.to_numpy(dtype=col.dtype.numpy_dtype, na_value=zero)
            arrays[f"missing{i}"] = col.isna().to_numpy()
            spec.update(kind="masked")
        elif pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            arrays[f"values{i}"] = col.to_numpy()
            spec.update(kind="numeric")
        else:
            missing = col.isna().to_numpy()
            arrays[f"values{i}"] = np.asarray(["" if m else str(v) for v, m in zip(col, missing)],
                                              dtype=str)
            arrays[f"missing{i}"] = missing
            spec.update(kind="text")
        columns.append(spec)
    schema = dict(columns=columns, attrs=df.attrs)
    np.savez(f, schema=np.asarray(json.dumps(schema, default=lambda o: o.item())), **arrays)


def _read_frame(path: Path):
    """The table ``_write_frame`` stored at ``path``."""
    import numpy as np
    import pandas as pd

    with np.load(path, allow_pickle=False) as z:
        schema = json.loads(str(z["schema"]))
        data = {}
        for i, spec in enumerate(schema["columns"]):
            if spec["kind"] == "category":
                data[spec["name"]] = pd.Categorical.from_codes(
                    z[f"codes{i}"], categories=z[f"categories{i}"].tolist(),
                    ordered=spec["ordered"])
            elif spec["kind"] == "numeric":
                data[spec["name"]] = z[f"values{i}"]
            elif spec["kind"] == "masked":
                values = pd.array(z[f"values{i}"], dtype=spec["dtype"])
                values[z[f"missing{i}"]] = pd.NA
                data[spec["name"]] = values
            else:
                values = pd.Series(z[f"values{i}"].astype(object))
                values[z[f"missing{i}"]] = None
                data[spec["name"]] = values.astype(spec["dtype"])
    df = pd.DataFrame(data)
    df.attrs.update(schema["attrs"])
    return df
