"""Measured tables kept beside a study: ``kept_table`` is ``cached.load_or_compute`` for a
table that does not change between users (a measurement of the shipped model, its weights'
sha256 among its parameters): given a study's folder, the table is kept there as the companion
``table-<hash>.json`` (``store.COMPANIONS``, schema ``vitplast/schemas/table.schema.json``),
computed once, shipped in ``data/``, and read on every fresh clone instead of measured.

A companion is read through ``Store.companion``: one that fails its schema is set aside and
computed again; one whose parameters are not the ones asked for (stale) or whose rows do not
fit its columns is computed again and replaced (``kept_problems`` says why). Each holds the
provenance of its computation (``provenance.provenance``) and how long it took.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

from vitplast.cached import config_hash, load_or_compute
from vitplast.experiments.provenance import provenance
from vitplast.experiments.store import Store

__all__ = ["kept_problems", "kept_table"]


def kept_table(name: str, params: dict, compute, root: str | Path | None = None):
    """``load_or_compute(name, params, compute)`` in the user's cache; with ``root`` (a study's
    folder) the same table kept there instead, as the companion ``root/table-<hash>.json``
    (the hash of ``name`` and ``params``; schema ``table``): a measurement that does not change
    between users (of the shipped model, its weights in ``params``), computed once, shipped, and
    read on every fresh clone.

    Read through ``Store.companion``, so validated: a file that fails its schema is set aside
    and computed again; one whose ``table`` or ``params`` are not the ones asked for (stale),
    or whose rows do not fit its columns, is computed again and replaced (with a warning).
    Written with the provenance of the computation (``provenance.provenance``: machine,
    versions, git commit, date) and its wall ``seconds``. Columns keep their dtypes
    (categoricals their categories and order); a missing value is stored as null.
    """
    if root is None:
        return load_or_compute(name, params, compute)
    asked = json.loads(json.dumps(dict(table=name, params=params), default=str))
    file, store = f"table-{config_hash(asked)}.json", Store(root)
    saved = store.companion(file, compute=lambda: _as_kept(name, params, compute))
    problems = kept_problems(saved, asked)
    if not problems:
        return _from_kept(saved)
    warnings.warn(f"{Path(root) / file} is not used ({'; '.join(problems)}): computed again",
                  stacklevel=2)
    saved = _as_kept(name, params, compute)
    store.write_companion(file, saved)
    return _from_kept(json.loads(json.dumps(saved, default=str)))


def kept_problems(saved: dict, asked: dict) -> list[str]:
    """Why a ``kept_table`` companion (schema-valid) is not the table ``asked`` for
    (``table`` and ``params`` as JSON): other parameters, or rows that do not fit its
    columns or their dtypes; empty when it is."""
    moved = [k for k in ("table", "params") if saved.get(k) != asked[k]]
    if moved:
        return [f"{' and '.join(moved)} differ from the ones asked for (stale)"]
    width = len(saved["columns"])
    if any(len(row) != width for row in saved["rows"]):
        return [f"rows that do not have one value per column ({width})"]
    try:
        _from_kept(saved)
    except (TypeError, ValueError) as err:
        return [f"values that do not fit their column's dtype: {err}"]
    return []


def _as_kept(name: str, params: dict, compute) -> dict:
    """The companion of ``kept_table``: ``compute()``'s table with what it was computed with."""
    start = time.perf_counter()
    df = compute()
    if not isinstance(df, pd.DataFrame) or not df.index.equals(pd.RangeIndex(len(df))):
        raise TypeError("kept_table keeps tables (DataFrames) with a default index")
    columns, values = [], []
    for col_name, col in df.items():
        spec = dict(name=str(col_name), dtype=str(col.dtype))
        if isinstance(col.dtype, pd.CategoricalDtype):
            spec.update(categories=col.cat.categories.tolist(), ordered=bool(col.cat.ordered))
        columns.append(spec)
        values.append([None if pd.isna(v) else v for v in col.astype(object).tolist()])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    made = dict(provenance(device), seconds=round(time.perf_counter() - start, 1))
    kept = dict(table=name, params=params, columns=columns,
                rows=[list(r) for r in zip(*values)] if values else [],
                attrs=dict(df.attrs), provenance=made)
    return json.loads(json.dumps(kept, default=lambda v: v.item() if hasattr(v, "item")
                                 else str(v)))  # numpy scalars as numbers, not text


def _from_kept(saved: dict):
    """The table a ``kept_table`` companion holds, each column in its stored dtype."""
    names = [c["name"] for c in saved["columns"]]
    df = pd.DataFrame(saved["rows"], columns=names)
    for i, spec in enumerate(saved["columns"]):
        col = df.iloc[:, i]
        if "categories" not in spec:
            df.isetitem(i, col.astype(spec["dtype"]))
            continue
        strays = set(col.dropna()) - set(spec["categories"])
        if strays:
            raise ValueError(f"column {spec['name']!r} holds {sorted(map(str, strays))}, not "
                             f"among its categories {spec['categories']}")
        df.isetitem(i, pd.Categorical(col, categories=spec["categories"],
                                      ordered=spec.get("ordered", False)))
    df.attrs.update(saved.get("attrs") or {})
    return df
