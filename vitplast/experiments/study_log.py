"""A study's log and progress: the sweep sessions that filled its store (``study.json``, with
``runs.csv`` beside it) and how far the study has got (``study_progress``). A study log that fails
its schema is refused, and ``restart_log`` sets it aside and starts a new one that points to it.
What made each record is ``vitplast.provenance``'s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import torch

from vitplast import cached, files, models
from vitplast.experiments import store
from vitplast.experiments.results import expected_status
from vitplast.experiments.results import records_table as stored_runs
from vitplast.experiments.runs import run_hash
from vitplast.provenance import provenance, shipped_command


def log_session(root: str | Path, command: str, summary: pd.DataFrame, seconds: float,
                device: str | torch.device | None = None) -> Path:
    """Append one sweep session (command, provenance, wall time, and the status counts of
    the store after it) to ``root/study.json``, the study's provenance across sessions, and
    write ``summary`` (``results.records_table(root)``) to ``root/runs.csv``: every stored run, one
    row each, for readers without vitplast. Concurrent sessions take turns (``files.locked``),
    so none is lost.

    Raises:
        ValueError: ``study.json`` fails its schema (``vitplast/schemas/study.schema.json``):
            it is refused, never rewritten; ``restart_log`` keeps its sessions.
    """
    path = Path(root) / "study.json"
    session = dict(command=shipped_command(command), **provenance(models.pick_device(device)),
                   wall_seconds=round(seconds, 1),
                   status=summary["status"].value_counts().to_dict())
    with files.locked(path):
        log = store.Store(root).companion("study.json") or {"sessions": []}
        log["sessions"].append(session)
        files.write_text(Path(root) / "runs.csv", summary.sort_values("run").to_csv(index=False))
        return store.Store(root).write_companion("study.json", log)


def restart_log(root: str | Path) -> Path:
    """Set aside the study log ``root/study.json`` that fails its schema (``files.set_aside``:
    ``study.json.invalid-<UTC time>``, kept whole) and start a new one that points to it
    (``earlier``: the logs before it, oldest first); return the new log's path. The fix
    ``log_session`` and the sweep name when they refuse a damaged log: no session is lost.

    Raises:
        ValueError: there is no ``study.json`` under ``root``, or it passes its schema
            (nothing to restart).
    """
    path = Path(root) / "study.json"
    with files.locked(path):
        if not path.exists() or not cached.companion_problems(path):
            raise ValueError(f"{path} is {'missing' if not path.exists() else 'valid'}: "
                             "restart_log sets aside only a study log that fails its schema")
        old = files.read_json(path)
        earlier = old.get("earlier") if isinstance(old, dict) else None
        earlier = [e for e in earlier if isinstance(e, str)] if isinstance(earlier, list) else []
        aside = files.set_aside(path)
        return store.Store(root).write_companion("study.json", {
            "sessions": [], "earlier": [*earlier, aside.name]})


def study_progress(runs: list[dict], root: str | Path) -> pd.DataFrame:
    """How far a study has got, per task and seed: runs ``expected``; stored, by status
    (``ok``, ``diverged``, ``failed``); not stored: ``running`` (a live process, e.g. a
    cluster job, holds its claim: ``Store.claimed``) and ``pending``; and ``hours_left``, the
    CPU time the runs not stored should take at the mean time of the stored ok runs of the
    same configuration (of every stored ok run where that configuration has none). A last
    row, ``all``, sums them.

    Args:
        runs: the study's run dicts (``vitplast.experiments.studies``).
        root: its results store.
    """
    stored = stored_runs(root)
    ok = stored[stored["status"] == "ok"] if len(stored) else stored
    seconds = ok.groupby("config")["seconds"].mean() if len(ok) else pd.Series(dtype=float)
    fallback = ok["seconds"].mean() if len(ok) else math.nan
    key = [r["config"] if isinstance(r["config"], str) else json.dumps(r["config"])
           for r in runs]
    held = store.Store(root).claimed()
    status = [("running" if run_hash(r) in held else "pending") if s == "missing" else s
              for r, s in zip(runs, expected_status(stored, runs))]
    table = pd.DataFrame(dict(task=[r["task"] for r in runs], seed=[r["seed"] for r in runs],
                              status=status,
                              hours=pd.Series(key).map(seconds).fillna(fallback) / 3600))
    table.loc[~table["status"].isin(["running", "pending"]), "hours"] = 0.0
    counts = pd.crosstab([table["task"], table["seed"]], table["status"])
    counts = counts.reindex(columns=["ok", "diverged", "failed", "running", "pending"],
                            fill_value=0)
    counts.insert(0, "expected", counts.sum(axis=1))
    counts["hours_left"] = table.groupby(["task", "seed"])["hours"].sum().round(2)
    counts = counts.reset_index()
    total = {"task": "all", "seed": "", **{c: counts[c].sum() for c in counts.columns[2:]}}
    return pd.concat([counts, pd.DataFrame([total])], ignore_index=True).round({"hours_left": 2})


__all__ = ["log_session", "restart_log", "study_progress"]
