"""Trainees: what the one training loop (``vitplast.train.finetune.run``) trains, K runs at once.

A trainee gives each run's logits (``forward``: (K, B, classes)), takes the backward pass of
their summed losses, hands over each run's gradients (``grads``: (K, ...) per trainable
parameter) for the loop to mask, measure and clip, and applies them at each run's learning
rate (``apply``); it evaluates every run (``evaluate``), stops a diverged one (``stop``), and
keeps and restores best weights (``keep_best``, ``restore_best``).

``Single`` is one run: the model itself, updated in place by a torch optimizer (K = 1).
``Stacked`` is ``vitplast.train.batched``'s K runs that differ only in their learning rate:
K copies of the trainable parameters (a leading dimension of size K) and the shared frozen ones;
``torch.func.vmap`` over ``functional_call`` runs the K models on the same batches, so
everything before the first trainable parameter is computed once.
"""

from __future__ import annotations

import fnmatch

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from vitplast.train.passes import _amp_dtype, autocast, evaluate


def lr_scale(name: str, lr_scales: dict[str, float]) -> float:
    """The learning-rate multiplier of parameter ``name``: the first pattern of ``lr_scales``
    it matches, else 1."""
    return next((s for pat, s in lr_scales.items() if fnmatch.fnmatch(name, pat)), 1.0)


class Single:
    """The trainee of one run: the model itself, updated by a torch optimizer (SGD or AdamW)
    with the fp16 gradient scaler. What the loop asks of a trainee of K runs, for K = 1."""

    k = 1

    def __init__(self, model, named, args, lrs, device):
        self.model, self.named, self.device = model, named, device
        self.precision, self.best = args["precision"], None
        scales = args["lr_scales"] or {}
        by_scale: dict[float, list] = {}  # optimizer groups by learning-rate multiplier
        for n, p in named:
            by_scale.setdefault(lr_scale(n, scales), []).append(p)
        groups = [{"params": ps, "lr_scale": s} for s, ps in by_scale.items()]
        kw = dict(lr=lrs[0], weight_decay=args["weight_decay"])
        self.opt = (torch.optim.SGD(groups, momentum=args["momentum"], **kw)
                    if args["optimizer"] == "sgd" else
                    torch.optim.AdamW(groups, betas=args["betas"], **kw))
        # fp16 needs its loss scaled (bf16 and fp32 do not: disabled, the scaler passes through)
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=_amp_dtype(device, self.precision) == torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, (1, B, classes)."""
        with autocast(x.device, self.precision):
            return self.model(x).float().unsqueeze(0)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def grads(self) -> list[torch.Tensor]:
        """The true (unscaled) gradients, (1, ...) views, in the order of ``named``."""
        self.scaler.unscale_(self.opt)
        return [p.grad.unsqueeze(0) for _, p in self.named]

    def apply(self, lrs: list[float]) -> None:
        """The optimizer's step at the learning rate ``lrs[0]``; the gradients cleared."""
        for group in self.opt.param_groups:
            group["lr"] = group["lr_scale"] * lrs[0]
        self.scaler.step(self.opt)  # opt.step(), skipped by an fp16 scaler on overflow
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)

    def evaluate(self, batches) -> list[tuple[float, float]]:
        return [evaluate(self.model, batches, device=self.device, precision=self.precision)]

    def stop(self, k: int) -> None:
        """Nothing to do: the loop ends with its only run."""

    def keep_best(self, k: int) -> None:
        self.best = {n: p.detach().clone() for n, p in self.named}

    @torch.no_grad()
    def restore_best(self, runs: list[bool]) -> None:
        if self.best is not None and runs[0]:
            for n, p in self.named:
                p.copy_(self.best[n])


class Stacked:
    """The trainee of K runs (``finetune.run``): K copies of the trainable parameters (leading
    dimension K), the shared frozen ones, and each run's SGD state: momentum buffers, LR
    multipliers, best weights. What ``Single`` is to one run."""

    def __init__(self, model, named, args, lrs, device):
        self.model, self.args, self.k = model, args, len(lrs)
        self.params = {n: p.detach().unsqueeze(0).repeat(self.k, *[1] * p.dim()).requires_grad_()
                       for n, p in named}
        self.fixed = {**{n: p.detach() for n, p in model.named_parameters()
                         if not p.requires_grad}, **dict(model.named_buffers())}
        self.lr_scale = {n: lr_scale(n, args["lr_scales"] or {}) for n in self.params}
        self.momentum = {n: None for n in self.params}
        self.best = {n: p.detach().clone() for n, p in self.params.items()}
        self.kept = [False] * self.k  # a run's best weights were kept
        self.active = torch.ones(self.k, dtype=torch.bool, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of every run, (K, B, classes)."""
        def one(params, x):
            return functional_call(self.model, {**self.fixed, **params}, (x,))
        with autocast(x.device, self.args["precision"]):
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
