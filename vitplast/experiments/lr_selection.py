"""LR selection: the one rule that picks each setting's learning rate, and its ties. How much
accuracy depends on the LR around that choice is a statistic of the report
(``vitplast.report.finetuning_tables.lr_bands``).

Paper: section 5 (the best LR per configuration) and Fig. 18 (robustness across learning
rates). The LR is chosen on validation accuracy; ``on="test"`` reproduces the public code's
choice on test accuracy and is labelled as such (``selected_on``).
"""

from __future__ import annotations

import math

import pandas as pd

from vitplast.experiments.runs import RUNTIME_KEYS

#: The outcome columns of a run (``results.runs_table``): never part of what defines its setting.
_OUTCOME = ("status", "error", "initial_val_acc", "test_acc", "test_loss", "best_val_acc",
            "best_val_loss", "best_step", "trainable",
            "seconds", "train_seconds", "device", "machine", "vitplast", "torch", "timm",
            "python", "git_commit", "git_dirty", "date")


#: Seed-mean scores closer than this are a tie (means of k/1000 accuracies can differ in
#: their last bits by the order of summation alone).
TIE_TOLERANCE = 1e-9
#: What each choice is made on: (score, higher is better), then (tie-break, lower is better).
_RULE = {"val": ("best_val_acc", "best_val_loss"), "test": ("test_acc", "test_loss")}


def _scores(df: pd.DataFrame, on: str):
    """(setting columns, ``df`` with a ``_setting`` id, per id and lr: ``selection_score``,
    ``tie_break`` and ``n_seeds``, best first by the rule of ``select_lr``)."""
    if on not in _RULE:
        raise ValueError(f"on must be 'val' or 'test', got {on!r}")
    keys = [c for c in df.columns  # runtime knobs (device, precision...) define no setting
            if c not in (*_OUTCOME, *RUNTIME_KEYS, "run", "lr", "seed")]
    df = df.assign(_setting=df.groupby(keys, dropna=False).ngroup())  # NaN keys are a value
    score, loss = _RULE[on]
    ok = df[df["status"] == "ok"]
    ok = ok.assign(_loss=ok[loss] if loss in ok else math.nan)
    scores = ok.groupby(["_setting", "lr"]).agg(
        selection_score=(score, "mean"), tie_break=("_loss", "mean"),
        n_seeds=(score, "count")).reset_index()
    rounded = (scores["selection_score"] / TIE_TOLERANCE).round()
    scores = scores.assign(_rounded=rounded).sort_values(
        ["_setting", "_rounded", "tie_break", "lr"], ascending=[True, False, True, True],
        na_position="last", kind="stable")
    return keys, df, scores


def _select(df: pd.DataFrame, on: str):
    """(setting columns, ``df`` with a ``_setting`` id, per id the chosen ``lr`` and score,
    with ``tied``: how many other LRs have the same seed-mean score)."""
    keys, df, scores = _scores(df, on)
    top = scores.groupby("_setting")["_rounded"].transform("max")
    tied = (scores["_rounded"] == top).groupby(scores["_setting"]).transform("sum") - 1
    best = scores.assign(tied=tied).drop_duplicates("_setting")
    return keys, df, best.drop(columns="_rounded")


def select_lr(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per setting (all config columns but lr and seed: task, config, optimizer...), the LR
    chosen by one rule that does not hang on one image: the best seed-mean validation
    accuracy; among LRs tied on it (within ``TIE_TOLERANCE``), the lowest seed-mean
    validation loss at the kept weights; then the smaller LR.

    Diverged and failed runs are missing (the means are over the seeds left, ``n_seeds``),
    never zeros.

    Args:
        df: ``results``, or a table with setting columns, ``lr``, ``seed``, ``status``,
            ``best_val_acc``, ``best_val_loss`` and ``test_acc`` (``test_loss``).
        on: ``"val"`` or ``"test"``: the public code's optimistic choice on test accuracy
            (then test loss), kept to reproduce its numbers.

    Returns:
        One row per setting: its columns, ``lr``, ``selection_score`` (the seed-mean
        accuracy it was chosen on), ``tie_break`` (the seed-mean loss that broke a tie),
        ``tied`` (how many other LRs had the same score: 0 when no tie), ``n_seeds`` and
        ``selected_on`` (``on``).
    """
    keys, df, best = _select(df, on)
    out = df.drop_duplicates("_setting")[["_setting", *keys]].merge(best, on="_setting")
    return out.sort_values("_setting").drop(columns="_setting").assign(
        selected_on=on).reset_index(drop=True)


def lr_ties(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """The settings whose choice of LR was a tie on seed-mean accuracy (``select_lr`` rows
    with ``tied`` > 0): the choices that the tie-break decided."""
    chosen = select_lr(df, on)
    return chosen[chosen["tied"] > 0].reset_index(drop=True)


def tie_alternatives(df: pd.DataFrame, on: str = "val") -> list[pd.DataFrame]:
    """For each tied choice (``lr_ties``), ``df`` with that one choice broken the other way:
    the chosen LR's scores lowered by a hair, so the next tied LR wins. Feeding each to the
    same tables shows whether a finding hangs on a tie (``finetuning_findings.with_ties``)."""
    keys, marked, best = _select(df, on)
    score = _RULE[on][0]
    out = []
    for setting, lr in best.loc[best["tied"] > 0, ["_setting", "lr"]].itertuples(index=False):
        hit = (marked["_setting"] == setting) & (marked["lr"] == lr)
        alt = df.copy()
        alt.loc[hit.to_numpy(), score] = alt.loc[hit.to_numpy(), score] - 10 * TIE_TOLERANCE
        out.append(alt)
    return out


def lr_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Per task x config x lr: seed-mean and std of test and validation accuracy (in %),
    over runs with status "ok" (``n_seeds``). The Fig. 18 analogue."""
    ok = df[df["status"] == "ok"]
    g = ok.groupby(["task", "config", "lr"])
    out = g.agg(test_mean=("test_acc", "mean"), test_std=("test_acc", "std"),
                val_mean=("best_val_acc", "mean"), n_seeds=("seed", "count")).reset_index()
    out[["test_mean", "test_std", "val_mean"]] *= 100
    return out


def selected_runs(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """The runs (all seeds, status ok) at each setting's selected LR (``select_lr``)."""
    _, df, best = _select(df, on)
    chosen = df[df["status"] == "ok"].merge(best[["_setting", "lr"]], on=["_setting", "lr"])
    return chosen.drop(columns="_setting")

