"""Empirical plasticity of a model across tasks, protocols and pretraining checkpoints, and
how its ranking of components compares with the paper's.

Paper: section 4, Fig. 2-3 and Takeaway 2 (on ViT-B: MHA > FC1 > FC2 > LN2 > LN1, with MHA,
FC1, FC2 above 1 and the LayerNorms below).

Used by notebooks 03 and 06.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vitplast.plasticity import PROTOCOLS, Pairs, make_pairs, measure, order, ranking

#: The paper's per-component plasticity on ViT-B (read off its Fig. 2: embedding protocol,
#: 11 datasets, per-layer means). Reference values only; nothing here is computed from them.
PAPER_VIT_B = {"MHA": 7.5, "FC1": 4.4, "FC2": 2.1, "LN2": 0.5, "LN1": 0.35}


#: Seed of the pretraining-domain sample: another draw than the tasks' (seed 0), because the
#: Fashion-MNIST tasks are built from the same test images; with one seed, pair i would hold
#: the same garment clean and corrupted, not two unrelated images as in the paper.
SOURCE_SEED = 1


def load_task_for(name: str, model=None, data_root: str | None = None, *, seed: int = 0,
                  **task_kwargs):
    """An embedded task, or a paper dataset under ``data_root`` with ``model``'s transforms."""
    from vitplast import tasks

    return tasks.load(name, data_root, model=model, seed=seed, **task_kwargs)


def task_pairs(task: str, source: str | None = "fmnist", *, n_pairs: int = 256, model=None,
               data_root: str | None = None, seed: int = 0, **task_kwargs) -> Pairs:
    """Image pairs for a task, as the paper builds them.

    With a ``source`` (the pretraining domain, the paper's ImageNet val): x = source test
    image i (drawn with ``SOURCE_SEED``), y = task test image i, unshuffled. Without one (or
    ``source == task``): random pairs within the task's test set.
    """
    y_task = load_task_for(task, model, data_root, **task_kwargs)
    if not source or source == task:
        return make_pairs(y_task.test, n_pairs=n_pairs, seed=seed)
    x_task = load_task_for(source, model, data_root, seed=SOURCE_SEED, **task_kwargs)
    return make_pairs(x_task.test, y_task.test, n_pairs=n_pairs)


def measure_tasks(model_name: str, tasks: list[str], *, protocols=PROTOCOLS,
                  checkpoints=("final",), source: str | None = "fmnist", data_root: str = "",
                  n_pairs: int = 256, batch_size: int = 64, device=None,
                  progress: bool = True) -> pd.DataFrame:
    """``measure`` over checkpoints x tasks x protocols, as one tidy table with ``model``,
    ``checkpoint`` and ``task`` columns.

    Args:
        model_name: ``"vitplast_fmnist"`` or a timm name (``checkpoints`` then only label).
        tasks: embedded task names, or paper dataset names with ``data_root``.
        source: the pretraining-domain task whose test images are the x of each pair
            (the paper's ImageNet val); ``None`` or ``""`` pairs images within each task.
        data_root: folder of the paper's datasets (``vitplast.paper_datasets``).
    """
    from vitplast import models

    frames = []
    for ckpt in checkpoints:
        kwargs = {"checkpoint": ckpt} if model_name == models.EMBEDDED_NAME else {}
        model = models.load_model(model_name, device=device, **kwargs)
        for name in tasks:
            pairs = task_pairs(name, source, n_pairs=n_pairs, model=model, data_root=data_root)
            for protocol in protocols:
                frames.append(measure(model, pairs, protocol=protocol, batch_size=batch_size,
                                      progress=progress, meta=dict(model=model_name,
                                                                   checkpoint=ckpt, task=name)))
    return pd.concat(frames, ignore_index=True)


def compare_with_paper(ranked: pd.DataFrame) -> str:
    """Sentences comparing a measured ranking (one group of ``ranking``) with the paper's
    Takeaway 2: the order, and which components are above / below 1."""
    measured = order(ranked)
    paper = " > ".join(sorted(PAPER_VIT_B, key=PAPER_VIT_B.get, reverse=True))
    values = dict(zip(ranked["component"].astype(str), ranked["plasticity"]))
    above = [c for c, v in values.items() if v > 1]
    paper_above = [c for c, v in PAPER_VIT_B.items() if v > 1]
    from scipy.stats import spearmanr

    comps = list(PAPER_VIT_B)
    rho = spearmanr([values[c] for c in comps], [PAPER_VIT_B[c] for c in comps]).statistic
    if measured == paper:
        verdict = "agrees with"
    elif measured.split(" > ") == paper.split(" > ")[::-1]:
        verdict = "reverses"
    else:
        verdict = ("broadly agrees with" if rho >= 0.7 else
                   "largely reverses" if rho <= -0.7 else "differs from")
    return (f"Measured ranking {measured} {verdict} the paper's ViT-B ranking {paper} "
            f"(Spearman rho = {rho:+.2f}). Above 1: {above or 'none'} "
            f"(paper: {paper_above}).")


def checkpoint_epochs(model_name: str, checkpoints) -> dict[str, float]:
    """Checkpoint name -> pretraining epoch, from the embedded manifest (NaN elsewhere)."""
    from vitplast import models

    if model_name != models.EMBEDDED_NAME:
        return {c: np.nan for c in checkpoints}
    known = models.embedded_checkpoints()
    return {c: known[c]["epoch"] for c in checkpoints}


def what_this_shows(rates: pd.DataFrame, final: str = "final") -> str:
    """Notebook 03's conclusions, computed from its per-pair table."""
    lines = []
    ranked = ranking(rates[rates.checkpoint == final]) if "checkpoint" in rates else ranking(rates)
    for protocol, g in ranked.groupby("protocol"):
        lines.append(f"[{protocol}, all tasks] " + compare_with_paper(_pooled(g)))
        per_task = g.groupby("task").apply(order, include_groups=False)
        top = per_task.value_counts()
        lines.append(f"  per task, the most common order is {top.index[0]} "
                     f"({top.iloc[0]}/{len(per_task)} tasks).")
    if "checkpoint" in rates and rates.checkpoint.nunique() > 1:
        everything = ranking(rates)
        for ckpt in rates.checkpoint.unique():  # in the order measured (along pretraining)
            for protocol, g in everything[everything.checkpoint == ckpt].groupby("protocol"):
                lines.append(f"[{protocol}, checkpoint {ckpt}, all tasks] {order(_pooled(g))}")
    return "\n".join(lines)


def _pooled(ranked: pd.DataFrame) -> pd.DataFrame:
    """A ``ranking`` table pooled over tasks: plasticity averaged per component, re-ranked."""
    pooled = ranked.groupby("component", observed=True).plasticity.mean().reset_index()
    pooled["rank"] = pooled.plasticity.rank(ascending=False, method="min").astype(int)
    return pooled
