"""Batched runs: the runs of one (task, configuration, seed) that differ only in their learning
rate, trained together as one computation, with the results of separate runs.

Paper: section 2 (the LR grid of every configuration); no counterpart in the paper's code.

``train_lrs`` is ``finetune.train``'s loop (``finetune.run``: the same steps, host syncs
(and a copy of the K learning rates to the device per step), gradient masks, norms and clip,
divergence checks, best-validation weights and test, each run its own) over a trainee of K
runs (``trainees.Stacked``): the trainable parameters stacked once per LR (a leading
dimension of size K), the frozen ones shared; ``torch.func.vmap`` over
``functional_call`` runs the K models on the same batches (the same seed draws the same data
order and the same new head), so everything before the first trainable parameter is computed
once. ``tests/train/test_batched.py`` checks whole loss histories against separate runs. On
a GPU this turns K small kernels into one large one (``benchmarks/gpu_check.py`` counts runs
per device-minute); on a CPU core it saves head-only runs most (the backbone runs once) and
costs a little elsewhere (``benchmarks/batched_runs.py``).

Supported: ``finetune.train``'s SGD recipe (momentum, weight decay, clip, warm-up, masks, LR
scales, label smoothing, micro-batches, augmentation), fp32 or bf16 autocast. Refused with the
reason: AdamW, fp16 (its loss scaler is per run), ``on_eval``, and models with active dropout
(vmap would share one mask between runs).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from vitplast.attention import unfused_attention
from vitplast.models import pick_device
from vitplast.train import finetune, passes, trainees

#: ``finetune.train``'s keyword defaults: one source for both paths.
DEFAULTS = {k: p.default for k, p in inspect.signature(finetune.train).parameters.items()
            if p.default is not inspect.Parameter.empty}


def check_batchable(model: nn.Module, **kwargs) -> None:
    """Raise ``ValueError`` (naming the reason and the way out) unless ``train_lrs`` can
    train ``model`` with these ``finetune.train`` keywords."""
    args = {**DEFAULTS, **kwargs}
    device = pick_device(args["device"])
    if args["optimizer"] != "sgd":
        raise ValueError(f"batched runs support optimizer 'sgd', not {args['optimizer']!r}: "
                         "run these runs one by one (batch_lrs=False)")
    if passes._amp_dtype(device, args["precision"]) == torch.float16:
        raise ValueError("batched runs do not support fp16 (a loss scaler per run): use "
                         "precision 'bf16' or 'fp32', or batch_lrs=False")
    if args["on_eval"] is not None:
        raise ValueError("batched runs do not call on_eval: use finetune.train")
    active = [n for n, m in model.named_modules()
              if isinstance(m, nn.Dropout) and m.p > 0 or getattr(m, "drop_prob", 0) > 0]
    if active:
        raise ValueError(f"batched runs need a model without active dropout (vmap would share "
                         f"one mask between runs); active in {active[:3]}: use batch_lrs=False")


def train_lrs(model: nn.Module, train_set, val_set=None, test_set=None, *, lrs: list[float],
              **kwargs) -> list[finetune.TrainResult]:
    """Train ``model`` once per learning rate of ``lrs``, as one batched computation.

    Args:
        model, train_set, val_set, test_set: as ``finetune.train``; ``model``'s weights are
            not changed (the runs train stacked copies of its trainable parameters).
        lrs: peak learning rates, one run each.
        **kwargs: ``finetune.train`` keywords (except ``lr`` and ``on_eval``), shared by the
            runs.

    Returns:
        One ``TrainResult`` per LR, in order, as ``finetune.train`` would return it for that
        LR (``seconds`` is the shared wall time divided by the number of runs).

    Raises:
        ValueError: what ``finetune.train`` refuses, or what ``check_batchable`` refuses.
    """
    if "lr" in kwargs:
        raise TypeError("train_lrs takes lrs (a list), not lr")
    if not len(lrs):
        raise ValueError("lrs is empty: give one learning rate or more")
    check_batchable(model, **kwargs)
    # timm's attention on its matmul path: vmap has no batching rule for the fused kernels
    with unfused_attention(model):
        return finetune.run(model, trainees.Stacked, (train_set, val_set, test_set),
                            {**DEFAULTS, **kwargs}, list(lrs), desc=f"train {len(lrs)} LRs")


__all__ = ["DEFAULTS", "check_batchable", "train_lrs"]
