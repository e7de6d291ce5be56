"""The gauge and finetuning: short runs of a gauged network beside the original.

Paper: Takeaway 3's configurations (section 5's recipe). The gauge (``vitplast.measure.gauge``)
multiplies the residual stream by c and leaves the function unchanged; whether finetuning then
follows the same trajectory depends on the LR each parameter gets and on gradient clipping,
which this module measures (``report.scale_findings.invariance_findings`` states it), against
the LRs that make the gauged run the original one (``finetuning_equivalence``).
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
from torch import nn

from vitplast import models
from vitplast.cached import kept_table
from vitplast.datasets import tasks
from vitplast.measure import gauge
from vitplast.train import finetune
from vitplast.train.configurations import trainable_names
from vitplast.train.keys import OPTIMIZERS


def finetuning_equivalence(model: nn.Module, config, c: float, *, optimizer: str = "sgd",
                           train_head: bool = True) -> dict[str, float]:
    """The original-model LR multipliers that make finetuning ``config`` on the gauged model
    the same run (derived in ``vitplast.measure.gauge``'s docstring): ``{parameter name:
    factor}`` for each trained parameter the gauge scales, 1 / c^2 under SGD (exact without
    clipping, or while the clip does not act; weight decay 0), 1 / c under Adam (up to its
    eps). Empty: the configuration follows the same trajectory at every c, clip included.
    Pass the dict as ``train(lr_scales=...)``.

    Paper: none (issue 28; Takeaway 3 compares these configurations).
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {list(OPTIMIZERS)}")
    factor = 1 / (c * c) if optimizer == "sgd" else 1 / c
    trained = set(trainable_names(model, config, train_head=train_head))
    return {n: factor for n in gauge.gauged_names(model) if n in trained}


def finetuning_invariance(model_name: str = "", task: str = "digits",
                          configs=("LN1", "FC1", "MHA", "FC2"), c: float = 8.0, *, steps: int = 8,
                          batch_size: int = 16, lr: float = 0.1, seed: int = 0,
                          root=None) -> pd.DataFrame:
    """Whole loss histories of short finetuning runs of the gauged and the original model
    (load-or-compute): per configuration, the largest |loss difference| over the steps of
    the gauged run (recipe: SGD, momentum, clip 1.0, new head) against the original run
    (``vs_original``), and, where the configuration trains gauged parameters, against the
    original with their LR / c^2 (``finetuning_equivalence``) with the clip
    (``vs_lr_scaled_clip``) and without it in both runs (``vs_lr_scaled_noclip``);
    ``max_grad_norm`` of the original run (the clip acts above 1). With ``root``, kept beside
    a study there (``cached.kept_table``).

    Paper: Takeaway 3's configurations (section 5's recipe)."""
    model_name = model_name or models.EMBEDDED_NAME

    def compute():
        t = tasks.load(task)
        start = models.new_head(models.load_model(model_name), t.num_classes, seed=seed)

        def losses(config, c_, lr_scales=None, clip=1.0):
            model = gauge.rescale_stream(copy.deepcopy(start), c_)
            res = finetune.train(model, t.train, config=config, steps=steps, batch_size=batch_size,
                                 lr=lr, warmup_steps=0, log_every=1, eval_every=10 * steps,
                                 clip_grad_norm=clip, lr_scales=lr_scales, seed=seed,
                                 progress=False)
            return (np.array([r["loss"] for r in res.history]),
                    np.array([r["grad_norm"] for r in res.history]))

        rows = []
        for config in configs:
            (base, norms), (gauged, _) = losses(config, 1.0), losses(config, c)
            row = dict(config=config, vs_original=np.abs(gauged - base).max(),
                       max_grad_norm=norms.max())
            scales = finetuning_equivalence(start, config, c)
            if scales:
                row["vs_lr_scaled_clip"] = np.abs(gauged - losses(config, 1.0, scales)[0]).max()
                row["vs_lr_scaled_noclip"] = np.abs(losses(config, c, clip=None)[0] - losses(
                    config, 1.0, scales, clip=None)[0]).max()
            rows.append(row)
        return pd.DataFrame(rows)

    key = dict(model_name=model_name, task=task, configs=list(configs), c=c, steps=steps,
               batch_size=batch_size, lr=lr, seed=seed, weights=models.weights_id(model_name))
    return kept_table("gauge-finetuning", key, compute, root)
