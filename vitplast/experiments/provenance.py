"""Provenance and progress of a results store: what made each record (machine, versions, git
commit, date), the sweep sessions that filled the store (``study.json``, ``runs.csv``), and
how far a study has got (``study_progress``). A study log that fails its schema is refused,
and ``restart_log`` sets it aside and starts a new one that points to it.

The store itself (atomic records, claims, audit) is ``vitplast.store.Store``; this module is its
account of who wrote what, when, and what is left.

Used by ``vitplast.sweep`` (every record), ``vitplast.pretrain`` (the manifest) and the CLI
(``vitplast sweep``: one session per command, ``--status``); notebooks 04-05 reach it only
through ``vitplast.studies``, when they recompute.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

from vitplast import models, store
from vitplast.experiments.results import expected_status
from vitplast.experiments.results import records_table as stored_runs


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes?) of the vitplast checkout, or (None, None). Cached: a
    sweep asks once per process (call it before forking workers)."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():  # an installed copy: no enclosing repo's commit
        return None, None

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout
    try:
        # results written into data/ while a sweep runs do not make the code dirty
        return git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain", "-uno", "--",
                                                          ".", ":(exclude)data"))
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        return None, None


def provenance(device: torch.device) -> dict:
    """Where and with what a result was made: ``machine`` (e.g. "x86_64, 2 cores", plus the
    GPU), ``vitplast``, ``torch``, ``timm``, ``python``, ``git_commit``, ``git_dirty``,
    ``date`` (UTC)."""
    import timm

    import vitplast

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = f"{platform.machine()}, {cores} cores"
    if device.type == "cuda":
        machine += f", {torch.cuda.get_device_name(device)}"
    commit, dirty = git_state()
    return dict(machine=machine, vitplast=vitplast.__version__, torch=torch.__version__,
                timm=timm.__version__, python=platform.python_version(), git_commit=commit,
                git_dirty=dirty, date=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def shipped_command(command: str) -> str:
    """``command`` with each absolute path shortened to its last two parts
    (``/home/me/kit/data/suite`` -> ``data/suite``): a shipped log names no machine's folders."""
    return " ".join(str(Path(*Path(w).parts[-2:])) if w.startswith("/") and len(Path(w).parts) > 3
                    else w for w in command.split(" "))


def log_session(root: str | Path, command: str, summary: pd.DataFrame, seconds: float,
                device: str | torch.device | None = None) -> Path:
    """Append one sweep session (command, provenance, wall time, and the status counts of
    the store after it) to ``root/study.json``, the study's provenance across sessions, and
    write ``summary`` (``results.records_table(root)``) to ``root/runs.csv``: every stored
    run, one row each, for readers without vitplast. Concurrent sessions take turns
    (``store.locked``), so none is lost.

    Raises:
        ValueError: ``study.json`` fails its schema (``vitplast/schemas/study.schema.json``):
            it is refused, never rewritten; ``restart_log`` keeps its sessions.
    """
    path = Path(root) / "study.json"
    session = dict(command=shipped_command(command), **provenance(models.pick_device(device)),
                   wall_seconds=round(seconds, 1),
                   status=summary["status"].value_counts().to_dict())
    with store.locked(path):
        log = store.Store(root).companion("study.json") or {"sessions": []}
        log["sessions"].append(session)
        store.write_text(Path(root) / "runs.csv", summary.sort_values("run").to_csv(index=False))
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
    with store.locked(path):
        if not path.exists() or not store.companion_problems(path):
            raise ValueError(f"{path} is {'missing' if not path.exists() else 'valid'}: "
                             "restart_log sets aside only a study log that fails its schema")
        old = store.read_json(path)
        earlier = old.get("earlier") if isinstance(old, dict) else None
        earlier = [e for e in earlier if isinstance(e, str)] if isinstance(earlier, list) else []
        aside = store.set_aside(path)
        return store.Store(root).write_companion("study.json", {
            "sessions": [], "earlier": [*earlier, aside.name]})


def study_progress(runs: list[dict], root: str | Path) -> pd.DataFrame:
    """How far a study has got, per task and seed: runs ``expected``, by status (``ok``,
    ``diverged``, ``failed``, ``missing``), and ``hours_left``, the CPU time the missing runs
    should take at the mean time of the stored ok runs of the same configuration (of every
    stored ok run where that configuration has none). A last row, ``all``, sums them.

    Args:
        runs: the study's run dicts (``vitplast.studies``).
        root: its results store.
    """
    stored = stored_runs(root)
    ok = stored[stored["status"] == "ok"] if len(stored) else stored
    seconds = ok.groupby("config")["seconds"].mean() if len(ok) else pd.Series(dtype=float)
    fallback = ok["seconds"].mean() if len(ok) else math.nan
    key = [r["config"] if isinstance(r["config"], str) else json.dumps(r["config"])
           for r in runs]
    table = pd.DataFrame(dict(task=[r["task"] for r in runs], seed=[r["seed"] for r in runs],
                              status=expected_status(stored, runs).to_numpy(),
                              hours=pd.Series(key).map(seconds).fillna(fallback) / 3600))
    table.loc[table["status"] != "missing", "hours"] = 0.0
    counts = pd.crosstab([table["task"], table["seed"]], table["status"])
    counts = counts.reindex(columns=["ok", "diverged", "failed", "missing"], fill_value=0)
    counts.insert(0, "expected", counts.sum(axis=1))
    counts["hours_left"] = table.groupby(["task", "seed"])["hours"].sum().round(2)
    counts = counts.reset_index()
    total = {"task": "all", "seed": "", **{c: counts[c].sum() for c in counts.columns[2:]}}
    return pd.concat([counts, pd.DataFrame([total])], ignore_index=True).round({"hours_left": 2})


__all__ = ["git_state", "log_session", "provenance", "restart_log", "shipped_command",
           "study_progress"]
