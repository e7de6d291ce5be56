"""Batched runs: the runs of one (task, configuration, seed) that differ only in their learning
rate, trained together as one computation, with the results of separate runs.

Paper: section 2 (the LR grid of every configuration); no counterpart in the paper's code.

``train_lrs`` stacks the trainable parameters once per LR (a leading dimension of size K) and
shares the frozen ones; ``torch.func.vmap`` over ``functional_call`` runs the K models on the
same batches (the same seed draws the same data order and the same new head), so everything
before the first trainable parameter is computed once. Each run keeps its own gradient-norm
clip, momentum, divergence check, best-validation weights and test, exactly as
``finetune.train`` does; ``tests/test_batched.py`` checks whole loss histories against
separate runs. On a GPU this turns K small kernels into one large one (``benchmarks/
gpu_check.py`` counts runs per device-minute); on a CPU core it saves head-only runs most
(the backbone runs once) and costs a little elsewhere (``benchmarks/batched_runs.py``).

Supported: ``finetune.train``'s SGD recipe (momentum, weight decay, clip, warm-up, masks, LR
scales, label smoothing, micro-batches, augmentation), fp32 or bf16 autocast. Refused with the
reason: AdamW, fp16 (its loss scaler is per run), ``on_eval``, and models with active dropout
(vmap would share one mask between runs).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from vitplast.measure.components import unfused_attention
from vitplast.models import pick_device
from vitplast.train import finetune, passes

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
    if finetune._amp_dtype(device, args["precision"]) == torch.float16:
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
        return finetune.run(model, _Stack, (train_set, val_set, test_set),
                            {**DEFAULTS, **kwargs}, list(lrs), desc=f"train {len(lrs)} LRs")


class _Stack:
    """The trainee of K runs (``finetune.run``): K copies of the trainable parameters (leading
    dimension K), the shared frozen ones, and each run's SGD state: momentum buffers, LR
    multipliers, best weights. What ``finetune._Model`` is to one run."""

    def __init__(self, model, named, args, lrs, device):
        self.model, self.args, self.k = model, args, len(lrs)
        self.params = {n: p.detach().unsqueeze(0).repeat(self.k, *[1] * p.dim()).requires_grad_()
                       for n, p in named}
        self.fixed = {**{n: p.detach() for n, p in model.named_parameters()
                         if not p.requires_grad}, **dict(model.named_buffers())}
        self.lr_scale = {n: finetune.lr_scale(n, args["lr_scales"] or {}) for n in self.params}
        self.momentum = {n: None for n in self.params}
        self.best = {n: p.detach().clone() for n, p in self.params.items()}
        self.kept = [False] * self.k  # a run's best weights were kept
        self.active = torch.ones(self.k, dtype=torch.bool, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of every run, (K, B, classes)."""
        def one(params, x):
            return functional_call(self.model, {**self.fixed, **params}, (x,))
        with passes.autocast(x.device, self.args["precision"]):
            return vmap(one, in_dims=(0, None), randomness="same")(self.params, x).float()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def grads(self) -> list[torch.Tensor]:
        """Every run's gradients, (K, ...) per trainable parameter."""
        return [p.grad for p in self.params.values()]

    @torch.no_grad()
    def apply(self, lrs: list[float]) -> None:
        """``torch.optim.SGD``'s step for every run at its learning rate (momentum, weight
        decay; a run that stopped does not move); the gradients cleared."""
        lrs = torch.tensor(lrs, device=self.active.device)
        decay, momentum = self.args["weight_decay"], self.args["momentum"]
        for n, p in self.params.items():
            g, shape = p.grad, (self.k,) + (1,) * (p.dim() - 1)
            if decay:
                g = g + decay * p
            g = torch.where(self.active.view(shape), g, 0.0)  # a stopped run (NaN) stays
            if momentum:
                buf = self.momentum[n]
                buf = g.clone() if buf is None else buf.mul_(momentum).add_(g)
                self.momentum[n], g = buf, buf
            p.sub_(g * (lrs * self.lr_scale[n]).view(shape).to(g.dtype))
            p.grad = None

    def stop(self, k: int) -> None:
        """Run ``k`` ends (diverged): no further update moves it."""
        self.active[k] = False
        for buf in self.momentum.values():
            if buf is not None:
                buf[k] = 0.0
        for p in self.params.values():  # a finite stand-in: its outputs are never read
            p.data[k] = torch.nan_to_num(p.data[k], nan=0.0, posinf=0.0, neginf=0.0)

    def keep_best(self, k: int) -> None:
        self.kept[k] = True
        for n, p in self.params.items():
            self.best[n][k] = p.detach()[k]

    @torch.no_grad()
    def restore_best(self, runs: list[bool]) -> None:
        for n, p in self.params.items():
            for k in range(self.k):
                if runs[k] and self.kept[k]:
                    p[k] = self.best[n][k]

    @torch.no_grad()
    def evaluate(self, batches) -> list[tuple[float, float]]:
        """(mean loss, accuracy) of every run on the batches, as ``passes.evaluate``."""
        self.model.eval()
        loss = torch.zeros(self.k, dtype=torch.float64, device=self.active.device)
        correct, n = torch.zeros_like(loss), 0
        for x, y in batches:
            x, y = x.to(self.active.device), y.to(self.active.device)
            logits = self.forward(x)
            loss += torch.stack([F.cross_entropy(logits[k], y, reduction="sum")
                                 for k in range(self.k)]).double()
            correct += (logits.argmax(-1) == y).sum(1).double()
            n += len(y)
        self.model.train()
        return [(lo / max(n, 1), c / max(n, 1)) for lo, c in zip(loss.tolist(), correct.tolist())]


__all__ = ["DEFAULTS", "check_batchable", "train_lrs"]
