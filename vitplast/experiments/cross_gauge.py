"""The cross-gauge study's run pairs and identity reruns (notebook 07): what its statistics
read (``vitplast.report.cross_gauge_findings``).

Paper: none (issue 28; it bears on Takeaway 3). The study (``studies.get("gauge")``) finetunes
the same network at c = 1 and under the residual-stream gauge c = 8 (``vitplast.measure.gauge``).

- ``gauge_pairs``: its runs that the gauge provably leaves alone (head-only, LN1), paired by run
  hash, with their loss and test-accuracy differences.
- ``identity``: the configurations it changes (MHA, FC2) at c = 8 rerun beside c = 1 with the
  gauged parameters' LR divided by c^2 (``invariance.finetuning_equivalence``), on the study's own
  tasks and chosen LRs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vitplast import models
from vitplast.experiments import runs, search, store
from vitplast.train import invariance

#: The gauge's invariant configurations: they train nothing the gauge scales
#: (``vitplast.measure.gauge``).
GAUGE_INVARIANT = ("head", "LN1")  # head: head-only finetuning


def gauge_pairs(root: str | Path, configs=GAUGE_INVARIANT) -> pd.DataFrame:
    """Every run of ``configs`` stored at both c = 1 and c = 8 (the same run but for the
    gauge: paired by run hash, ``runs.run_hash``, without ``prepare`` and ``ablation``, so
    runtime keys such as ``precision`` or ``device`` never split a pair): ``task``,
    ``config``, ``lr``, ``loss_rose`` (either training loss rose above its first value),
    ``first_diff`` (difference of the two first logged losses: the network before training
    has moved it), ``max_loss_diff`` (largest difference of the two loss histories),
    ``test_diff`` (c = 8 minus c = 1, test points) and ``devices`` (where each ran)."""
    def key(run: dict) -> str:  # the run hash but for the gauge: runtime keys never count
        return runs.run_hash({k: v for k, v in run.items() if k not in ("prepare", "ablation")})

    records = [r for r in store.Store(root).records() if r["status"] == "ok"
               and r["run"].get("config") in configs]
    plain = {key(r["run"]): r for r in records if not r["run"].get("prepare")}
    rows = []
    for r8 in (r for r in records if r["run"].get("prepare") == "gauge"):
        r1 = plain.get(key(r8["run"]))
        if r1 is None:
            continue
        l1, l8 = np.array(search.losses(r1)), np.array(search.losses(r8))
        rows.append(dict(
            task=r8["run"]["task"], config=r8["run"]["config"], lr=r8["run"]["lr"],
            loss_rose=bool(search.loss_rose(r1) or search.loss_rose(r8)),
            first_diff=float(abs(l1[0] - l8[0])),
            max_loss_diff=float(np.abs(l1 - l8).max()) if len(l1) == len(l8) else np.inf,
            test_diff=100 * (r8["test_acc"] - r1["test_acc"]),
            devices=f"{r1['device']}, {r8['device']}"))
    return pd.DataFrame(rows, columns=["task", "config", "lr", "loss_rose", "first_diff",
                                       "max_loss_diff", "test_diff", "devices"])


#: The configurations the gauge changes whose identity ``identity`` checks.
GAUGE_CHANGED = ("MHA", "FC2")


def identity(picked: pd.DataFrame, tasks, configs=GAUGE_CHANGED, *, c: float = 8.0,
             steps: int = 8, root=None) -> pd.DataFrame:
    """Per task and configuration, at the LR the study chose for it at c = ``c``
    (``picked``: the study's ``load``): ``invariance.finetuning_invariance`` (``steps`` SGD
    steps; load-or-compute, or with ``root``, the study's folder, kept beside its runs:
    computed once, shipped, and computed again when an input changes: the chosen LR,
    ``steps``, ``c``, the model's weights). Columns ``task``, ``config``, ``lr`` (the shared
    LR), ``gauged`` (the parameters the gauge scales that it trains), ``derived_lr`` (theirs
    at c = 1: ``lr`` times ``invariance.finetuning_equivalence``'s factor), ``noclip`` and
    ``clip`` (largest |loss difference| of the c = ``c`` run from the c = 1 run at those
    per-parameter LRs, without clipping and with the recipe's clip), ``shared`` (from the
    c = 1 run at the shared LR: what the gauge changes)."""
    model = models.load_model(models.EMBEDDED_NAME)
    lrs = picked.set_index(["task", "config"])["lr"]
    rows = []
    for task in tasks:
        for config in configs:
            lr = float(lrs[(task, f"{config} c={c:g}")])
            inv = invariance.finetuning_invariance(task=task, configs=(config,), c=c, lr=lr,
                                                   steps=steps, root=root).iloc[0]
            scales = invariance.finetuning_equivalence(model, config, c)
            rows.append(dict(
                task=task, config=config, lr=lr,
                gauged=", ".join(sorted({n.split(".", 2)[-1].rsplit(".", 1)[0] for n in scales})),
                derived_lr=lr * min(scales.values()), noclip=float(inv["vs_lr_scaled_noclip"]),
                clip=float(inv["vs_lr_scaled_clip"]), shared=float(inv["vs_original"])))
    return pd.DataFrame(rows)


__all__ = ["GAUGE_CHANGED", "GAUGE_INVARIANT", "gauge_pairs", "identity"]
