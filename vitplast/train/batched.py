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

import functools
import inspect
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from vitplast.measure.components import (
    component_of,
    set_trainable,
    trainable_names,
    unfused_attention,
)
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
    a = {**DEFAULTS, **kwargs}
    for lr in lrs:
        finetune._check_args(optimizer=a["optimizer"], precision=a["precision"], lr=lr,
                             **{k: a[k] for k in ("steps", "batch_size", "accum_steps",
                                                  "warmup_steps", "eval_every", "log_every",
                                                  "workers", "seed")})
    check_batchable(model, **kwargs)
    finetune._check_splits(train_set, val_set, test_set, a["batch_size"] // a["accum_steps"],
                           a["accum_steps"])
    device = pick_device(a["device"])
    generator = finetune.seed_everything(a["seed"])
    model.to(device).train()
    names = trainable_names(model, a["config"], train_head=a["train_head"])
    count = set_trainable(model, names)
    stack = _Stack(model, lrs, a, device)
    results = [finetune.TrainResult(trainable=count - stack.masked_out, device=str(device))
               for _ in lrs]
    val = None
    # timm's attention on its matmul path: vmap has no batching rule for the fused kernels
    with unfused_attention(model), passes.numerics(device, a["precision"]):
        if val_set is not None:
            val = passes.loader(val_set, passes.EVAL_BATCH, device=device,
                                  workers=a["workers"])
            for r, (loss, acc) in zip(results, stack.evaluate(val)):
                r.initial_val_loss, r.initial_val_acc = loss, acc
        start = time.perf_counter()
        _loop(stack, results, train_set, val, generator=generator, device=device, a=a,
              lrs=lrs)
        if test_set is not None:
            stack.restore_best([r.diverged for r in results])
            test = passes.loader(test_set, passes.EVAL_BATCH, device=device)
            for r, (loss, acc) in zip(results, stack.evaluate(test)):
                if not r.diverged:
                    r.test_loss, r.test_acc = loss, acc
    for r in results:
        r.seconds = (time.perf_counter() - start) / len(lrs)
    model.eval()
    return results


class _Stack:
    """K copies of the trainable parameters (leading dimension K), the shared frozen ones,
    and each run's optimiser state: momentum buffers, LR multipliers, masks, best weights."""

    def __init__(self, model, lrs, a, device):
        import fnmatch

        self.model, self.a, self.k = model, a, len(lrs)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        masks = finetune._check_masks(a["grad_masks"] or {}, dict(named), a["weight_decay"])
        self.masks = masks
        self.masked_out = sum(m.numel() - int(m.sum()) for m in masks.values())
        self.counts = {n: int(masks[n].sum()) if n in masks else p.numel() for n, p in named}
        self.params = {n: p.detach().unsqueeze(0).repeat(self.k, *[1] * p.dim()).requires_grad_()
                       for n, p in named}
        self.fixed = {**{n: p.detach() for n, p in model.named_parameters()
                         if not p.requires_grad}, **dict(model.named_buffers())}
        scales = a["lr_scales"] or {}
        self.lr_scale = {n: next((s for pat, s in scales.items() if fnmatch.fnmatch(n, pat)), 1.0)
                         for n in self.params}
        self.momentum = {n: None for n in self.params}
        self.best = {n: p.detach().clone() for n, p in self.params.items()}
        self.active = torch.ones(self.k, dtype=torch.bool, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of every run, (K, B, classes)."""
        def one(params, x):
            return functional_call(self.model, {**self.fixed, **params}, (x,))
        with passes.autocast(x.device, self.a["precision"]):
            return vmap(one, in_dims=(0, None), randomness="same")(self.params, x).float()

    def grads(self, x, y, *, scale: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Each run's loss on (x, y) (K,), and the gradients of ``scale`` x their sum."""
        logits = self.forward(x)
        losses = torch.stack([F.cross_entropy(logits[k], y, label_smoothing=self.a[
            "label_smoothing"]) for k in range(self.k)])
        return losses.detach(), torch.autograd.grad(losses.sum() * scale,
                                                    list(self.params.values()))

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], lrs: torch.Tensor, row_norms: bool
             ) -> tuple[torch.Tensor, list[dict]]:
        """``finetune._Update`` for every run: mask, norms, clip, SGD with momentum (a run
        that stopped does not move). Returns the global norms before clipping (K,), and
        each run's group norms (when ``row_norms``)."""
        names = list(self.params)
        grads = [g * self.masks[n] if n in self.masks else g for n, g in zip(names, grads)]
        sq = torch.stack([g.float().pow(2).flatten(1).sum(1) for g in grads])  # (P, K)
        norms = sq.sum(0).sqrt()
        groups = _group_norms(names, sq, self.counts) if row_norms else [{}] * self.k
        clip = self.a["clip_grad_norm"] or math.inf
        coef = (clip / (norms + 1e-6)).clamp(max=1.0)
        for n, g in zip(names, grads):
            p, shape = self.params[n], (self.k,) + (1,) * (g.dim() - 1)
            g = g * coef.view(shape).to(g.dtype)
            if self.a["weight_decay"]:
                g = g + self.a["weight_decay"] * p
            g = torch.where(self.active.view(shape), g, 0.0)  # a stopped run (NaN) stays
            if self.a["momentum"]:
                buf = self.momentum[n]
                buf = g.clone() if buf is None else buf.mul_(self.a["momentum"]).add_(g)
                self.momentum[n], g = buf, buf
            p.sub_(g * (lrs * self.lr_scale[n]).view(shape).to(g.dtype))
        return norms, groups

    def stop(self, k: int) -> None:
        """Run ``k`` ends (diverged): no further update moves it."""
        self.active[k] = False
        for buf in self.momentum.values():
            if buf is not None:
                buf[k] = 0.0
        for p in self.params.values():  # a finite stand-in: its outputs are never read
            p.data[k] = torch.nan_to_num(p.data[k], nan=0.0, posinf=0.0, neginf=0.0)

    def keep_best(self, k: int) -> None:
        for n, p in self.params.items():
            self.best[n][k] = p.detach()[k]

    @torch.no_grad()
    def restore_best(self, skip: list[bool]) -> None:
        if not self.a["keep_best"]:
            return
        for n, p in self.params.items():
            for k in range(self.k):
                if not skip[k]:
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


def _group_norms(names: list[str], sq: torch.Tensor, counts: dict[str, int]) -> list[dict]:
    """``finetune._group_norms`` of every run, from the squared norms (P, K)."""
    out = []
    for column in sq.T.tolist():
        total: dict[str, float] = {}
        count: dict[str, int] = {}
        for n, s in zip(names, column):
            g = component_of(n)
            total[g] = total.get(g, 0.0) + s
            count[g] = count.get(g, 0) + counts[n]
        out.append({**{f"grad_norm/{g}": math.sqrt(s) for g, s in total.items()},
                    **{f"grad_norm_per_param/{g}": math.sqrt(total[g] / count[g])
                       for g in total}})
    return out


def _loop(stack: _Stack, results, train_set, val, *, generator, device, a, lrs) -> None:
    """``finetune._loop`` for K runs at once: the same steps, rows and stopping rules."""
    from tqdm.auto import tqdm

    k_runs, accum = len(lrs), a["accum_steps"]
    batches = finetune._batches(train_set, a["batch_size"] // accum, generator, a["workers"],
                                device)
    schedules = [functools.partial(finetune.lr_at, lr=lr, steps=a["steps"],
                                   warmup_steps=a["warmup_steps"]) for lr in lrs]
    first, pending = None, []
    bar = tqdm(range(a["steps"]), desc=f"train {len(lrs)} LRs", disable=not a["progress"],
               leave=False)
    for step in bar:
        loss_sum = torch.zeros(k_runs, dtype=torch.float64, device=device)
        grads = None
        for _ in range(accum):
            x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if a["augment"] is not None:
                x = a["augment"](x, generator)
            losses, g = stack.grads(x, y, scale=1 / accum)
            grads = g if grads is None else [s + t for s, t in zip(grads, g)]
            loss_sum += losses.double() / accum
        first = loss_sum if first is None else first
        pending.append((step, loss_sum, ~torch.isfinite(loss_sum)
                        | (loss_sum > finetune.DIVERGENCE_FACTOR * first)))
        logged = step % a["log_every"] == 0 or step == a["steps"] - 1
        evaluating = val is not None and ((step + 1) % a["eval_every"] == 0
                                          or step == a["steps"] - 1)
        totals = [math.nan] * k_runs
        if logged or evaluating:
            totals = _sync(pending, stack, results, schedules)
            if not stack.active.any():
                break
        lr_now = torch.tensor([s(step) for s in schedules], device=device)
        norms, groups = stack.step(grads, lr_now, row_norms=logged)
        rows = [{"step": step, "loss": totals[k], "lr": schedules[k](step)}
                for k in range(k_runs)]
        if logged:
            for row, norm, group in zip(rows, norms.tolist(), groups):
                row.update(group, grad_norm=norm)
        if evaluating:
            for k, (loss, acc) in enumerate(stack.evaluate(val)):
                rows[k]["val_loss"], rows[k]["val_acc"] = loss, acc
                if stack.active[k] and not acc <= results[k].best_val_acc:
                    results[k].best_val_acc, results[k].best_step = acc, step
                    stack.keep_best(k)
        for k, (r, row) in enumerate(zip(results, rows)):
            if not r.diverged and (logged or "val_acc" in row):
                r.history.append(row)


def _sync(pending: list, stack: _Stack, results, schedules) -> list[float]:
    """``finetune._sync`` per run: one host sync; a run whose step diverged gets that step
    as its last row and stops. Returns each run's last loss."""
    losses = torch.stack([v for _, v, _ in pending]).T.tolist()  # (K, steps)
    flags = torch.stack([f for _, _, f in pending]).T.tolist()
    for k, (r, run_losses, run_flags) in enumerate(zip(results, losses, flags)):
        if r.diverged or True not in run_flags:
            continue
        bad = run_flags.index(True)
        at = pending[bad][0]
        r.diverged = True
        r.history.append({"step": at, "loss": run_losses[bad], "lr": schedules[k](at)})
        stack.stop(k)
    pending.clear()
    return [run_losses[-1] for run_losses in losses]


__all__ = ["DEFAULTS", "check_batchable", "train_lrs"]
