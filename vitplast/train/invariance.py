"""The gauge and finetuning: short runs of a gauged network beside the original.

Paper: Takeaway 3's configurations (section 5's recipe). The gauge (``vitplast.measure.gauge``)
multiplies the residual stream by c and leaves the function unchanged; whether finetuning then
follows the same trajectory depends on the LR each parameter gets and on gradient clipping,
which this module measures (``report.scale_findings.invariance_findings`` states it).
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from vitplast import models
from vitplast.cached import kept_table
from vitplast.datasets import tasks
from vitplast.measure import gauge
from vitplast.train import finetune


def finetuning_invariance(model_name: str = "", task: str = "digits",
                          configs=("LN1", "FC1", "MHA", "FC2"), c: float = 8.0, *, steps: int = 8,
                          batch_size: int = 16, lr: float = 0.1, seed: int = 0,
                          root=None) -> pd.DataFrame:
    """Whole loss histories of short finetuning runs of the gauged and the original model
    (load-or-compute): per configuration, the largest |loss difference| over the steps of
    the gauged run (recipe: SGD, momentum, clip 1.0, new head) against the original run
    (``vs_original``), and, where the configuration trains gauged parameters, against the
    original with their LR / c^2 (``gauge.finetuning_equivalence``) with the clip
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
            scales = gauge.finetuning_equivalence(start, config, c)
            if scales:
                row["vs_lr_scaled_clip"] = np.abs(gauged - losses(config, 1.0, scales)[0]).max()
                row["vs_lr_scaled_noclip"] = np.abs(losses(config, c, clip=None)[0] - losses(
                    config, 1.0, scales, clip=None)[0]).max()
            rows.append(row)
        return pd.DataFrame(rows)

    key = dict(model_name=model_name, task=task, configs=list(configs), c=c, steps=steps,
               batch_size=batch_size, lr=lr, seed=seed, weights=models.weights_id(model_name))
    return kept_table("gauge-finetuning", key, compute, root)
