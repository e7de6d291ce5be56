"""A table (DataFrame) as arrays in an ``.npz``, never a pickle: the storage of
``cached.load_or_compute`` and of the large tables ``cached.kept_table`` keeps beside a study.

``write_frame`` stores one array per column (numbers as they are, text as unicode arrays with a
mask of missing values, categoricals as codes and categories, nullable numbers as values and a
mask) and an index (its ``schema`` entry, JSON: each column's name, dtype and kind, and the
table's ``attrs``) that passes the published ``cache-index`` schema; ``read_frame`` gives the
table back exactly. ``numpy.load(allow_pickle=False)`` reads the file: a cache folder shared on
a cluster cannot run code when it is read.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_frame(df, f, compressed: bool = False, **extra) -> None:
    """Write ``df`` (default index, else ``TypeError``) to the open file ``f`` as arrays in an
    ``.npz`` (module docstring), compressed or not; ``extra`` (name -> JSON text) stored
    beside them (``cached.kept_table``'s ``kept`` entry)."""
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
    save = np.savez_compressed if compressed else np.savez
    save(f, schema=np.asarray(json.dumps(schema, default=lambda o: o.item())),
         **{k: np.asarray(v) for k, v in extra.items()}, **arrays)


def entries(path: str | Path) -> dict:
    """The JSON entries ``write_frame`` stored beside the table at ``path`` (its ``extra``:
    ``cached.kept_table``'s ``kept``, the ``measured_by`` of every cached table)."""
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        return {k: json.loads(str(z[k])) for k in ("kept", "measured_by") if k in z.files}


def read_frame(path: str | Path):
    """The table ``write_frame`` stored at ``path``."""
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
