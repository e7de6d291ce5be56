"""Load-or-compute: an expensive result computed once, stored under a hash of its parameters.

``load_or_compute`` keeps a DataFrame as arrays in an ``.npz`` (never a pickle) with its
parameters beside it; ``config_hash`` is the short stable hash that names it, and names the
study stores' companion files. A companion (``companion``, ``write_companion``) is a JSON file
kept beside a study's records, of a kind ``COMPANIONS`` names by its file name, written once and
checked against its published schema whenever it is read.

Each ``.npz`` holds an index (its ``schema`` entry, JSON) saying which arrays make each column;
the index passes the published ``cache-index`` schema (``vitplast/schemas/``) and names arrays
that are there, of one length, or the file is not used: ``table_problems`` says why, a warning
names it, and it is computed again. ``audit`` lists every such file of a cache folder.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import warnings
from pathlib import Path

from vitplast import schema
from vitplast.files import atomic_path, read_json, set_aside, write_json


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


# companion files of a study store ----------------------------------------------------------

#: JSON files a store holds beside its records: file-name pattern -> the schema it passes
#: (``vitplast.schema``; ``companion``): the sweep's session log, the confound study's
#: measurements (scales, per-block plasticity, plasticity after finetuning), the suite study's
#: (plasticity, also relative, and linear probes) and the advice rules' rankings. A new kind: its
#: schema document and one line here.
COMPANIONS = {"study.json": "study",
              "scales-*.json": "scales",
              "layers-*.json": "layers",
              "after-*.json": "after",
              "plasticity-*.json": "plasticity",
              "probe-*.json": "probe",
              "advise-*.json": "advise"}


def companion_problems(path: str | Path) -> list[str]:
    """Why the companion file at ``path`` does not pass the schema of its kind
    (``COMPANIONS``); empty if it does."""
    kind = companion_kind(Path(path).name)
    saved = read_json(path)
    if saved is None:
        return ["not JSON (unreadable or half-written)"]
    return schema.problems(kind, saved)


def companion_kind(name: str) -> str:
    """The schema of a companion file named ``name`` (``COMPANIONS``); ``ValueError`` naming
    the kinds when ``name`` is none of them (or not a bare file name)."""
    kind = next((k for pattern, k in COMPANIONS.items() if fnmatch.fnmatch(name, pattern)), None)
    if kind is None or Path(name).name != name:
        raise ValueError(f"{name!r} is not a companion file of a store; valid: "
                         f"{list(COMPANIONS)} (a file name, no folder)")
    return kind


def companion(root: str | Path, name: str, compute=None) -> dict | None:
    """The companion file ``root/name`` of a study store (``COMPANIONS``): when there is none,
    ``None``, or with ``compute`` (a function of no argument returning its content) its content
    computed once and written (``write_companion``): a measurement kept beside the runs.
    A file there that fails its schema is never used: with ``compute`` it is set aside
    (``files.set_aside``, with a warning naming it and its problems) and computed again.

    Raises:
        ValueError: ``name`` is not a companion kind's (naming the kinds), or the file
            fails its schema and there is no ``compute`` (naming it, its problems and the
            fix; a study log's fix keeps its sessions: ``study_log.restart_log``).
    """
    kind = companion_kind(name)
    root = Path(root)
    path = root / name
    problems = companion_problems(path) if path.exists() else []
    if problems and compute is None:
        fix = (f"refused, so that no session is lost: set it aside and start a new log "
               f"that points to it with vitplast.experiments.study_log.restart_log"
               f"({str(root)!r})" if kind == "study" else
               "not used: the call that measures it (with compute) sets it aside and "
               "measures it again")
        raise ValueError(f"{path} does not pass the {kind} schema ({schema.FOLDER.name}/"
                         f"{kind}.schema.json): {'; '.join(problems)}; {fix}")
    if problems:
        aside = set_aside(path)
        warnings.warn(f"{path} does not pass the {kind} schema: {'; '.join(problems)}; set "
                      f"aside as {aside.name} and computed again", stacklevel=2)
    if not path.exists():
        if compute is None:
            return None
        content = compute()
        write_companion(root, name, content)
        return json.loads(json.dumps(content, default=str))
    return read_json(path)


def write_companion(root: str | Path, name: str, content: dict) -> Path:
    """Store ``content`` as the companion file ``root/name``, atomically; return its path.

    Raises:
        ValueError: ``name`` is not a companion kind's (naming the kinds), or ``content``
            as stored (JSON) fails its schema (``companion`` would refuse it); nothing is
            written then.
    """
    kind = companion_kind(name)
    stored = json.loads(json.dumps(content, default=str))
    schema.check(kind, stored, f"{name}: not a complete {kind} file; not written")
    return write_json(Path(root) / name, stored)
