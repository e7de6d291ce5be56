"""Finetuning results as one records table per store: one row per stored run
(``records_table``), its logged curves (``history``), and how much of a study's grid a store
holds (``coverage``).

Paper: section 5's runs, each a finetuning of one configuration at one LR and seed. The
statistics over them (the main table, gains, paired tests, dynamics) are the report's:
``vitplast.report.finetuning_tables``. The LR rule, its ties and the LR curves live in
``vitplast.experiments.lr_selection``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from vitplast.experiments.lr_selection import (
    _OUTCOME,
)
from vitplast.experiments.runs import run_hash
from vitplast.experiments.store import Store


def _flat(run: dict, prefix: str = "") -> dict:
    """Nested dicts become ``a.b`` columns; lists become their JSON text (hashable)."""
    out = {}
    for k, v in run.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = json.dumps(v) if isinstance(v, list) else v
    return out


#: Settings every run has (``runs.make_run``): the columns of a table, even an empty one.
_SETTINGS = ("kind", "model", "checkpoint", "pretrained", "task", "config", "optimizer", "lr",
             "seed", "steps", "batch_size")


def runs_table(records: list[dict]) -> pd.DataFrame:
    """Records (``runner.run_one`` with their run) as the table ``records_table`` documents."""
    rows = [{"run": run_hash(r["run"]), **_flat(r["run"]),
             **{k: r.get(k) for k in _OUTCOME}, "best_val_loss": _best_val_loss(r)}
            for r in records]
    settings = dict.fromkeys(["run", *_SETTINGS,
                              *(k for row in rows for k in row if k not in _OUTCOME)])
    df = pd.DataFrame(rows, columns=[*settings, *_OUTCOME])
    for k in ("initial_val_acc", "test_acc", "test_loss", "best_val_acc", "best_val_loss",
              "seconds", "train_seconds"):
        df[k] = pd.to_numeric(df[k]).astype(float)
    return df


def _best_val_loss(record: dict) -> float | None:
    """The validation loss logged at the kept weights' step (``best_step``); None if none."""
    at = [h.get("val_loss") for h in record.get("history") or []
          if h.get("step") == record.get("best_step") and "val_loss" in h]
    return at[0] if at else record.get("best_val_loss")


def _records(roots) -> dict[str, dict]:
    """Stored runs of one or more results folders by run hash, each run once."""
    return {run_hash(r["run"]): r for root in roots for r in Store(root).records()}


def records_table(*roots: str | Path) -> pd.DataFrame:
    """One row per stored run of one or more results folders (half-written or unreadable
    files are not runs).

    Columns: ``run`` (``runs.run_hash`` of the run); every key of the run (``make_run``:
    kind, model, checkpoint, pretrained, task, ..., config, lr, seed, steps, optimizer, ...;
    nested dicts as ``key.sub``, lists as JSON text); ``status`` ("ok", "diverged",
    "failed"); ``error``; ``test_acc``, ``best_val_acc`` (in [0, 1]; NaN unless ok),
    ``best_val_loss`` (validation loss at the kept weights, read off the logged curve) and
    ``test_loss``; ``best_step`` (step of the kept weights); ``trainable`` (parameters
    trained); ``seconds`` (whole run), ``train_seconds``; ``device``; provenance
    (``machine``, ``vitplast``, ``torch``, ``timm``, ``python``, ``git_commit``,
    ``git_dirty``, ``date``).
    """
    return runs_table(list(_records(roots).values()))


def history(*roots: str | Path, metrics: list[str] | None = None) -> pd.DataFrame:
    """Every stored run's logged curves, one row per run x step x metric.

    Columns: ``run`` (join ``records_table`` on it), ``step``, ``metric`` (``loss``, ``lr``,
    ``grad_norm``, ``grad_norm/<group>``, ``grad_norm_per_param/<group>``, ``val_loss``,
    ``val_acc``: see ``vitplast.train.finetune``), ``value`` (NaN where not finite).

    Args:
        metrics: keep only these metrics (default: all).
    """
    rows = [(run, h["step"], k, v)
            for run, r in _records(roots).items() for h in r.get("history") or []
            for k, v in h.items() if k != "step" and (metrics is None or k in metrics)]
    df = pd.DataFrame(rows, columns=["run", "step", "metric", "value"])
    return df.astype({"value": float})


def expected_status(df: pd.DataFrame, expected: list[dict]) -> pd.Series:
    """The status of each expected run in ``records_table`` ``df``: "ok", "diverged",
    "failed", or "missing" where the store lacks it."""
    status = dict(zip(df["run"], df["status"])) if len(df) else {}
    return pd.Series([status.get(run_hash(c), "missing") for c in expected],
                     dtype=object)


def coverage(df: pd.DataFrame, expected: list[dict]) -> dict:
    """How much of a grid the store holds: counts of expected runs by status."""
    return {"expected": len(expected), **expected_status(df, expected).value_counts().to_dict()}
