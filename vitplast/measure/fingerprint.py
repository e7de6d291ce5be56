"""The fingerprint of the measuring code: what every load-or-compute table and every kept or
shipped table carries, so that a table made by other code is recomputed, never served.

``measuring()`` is ``"m<MEASURE_VERSION>-<component table's fingerprint>"``:

- ``MEASURE_VERSION``, an integer that a change to the estimator (the functions ``ESTIMATOR``
  names) must bump. A version, not a hash of the estimator's source: a hash would invalidate
  every shipped table on any whitespace, comment or docstring edit, or on a refactor that
  leaves every number as it was; a version is bumped on purpose, when the numbers change. So
  that it is not forgotten, ``estimator_hash`` (the estimator's code without its docstrings,
  comments and layout) is pinned by a test that fails with "the estimator changed: bump
  MEASURE_VERSION and remake or re-stamp the shipped tables" when it moves.
- the component table's fingerprint (``components.fingerprint``): which units are measured,
  where each is tapped, which parameters each trains, how the gauge moves each rate and which
  bound each has: tables measured for another set of components are stale without any
  estimator edit.

The fingerprint is stored in the tables (``cached``), not in the hash that names them, so that
a stale table can be named with one line saying why (``cached.stale``) and shipped tables keep
their names when re-stamped (``restamp``). Run dicts (``experiments.runs.run_hash``) do not
carry it: a run is what was trained, the fingerprint is how it was measured.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import textwrap
from pathlib import Path

import numpy as np

from vitplast import cached, frames
from vitplast.files import atomic_path, read_json
from vitplast.measure import components as component_table
from vitplast.measure.components import TABLE, fingerprint

#: The version of the measuring code: bump it when a change to the estimator (``ESTIMATOR``)
#: changes the numbers it gives, then remake the shipped tables (or ``restamp`` them).
MEASURE_VERSION = 1

#: The estimator: the functions a measured rate or plasticity passes through (module ->
#: names), whose code ``estimator_hash`` fingerprints. Definition 1's rate, the hooked pass,
#: the per-pair table and its summaries. The other measurements (bounds, stream statistics,
#: relative plasticity, LayerNorm scales) are not hashed: a change to their numbers bumps
#: ``MEASURE_VERSION`` by hand.
ESTIMATOR = {"vitplast.measure.rates": ["rate", "_pair_distance", "_pair_rate", "_Rates",
                                        "embed", "_pad_to", "_embedding_input", "_Taps",
                                        "hooks", "_apply", "_OneBlock", "batch_rates"],
             "vitplast.measure.plasticity": ["measurement", "_rates_table", "summarize",
                                             "ranking"],
             "vitplast.measure.pairs": ["make_pairs"]}


def measuring(components=TABLE) -> str:
    """The fingerprint of the code measuring with the component table ``components``:
    ``m<MEASURE_VERSION>-<the table's fingerprint>``, e.g. ``m1-3fa2c9d01b2e``; what ``cached``
    stamps in each table a measurement with that table makes (its ``measured_by=``; by default
    its ``MEASURING_CODE``, which a test holds equal to ``measuring()``: ``cached`` sits below
    this layer)."""
    return f"m{MEASURE_VERSION}-{fingerprint(components)}"


def stamp(components=TABLE) -> dict:
    """What a measuring function passes ``cached.kept_table`` / ``cached.companion`` for the
    component table ``components`` it measured with: ``measured_by`` (``measuring``), so that
    a table measured with other rows is stale, never served, and ``components`` (its ``names``),
    the only component names the stored file may hold (``schema.check``)."""
    return dict(measured_by=measuring(components), components=component_table.names(components))


def table_key(components=TABLE) -> dict:
    """What a cache key holds of the component table measured: nothing for the default one
    (``components.TABLE``: the keys of the shipped and cached tables as they are), else its
    fingerprint, so that another table's measurements are cached apart."""
    fp = fingerprint(components)
    return {} if fp == fingerprint() else {"components": fp}


def estimator_hash() -> str:
    """A short hash of the estimator's code (``ESTIMATOR``), docstrings, comments and layout
    left out (each function parsed and written back by ``ast``): what a test pins, so that an
    edit that may change the numbers is seen and ``MEASURE_VERSION`` bumped."""
    parts = []
    for module, names in ESTIMATOR.items():
        mod = importlib.import_module(module)
        for name in names:
            tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(mod, name))))
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                        and body and isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant)
                        and isinstance(body[0].value.value, str)):
                    node.body = body[1:] or [ast.Pass()]  # the docstring: not code
            parts.append(f"{module}.{name}\n{ast.unparse(tree)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def restamp(folder) -> list:
    """Write this code's fingerprint (``measuring()``, which is ``cached.MEASURING_CODE`` for
    the default component table) into every table of ``folder``: each
    measured companion (``cached.MEASURED``: kept ``table-*.json``, ``plasticity-*.json``...;
    its ``measured_by`` field) and every ``.npz`` whose index passes (its ``measured_by``
    entry), values untouched; return the paths changed. Only for tables this code computes the
    same (recompute one and compare first): those made before fingerprints, or after a change
    of the fingerprint that changes no number."""
    now, changed = measuring(), []
    for path in sorted(Path(folder).glob("*.npz")):
        if cached.table_problems(path) or frames.entries(path).get("measured_by") == now:
            continue
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != "measured_by"}
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, measured_by=np.asarray(json.dumps(now)), **arrays)
        changed.append(path)
    for path in sorted(Path(folder).glob("*.json")):
        try:
            kind = cached.companion_kind(path.name)
        except ValueError:  # a run record or another file: not a measurement
            continue
        saved = read_json(path) if kind in cached.MEASURED else None
        if saved is not None and saved.get("measured_by") != now:
            cached.write_companion(folder, path.name, saved, measured_by=now)
            changed.append(path)
    return changed
