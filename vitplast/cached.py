"""Load-or-compute: an expensive result computed once, stored under a hash of its parameters.

``load_or_compute`` keeps a DataFrame as arrays in an ``.npz`` (never a pickle) with its
parameters beside it; ``config_hash`` is the short stable hash that names it, and names the
study stores' companion files. A companion (``companion``, ``write_companion``) is a JSON file
kept beside a study's records, of a kind ``COMPANIONS`` names by its file name, written once and
checked against its published schema whenever it is read. ``kept_table`` is
``load_or_compute`` for a table that does not change between users (a measurement of the shipped
model, its weights' sha256 among its parameters): given a study's folder, kept there as the
companion ``table-<hash>.json``, computed once, shipped in ``data/`` and read on a fresh clone.

Each ``.npz`` holds an index (its ``schema`` entry, JSON) saying which arrays make each column;
the index passes the published ``cache-index`` schema (``vitplast/schemas/``) and names arrays
that are there, of one length, or the file is not used: ``table_problems`` says why, a warning
names it, and it is computed again. ``audit`` lists every such file of a cache folder.

Every table made here carries the fingerprint of the code and component table that measured
it (``measured_by``, ``measure.fingerprint.stamp``), compared on load rather than hashed into
its name: a table made by other code is recomputed with one line on stderr saying why
(``stale``), and shipped tables keep their names when ``fingerprint.restamp`` re-stamps them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import sys
import warnings
from pathlib import Path

from vitplast import frames, schema
from vitplast.files import atomic_path, cache_dir, read_checked, read_json, set_aside, write_json

#: ``measure.fingerprint.measuring()`` of the default component table (a layer above, not
#: imported here; a test holds the two equal): the stamp of a table whose caller passes no
#: ``measured_by`` (advice, probes, recipes, the explorer measure with that table), and ``audit``'s.
MEASURING_CODE = "m1-43d6f8301868"


def stale(what, made: str | None, then: str = "recomputing", *, now=None) -> str | None:
    """The line saying why the table ``what``, made by the measuring code ``made`` (``None``:
    before fingerprints), is not served, and what ``then``; ``None`` if this code (``now``,
    default ``MEASURING_CODE``: ``fingerprint.measuring`` of the table measured with) made it."""
    now = now or MEASURING_CODE
    if made == now:
        return None
    return f"{what}: made by measuring code {made or '(none recorded)'}, this is {now}: {then}"


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-serialisable config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_or_compute(name: str, params: dict, compute, folder: str | Path | None = None, *,
                    measured_by: str | None = None):
    """Return the cached result of ``compute()`` (a DataFrame) for ``params``, computing it
    once.

    The table is stored atomically as data, never as a pickle (a cache folder shared on a
    cluster must not be able to run code when a notebook reads it): ``<folder>/<name>-<hash
    of params>.npz``, one array per column (``numpy.load(allow_pickle=False)`` reads it), its
    dtypes, categories and ``attrs`` as JSON inside (its index), the params beside it in a
    ``.json``. A file that is unreadable or whose index fails (``table_problems``) is
    computed again, with a warning naming it and why; one made by other measuring code
    (module docstring; ``measured_by``, ``MEASURING_CODE`` by default) with one line saying so.
    """
    import pandas as pd

    folder = _folder(folder)
    path = folder / f"{name}-{config_hash(params)}.npz"
    if path.exists():
        problems = table_problems(path)
        try:
            if not problems and not _outdated(path, frames.entries(path).get("measured_by"),
                                              now=measured_by):
                return frames.read_frame(path)
        except Exception as err:  # readable index, unreadable table: recompute
            problems = [f"unreadable: {type(err).__name__}: {err}"]
        if problems:
            warnings.warn(f"{path} is not used ({'; '.join(problems)}): computed again",
                          stacklevel=2)
    result = compute()
    if not isinstance(result, pd.DataFrame):
        raise TypeError(f"load_or_compute caches tables (DataFrames), got {type(result)}")
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        frames.write_frame(result, f, measured_by=json.dumps(measured_by or MEASURING_CODE))
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
    not use, and why: a DataFrame with ``file``, ``kind`` ("invalid table", or "stale table":
    made by other measuring code) and ``problem``."""
    import pandas as pd

    rows = []
    for p in sorted(_folder(folder).glob("*.npz")):
        if found := table_problems(p):
            rows.append(dict(file=p.name, kind="invalid table", problem="; ".join(found)))
        elif line := stale(p.name, frames.entries(p).get("measured_by")):
            rows.append(dict(file=p.name, kind="stale table", problem=line))
    return pd.DataFrame(rows, columns=["file", "kind", "problem"])


def _outdated(path: Path, made: str | None, then: str = "recomputing", *, now=None) -> bool:
    """Whether other measuring code made the table at ``path``, said on stderr (``stale``)."""
    line = stale(path, made, then, now=now)
    if line:
        print(line, file=sys.stderr)
    return line is not None


def _folder(folder: str | Path | None) -> Path:
    return Path(folder) if folder is not None else cache_dir() / "results"


# companion files of a study store ----------------------------------------------------------

#: JSON files a store holds beside its records: file-name pattern -> the schema it passes
#: (``vitplast.schema``; ``companion``): the sweep's session log, the confound study's
#: measurements (scales, per-block plasticity, plasticity after finetuning), the suite study's
#: (plasticity, also relative, and linear probes), the advice rules' rankings and measured tables
#: (``kept_table``). A new kind: its schema document and one line here.
COMPANIONS = {"study.json": "study",
              "scales-*.json": "scales",
              "layers-*.json": "layers",
              "after-*.json": "after",
              "plasticity-*.json": "plasticity",
              "probe-*.json": "probe",
              "advise-*.json": "advise",
              "table-*.json": "table"}
#: Companion kinds that are measurements (``measured_by``; not the log, nor linear probes).
MEASURED = ("table", "plasticity", "layers", "scales", "after", "advise")


def companion_problems(path: str | Path, components=None) -> list[str]:
    """Why the companion file at ``path`` does not pass the schema of its kind
    (``COMPANIONS``); empty if it does. ``components``: as ``schema.problems``."""
    return _read_companion(path, components)[1]


def _read_companion(path: str | Path, components=None) -> tuple:
    """The companion at ``path`` and its ``companion_problems``, checked once per version of
    the file (and ``components``) within this process (``files.read_checked``)."""
    kind, names = companion_kind(Path(path).name), components and tuple(components)

    def check(saved):
        return ["not JSON (unreadable or half-written)"] if saved is None else schema.problems(
            kind, saved, names)
    return read_checked(path, f"companion {kind} {names or ''}", check)


def companion_kind(name: str) -> str:
    """The schema of a companion file named ``name`` (``COMPANIONS``); ``ValueError`` naming
    the kinds when ``name`` is none of them (or not a bare file name)."""
    kind = next((k for pattern, k in COMPANIONS.items() if fnmatch.fnmatch(name, pattern)), None)
    if kind is None or Path(name).name != name:
        raise ValueError(f"{name!r} is not a companion file of a store; valid: "
                         f"{list(COMPANIONS)} (a file name, no folder)")
    return kind


def companion(root: str | Path, name: str, compute=None, *, measured_by: str | None = None,
              components=None) -> dict | None:
    """The companion file ``root/name`` of a study store (``COMPANIONS``): when there is none,
    ``None``, or with ``compute`` (a function of no argument returning its content) its content
    computed once and written (``write_companion``): a measurement kept beside the runs.
    A file there that fails its schema is never used: with ``compute`` it is set aside
    (``files.set_aside``, with a warning naming it and its problems) and computed again; a
    measurement (``MEASURED``) made by other code too (``measured_by``, ``MEASURING_CODE`` by
    default), one line saying so (``stale``). ``components``: the names it may hold, those of
    the component table measured with (``schema.check``; None: any).

    Raises:
        ValueError: ``name`` is not a companion kind's (naming the kinds), or the file
            fails its schema and there is no ``compute`` (naming it, its problems and the
            fix; a study log's fix keeps its sessions: ``study_log.restart_log``).
    """
    kind = companion_kind(name)
    root = Path(root)
    path = root / name
    saved, problems = _read_companion(path, components) if path.exists() else (None, [])
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
    outdated = kind in MEASURED and path.exists() and _outdated(
        path, (saved or {}).get("measured_by"), "recomputing" if compute else "not used",
        now=measured_by)
    if not path.exists() or outdated:
        if compute is None:
            return None
        content = compute()
        return read_json(write_companion(root, name, content, measured_by=measured_by,
                                         components=components))
    return saved if saved is not None and not problems else read_json(path)


def write_companion(root: str | Path, name: str, content: dict, *,
                    measured_by: str | None = None, components=None) -> Path:
    """Store ``content`` as the companion file ``root/name``, atomically (a measurement
    stamped ``measured_by``, ``MEASURING_CODE`` by default); return its path (``components``
    as ``companion``).

    Raises:
        ValueError: ``name`` is not a companion kind's (naming the kinds), or ``content``
            as stored (JSON) fails its schema (``companion`` would refuse it); nothing is
            written then.
    """
    kind = companion_kind(name)
    stored = json.loads(json.dumps(content, default=str))
    if kind in MEASURED:
        stored["measured_by"] = measured_by or MEASURING_CODE
    schema.check(kind, stored, f"{name}: not a complete {kind} file; not written", components)
    return write_json(Path(root) / name, stored)


# measured tables kept beside a study -------------------------------------------------------

def kept_table(name: str, params: dict, compute, root: str | Path | None = None, *,
               arrays: bool = False, measured_by: str | None = None, components=None):
    """``load_or_compute(name, params, compute)`` in the user's cache; with ``root`` (a study's
    folder) the same table kept there instead, as the companion ``root/table-<hash>.json``
    (the hash of ``name`` and ``params``; schema ``table``): a measurement that does not change
    between users (of the shipped model, its weights in ``params``), computed once, shipped, and
    read on every fresh clone.

    Read through ``companion``, so validated: a file that fails its schema is set aside
    and computed again; one whose ``table`` or ``params`` are not the ones asked for (stale),
    or whose rows do not fit its columns, is computed again and replaced (with a warning),
    as is one made by other measuring code (with one line). Written with that fingerprint,
    the provenance of the computation (``provenance.provenance``: machine, versions, git
    commit, date) and its wall ``seconds``. Columns keep their dtypes (categoricals their
    categories and order); a missing value is stored as null.

    ``arrays``: a large table (per-pair rates) kept as compressed arrays instead,
    ``root/table-<hash>.npz`` (``load_or_compute``'s format, its index checked by
    ``table_problems``; ``table``, ``params`` and ``provenance`` in its ``kept`` entry); one
    that fails its index, or kept for other parameters or code (``measured_by``, default
    ``MEASURING_CODE``), is computed again (``components``: as ``companion``).
    """
    if root is None:
        return load_or_compute(name, params, compute, measured_by=measured_by)
    asked = json.loads(json.dumps(dict(table=name, params=params), default=str))
    file = f"table-{config_hash(asked)}.json"
    if arrays:
        return _kept_arrays(Path(root) / file.replace(".json", ".npz"), asked, compute,
                            measured_by)
    saved = companion(root, file, compute=lambda: _as_kept(name, params, compute),
                      measured_by=measured_by, components=components)
    problems = kept_problems(saved, asked)
    if not problems:
        return _from_kept(saved)
    warnings.warn(f"{Path(root) / file} is not used ({'; '.join(problems)}): computed again",
                  stacklevel=2)
    saved = _as_kept(name, params, compute)
    write_companion(root, file, saved, measured_by=measured_by, components=components)
    return _from_kept(json.loads(json.dumps(saved, default=str)))


def kept_problems(saved: dict, asked: dict) -> list[str]:
    """Why a ``kept_table`` companion (schema-valid) is not the table ``asked`` for
    (``table`` and ``params`` as JSON): other parameters, or rows that do not fit its
    columns or their dtypes; empty when it is."""
    if moved := _other_params(saved, asked):
        return moved
    width = len(saved["columns"])
    if any(len(row) != width for row in saved["rows"]):
        return [f"rows that do not have one value per column ({width})"]
    try:
        _from_kept(saved)
    except (TypeError, ValueError) as err:
        return [f"values that do not fit their column's dtype: {err}"]
    return []


def _other_params(saved: dict, asked: dict) -> list[str]:
    """Why a kept table is not the one asked for: another table name or other parameters."""
    moved = [k for k in ("table", "params") if saved.get(k) != asked[k]]
    return [f"{' and '.join(moved)} differ from the ones asked for (stale)"] if moved else []


def _kept_arrays(path: Path, asked: dict, compute, measured_by: str | None = None):
    """``kept_table(..., arrays=True)``: the table of ``path`` when its index passes and its
    ``kept`` entry names ``asked``, else ``compute()``'s, written there with its provenance."""
    if path.exists():
        problems = table_problems(path)
        if not problems:
            saved = frames.entries(path)
            problems = _other_params(saved.get("kept", {}), asked)
        if not problems and not _outdated(path, saved.get("measured_by"), now=measured_by):
            return frames.read_frame(path)
        if problems:
            warnings.warn(f"{path} is not used ({'; '.join(problems)}): computed again",
                          stacklevel=3)
    df, made = _computed(compute)
    kept = json.dumps(dict(asked, provenance=made), default=str)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        frames.write_frame(df, f, compressed=True, kept=kept,
                           measured_by=json.dumps(measured_by or MEASURING_CODE))
    return df


def _computed(compute):
    """``compute()``'s table (a DataFrame with a default index, else ``TypeError``) and its
    provenance (``provenance.provenance``, with the wall ``seconds`` it took)."""
    import time

    import pandas as pd
    import torch

    from vitplast.provenance import provenance

    start = time.perf_counter()
    df = compute()
    if not isinstance(df, pd.DataFrame) or not df.index.equals(pd.RangeIndex(len(df))):
        raise TypeError("kept_table keeps tables (DataFrames) with a default index")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return df, dict(provenance(device), seconds=round(time.perf_counter() - start, 1))


def _as_kept(name: str, params: dict, compute) -> dict:
    """The companion of ``kept_table``: ``compute()``'s table with what it was computed with."""
    import pandas as pd

    df, made = _computed(compute)
    columns, values = [], []
    for col_name, col in df.items():
        spec = dict(name=str(col_name), dtype=str(col.dtype))
        if isinstance(col.dtype, pd.CategoricalDtype):
            spec.update(categories=col.cat.categories.tolist(), ordered=bool(col.cat.ordered))
        columns.append(spec)
        values.append([None if pd.isna(v) else v for v in col.astype(object).tolist()])
    kept = dict(table=name, params=params, columns=columns,
                rows=[list(r) for r in zip(*values)] if values else [],
                attrs=dict(df.attrs), provenance=made)
    return json.loads(json.dumps(kept, default=lambda v: v.item() if hasattr(v, "item")
                                 else str(v)))  # numpy scalars as numbers, not text


def _from_kept(saved: dict):
    """The table a ``kept_table`` companion holds, each column in its stored dtype."""
    import pandas as pd

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
