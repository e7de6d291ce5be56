"""What is measured once per task beside a searched study's runs, and stored with them:
the embedded model's plasticity before finetuning (``task_plasticity``; per component, the
mean over blocks: ``component_plasticity``) and its linear probe (``task_probe``).

Paper: Fig. 2's plasticity and the linear probe of Table 1, on the tasks of the suite study
(``studies.get("suite")``): the P3 primary and the distance of a task from pretraining read
them (``vitplast.report.suite_findings``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vitplast import cached
from vitplast.experiments import store
from vitplast.measure import empirical, relative
from vitplast.train import probes

#: What ``task_plasticity`` measures: Definition 1's plasticity, or the relative plasticity.
QUANTITIES = ("plasticity", "relative")


def task_plasticity(root: str | Path, task: str, n_pairs: int = 256,
                    protocol: str = "embedding", quantity: str = "plasticity", *,
                    compute: bool = True) -> pd.DataFrame:
    """Per block and component: the embedded model's plasticity on ``task`` before
    finetuning (``n_pairs`` pairs of a Fashion-MNIST image and a task image, ``protocol``),
    measured once and stored in ``root/plasticity-<hash of the settings>.json``.

    ``quantity`` (``QUANTITIES``): ``"plasticity"``, or ``"relative"``, the relative
    plasticity (``vitplast.measure.relative``) on the same pairs, stored the same way (its settings,
    and so its hash, add ``quantity``; plasticity's files keep theirs).

    Columns: ``task``, ``protocol``, ``layer``, ``component``, ``plasticity``, ``ci95``; for
    ``"relative"``: ``relative_plasticity``, ``plasticity``, ``s_in``, ``s_out`` in place of
    ``ci95``.

    Raises:
        ValueError: unknown ``quantity``, naming the valid ones.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; valid: {list(QUANTITIES)}")
    settings = dict(task=task, n_pairs=n_pairs, protocol=protocol)
    measured = empirical.embedded_layers
    if quantity == "relative":
        settings["quantity"], measured = "relative plasticity", relative.embedded_layers
    saved = store.Store(root).companion(
        f"plasticity-{cached.config_hash(settings)}.json",
        compute=(lambda: dict(settings, rows=measured([task], protocol=protocol, n_pairs=n_pairs)
                              .drop(columns="task").to_dict("records"))) if compute else None)
    return pd.DataFrame(saved["rows"] if saved else [], columns=None if saved else [
        "layer", "component", "plasticity"]).assign(task=task, protocol=protocol)


def task_probe(root: str | Path, task: str, *, compute: bool = True) -> dict | None:
    """The embedded model's linear probe on ``task``, computed once and stored beside the runs
    (``probes.stored_probe``); ``None`` when not stored and ``compute`` is False."""
    return probes.stored_probe(root, task, compute=compute)


def task_probes(root: str | Path, tasks, *, compute: bool = False) -> pd.DataFrame:
    """``task_probe`` of each task that has one stored (or of every task, with ``compute``):
    columns ``task``, ``test_acc`` (%), ``val_acc``, ``train_acc``."""
    rows = [(t, task_probe(root, t, compute=compute)) for t in tasks]
    return pd.DataFrame([dict(task=t, **{k: r[k] for k in ("test_acc", "val_acc", "train_acc")})
                         for t, r in rows if r is not None],
                        columns=["task", "test_acc", "val_acc", "train_acc"])


def component_plasticity(root: str | Path, tasks, n_pairs: int = 256,
                         protocol: str = "embedding", quantity: str = "plasticity", *,
                         compute: bool = True) -> pd.DataFrame:
    """Per task and component: plasticity before finetuning, the mean over blocks (as the
    paper's Fig. 2 summarises a component). Columns: ``task``, ``component``,
    ``plasticity`` (``quantity="relative"``: ``relative_plasticity``, as ``task_plasticity``;
    ``compute`` False: the stored tasks only)."""
    value = "relative_plasticity" if quantity == "relative" else "plasticity"
    per_layer = pd.concat([task_plasticity(root, t, n_pairs, protocol, quantity,
                                           compute=compute) for t in tasks])
    per_layer[value] = per_layer.get(value, np.nan)
    return per_layer.groupby(["task", "component"], as_index=False, sort=False)[value].mean()


__all__ = ["QUANTITIES", "component_plasticity", "task_plasticity", "task_probe", "task_probes"]
