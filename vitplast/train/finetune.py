"""Finetuning: the one training loop, used for every configuration and for pretraining.

Paper: section 5 and Takeaway 3 (finetuning each component alone). The default recipe is
the paper's: SGD, momentum 0.9, weight decay 0, global gradient-norm clip 1.0, cosine
schedule to 0 after a linear warm-up (``RECIPES["paper"]``).

Frozen parameters have ``requires_grad=False`` (no gradient is ever computed for them);
the optimizer sees only trainable ones. The best-validation weights are kept and tested.

A run is ``diverged`` when its loss is not finite or exceeds ``DIVERGENCE_FACTOR`` times its
first step's loss (with a new head that is ~ln(#classes), so ~230 on 10 classes: far above the
transient spikes of a high but working LR, which recover). Every step is checked; the check
is read at the next logging or evaluation step (no host sync per step), the history ends with
the first diverged step, and the run stops there and is not tested.

Logged (``TrainResult.history``, one row per logged step): ``step``, ``loss``, ``lr``,
``grad_norm`` (global, before clipping), ``grad_norm/<group>`` and
``grad_norm_per_param/<group>`` (= norm / sqrt(#params of the group)), and at evaluation
steps ``val_loss`` and ``val_acc``.

A pass over data (loader, precision, ``evaluate``) is ``vitplast.train.passes``'s.
"""

from __future__ import annotations

import functools
import math
import random
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from vitplast.inputs import check_count, check_positive, check_seed
from vitplast.measure.components import component_of, set_trainable, trainable_names
from vitplast.models import pick_device
from vitplast.train.passes import (
    EVAL_BATCH,
    PRECISIONS,
    _amp_dtype,
    _batches,
    autocast,
    evaluate,
    loader,
    numerics,
)

#: Named recipes (keyword arguments of ``train``). ``paper`` is PAPER.md section 2.
RECIPES = {
    "paper": dict(optimizer="sgd", momentum=0.9, weight_decay=0.0, clip_grad_norm=1.0,
                  warmup_steps=2000, steps=10_000, batch_size=512),
    # The paper's optimiser, sized for the embedded model on a CPU (one core: ~30 s a head-only
    # run, ~80 s a full one, as the shipped study measured):
    # 120 steps of 64 images, about 2 epochs of a 4,000-image train split.
    "embedded": dict(optimizer="sgd", momentum=0.9, weight_decay=0.0, clip_grad_norm=1.0,
                     warmup_steps=12, steps=120, batch_size=64, eval_every=20),
}
OPTIMIZERS = ("sgd", "adamw")
#: A loss above this many times the first step's loss ends the run as diverged.
DIVERGENCE_FACTOR = 100.0


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch generator for data order. The one place
    vitplast seeds."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def lr_at(step: int, *, lr: float, steps: int, warmup_steps: int) -> float:
    """Linear warm-up from ~0 to ``lr`` over ``warmup_steps``, then cosine decay to 0."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return 0.5 * lr * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _check_args(*, optimizer, precision, steps, batch_size, lr, accum_steps, warmup_steps,
                eval_every, log_every, workers, seed) -> None:
    """``train``'s scalar arguments, each error naming the argument and what is valid."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {list(OPTIMIZERS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {list(PRECISIONS)}")
    check_count("steps", steps, hint="optimisation steps, e.g. 120")
    check_count("batch_size", batch_size, hint="images per step, e.g. 64")
    check_positive("lr", lr, hint="the peak learning rate, e.g. 1e-2")
    check_count("accum_steps", accum_steps, hint="micro-batches per step, 1 for none")
    if batch_size % accum_steps:
        raise ValueError(f"batch_size {batch_size} is not divisible by accum_steps {accum_steps}")
    check_count("warmup_steps", warmup_steps, minimum=0, hint="0 for no warm-up")
    check_count("eval_every", eval_every, hint="steps between evaluations")
    check_count("log_every", log_every, hint="steps between logged rows")
    check_count("workers", workers, minimum=0, hint="0 loads batches in this process")
    check_seed("seed", seed)


def _check_splits(train_set, val_set, test_set, micro_batch: int, accum_steps: int) -> None:
    """Non-empty splits, and a train split with at least one (micro-)batch."""
    for name, split in (("train_set", train_set), ("val_set", val_set), ("test_set", test_set)):
        if split is not None and len(split) == 0:
            raise ValueError(f"{name} is empty: give it images (or None for val_set/test_set)")
    if micro_batch > len(train_set):
        per = f" (micro-batches of {micro_batch} with accum_steps={accum_steps})" * (
            accum_steps > 1)
        raise ValueError(f"batch_size={micro_batch * accum_steps}{per} is larger than the train "
                         f"split ({len(train_set)} images): no full batch can be drawn; use "
                         f"batch_size <= {len(train_set) * accum_steps} or more training images")


def _group_norms(named_params: list[tuple[str, nn.Parameter]], trainable: dict[str, int]
                 ) -> dict[str, float]:
    """Gradient norm per group (component, head, norm...) and per trainable parameter of the
    group (``trainable``: name -> count, for the masked parameters)."""
    groups = [component_of(n) for n, _ in named_params]
    per_param = torch.stack([p.grad.detach().float().pow(2).sum() for _, p in named_params])
    sq: dict[str, float] = {}
    count: dict[str, int] = {}
    for g, s, (n, p) in zip(groups, per_param.tolist(), named_params):  # one device sync
        sq[g] = sq.get(g, 0.0) + s
        count[g] = count.get(g, 0) + trainable.get(n, p.numel())
    out = {}
    for g in sq:
        out[f"grad_norm/{g}"] = math.sqrt(sq[g])
        out[f"grad_norm_per_param/{g}"] = math.sqrt(sq[g] / count[g])
    return out


def _param_groups(named: list, lr_scales: dict[str, float]) -> list[dict]:
    """Optimizer groups by learning-rate multiplier (``lr_scale``)."""
    import fnmatch

    by_scale: dict[float, list] = {}
    for n, p in named:
        scale = next((s for pat, s in lr_scales.items() if fnmatch.fnmatch(n, pat)), 1.0)
        by_scale.setdefault(scale, []).append(p)
    return [{"params": ps, "lr_scale": s} for s, ps in by_scale.items()]


def _check_masks(masks: dict, trainable: dict, weight_decay: float) -> dict:
    """Gradient masks, checked against the trainable parameters."""
    if masks and weight_decay:
        raise ValueError("grad_masks need weight_decay=0: decay would move masked entries")
    for n, m in masks.items():
        if n not in trainable:
            raise ValueError(f"grad_masks names {n!r}, which the configuration does not train")
        if m.shape != trainable[n].shape:
            raise ValueError(f"mask for {n} has shape {tuple(m.shape)}, "
                             f"not {tuple(trainable[n].shape)}")
    return {n: m.to(trainable[n].device, trainable[n].dtype) for n, m in masks.items()}


@dataclass
class TrainResult:
    """What ``train`` returns. ``history`` rows are documented in the module docstring."""

    history: list[dict] = field(default_factory=list)
    initial_val_loss: float = float("nan")
    initial_val_acc: float = float("nan")
    best_val_acc: float = float("nan")
    best_step: int = -1
    test_loss: float = float("nan")
    test_acc: float = float("nan")
    trainable: int = 0
    diverged: bool = False
    seconds: float = 0.0
    device: str = "cpu"


def train(model: nn.Module, train_set: Dataset, val_set: Dataset | None = None,
          test_set: Dataset | None = None, *, config: str | list[str] = "full",
          train_head: bool = True, steps: int = 400, batch_size: int = 128, lr: float = 1e-2,
          optimizer: str = "sgd", momentum: float = 0.9, weight_decay: float = 0.0,
          betas: tuple[float, float] = (0.9, 0.999), clip_grad_norm: float | None = 1.0,
          warmup_steps: int = 0, accum_steps: int = 1, label_smoothing: float = 0.0,
          augment=None, eval_every: int = 100, log_every: int = 10, seed: int = 0,
          device: str | torch.device | None = None, workers: int = 0, on_eval=None,
          grad_masks: dict[str, torch.Tensor] | None = None,
          lr_scales: dict[str, float] | None = None, keep_best: bool = True,
          precision: str = "auto", progress: bool = True) -> TrainResult:
    """Train the parameters a configuration selects; keep the best-validation weights.

    Args:
        model: a timm ViT whose head already has the task's number of classes.
        train_set, val_set, test_set: datasets of (image, label); ``val_set`` chooses the
            kept weights (the last ones if ``None``), ``test_set`` is evaluated once at the end.
        config: a configuration of ``vitplast.measure.components.CONFIGS`` or parameter patterns.
        train_head: train the head and final norm too (the paper always does).
        steps, batch_size, lr: optimisation length, batch (split in ``accum_steps``
            micro-batches of equal size) and peak learning rate.
        optimizer: ``"sgd"`` (with ``momentum``) or ``"adamw"`` (with ``betas``).
        clip_grad_norm: global gradient-norm clip (``None``: no clipping).
        warmup_steps: linear warm-up before the cosine decay.
        augment: optional ``f(x, generator) -> x`` applied to each training batch.
        eval_every, log_every: evaluation and logging periods in steps.
        on_eval: optional ``f(step, model, row)`` called after each evaluation.
        grad_masks: parameter name -> boolean mask of the entries that train (the others get
            a zero gradient, so they never change; needs ``weight_decay=0``). The trainable
            count then counts mask entries.
        lr_scales: parameter-name pattern -> learning-rate multiplier (first match wins), e.g.
            ``{"blocks.*.norm1.*": 0.25}``; other parameters use ``lr``.
        keep_best: end with the best-validation weights (else the last ones; validation is
            then only watched).
        precision: one of ``PRECISIONS`` (autocast on CUDA only).
        progress: show a tqdm bar.

    Returns:
        A ``TrainResult``; ``initial_val_acc`` is the validation accuracy of the model as
        given, before the first update (about chance with a new head).

    Raises:
        ValueError: before any step, naming the argument: unknown optimizer or precision;
            ``steps``, ``batch_size``, ``accum_steps`` not positive integers; ``lr`` not a finite
            number > 0; an empty split; a (micro-)batch larger than the train split; a
            configuration selecting no parameter (``components.trainable_names``).
    """
    _check_args(optimizer=optimizer, precision=precision, steps=steps, batch_size=batch_size,
                lr=lr, accum_steps=accum_steps, warmup_steps=warmup_steps, eval_every=eval_every,
                log_every=log_every, workers=workers, seed=seed)
    if grad_masks and weight_decay:  # an argument error, told before any split is read
        raise ValueError("grad_masks need weight_decay=0: decay would move masked entries")
    _check_splits(train_set, val_set, test_set, batch_size // accum_steps, accum_steps)
    names = trainable_names(model, config, train_head=train_head)
    device = pick_device(device)
    generator = seed_everything(seed)
    model.to(device).train()
    result = TrainResult(trainable=set_trainable(model, names), device=str(device))
    update = _Update.make(model, result, optimizer=optimizer, lr=lr, momentum=momentum,
                          weight_decay=weight_decay, betas=betas, grad_masks=grad_masks,
                          lr_scales=lr_scales, clip_grad_norm=clip_grad_norm, device=device,
                          precision=precision)
    if val_set is not None:  # one loader for every evaluation of the run
        val_set = loader(val_set, EVAL_BATCH, device=device, workers=workers)
        result.initial_val_loss, result.initial_val_acc = evaluate(
            model, val_set, device=device, precision=precision)
    start = time.perf_counter()
    with numerics(device, precision):
        best = _loop(model, update, result, train_set, val_set, generator=generator,
                     device=device, precision=precision, steps=steps, batch_size=batch_size,
                     accum_steps=accum_steps, lr=lr, warmup_steps=warmup_steps,
                     label_smoothing=label_smoothing, augment=augment, eval_every=eval_every,
                     log_every=log_every, workers=workers, on_eval=on_eval,
                     keep_best=keep_best, progress=progress,
                     desc=f"train {config if isinstance(config, str) else 'custom'}")
        result.seconds = time.perf_counter() - start
        _finish(model, result, best, update.named, test_set, device=device,
                precision=precision)
    return result


@dataclass
class _Update:
    """One optimisation step after the backward passes: the optimizer, the fp16 gradient
    scaler, the trainable parameters (by name), the gradient masks and their entry counts,
    and the clipping norm."""

    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    named: list
    masked: list
    masked_counts: dict
    clip_grad_norm: float | None

    @classmethod
    def make(cls, model, result: TrainResult, *, optimizer, lr, momentum, weight_decay, betas,
             grad_masks, lr_scales, clip_grad_norm, device, precision) -> "_Update":
        """The step of ``train``'s arguments; ``result.trainable`` drops the masked entries."""
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        masks = _check_masks(grad_masks or {}, dict(named), weight_decay)
        masked_counts = {n: int(m.sum()) for n, m in masks.items()}
        result.trainable -= sum(m.numel() - masked_counts[n] for n, m in masks.items())
        groups = _param_groups(named, lr_scales or {})
        if optimizer == "sgd":
            opt = torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay)
        else:
            opt = torch.optim.AdamW(groups, lr=lr, betas=betas, weight_decay=weight_decay)
        # fp16 needs its loss scaled (bf16 and fp32 do not: disabled, the scaler passes through)
        scaler = torch.amp.GradScaler("cuda",
                                      enabled=_amp_dtype(device, precision) == torch.float16)
        return cls(opt, scaler, named, [(dict(named)[n], m) for n, m in masks.items()],
                   masked_counts, clip_grad_norm)

    def __call__(self, row: dict | None) -> None:
        """Unscale, mask, clip and apply the gradients, then clear them; with a ``row``, log
        the gradient norms (per group, and global before clipping) into it."""
        self.scaler.unscale_(self.opt)  # true gradients for the masks, norms and clip below
        for p, m in self.masked:
            p.grad.mul_(m)
        if row is not None:
            row.update(_group_norms(self.named, self.masked_counts))
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in self.named],
                                              self.clip_grad_norm or float("inf"))
        if row is not None:
            row["grad_norm"] = norm.item()
        self.scaler.step(self.opt)  # opt.step(), skipped by an fp16 scaler on overflow
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)


def _loop(model, update: _Update, result: TrainResult, train_set, val_set, *, generator,
          device, precision, steps, batch_size, accum_steps, lr, warmup_steps, label_smoothing,
          augment, eval_every, log_every, workers, on_eval, keep_best, desc, progress):
    """``train``'s steps: history rows into ``result``; the best-validation weights (by
    name), or ``None`` when none were kept."""
    from tqdm.auto import tqdm

    best, first_loss = None, None
    batches = _batches(train_set, batch_size // accum_steps, generator, workers, device)
    schedule = functools.partial(lr_at, lr=lr, steps=steps, warmup_steps=warmup_steps)
    # (step, loss, diverged?) of the steps since the last host sync, kept on the device: the
    # divergence check of every step is exact, read at logging and evaluation steps and the end
    pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    bar = tqdm(range(steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        for group in update.opt.param_groups:
            group["lr"] = group["lr_scale"] * schedule(step)
        loss_sum = _accumulate(model, batches, update.scaler, accum_steps=accum_steps,
                               device=device, precision=precision, augment=augment,
                               generator=generator, label_smoothing=label_smoothing)
        first_loss = loss_sum if first_loss is None else first_loss
        pending.append((step, loss_sum, ~torch.isfinite(loss_sum)
                        | (loss_sum > DIVERGENCE_FACTOR * first_loss)))
        logged = step % log_every == 0 or step == steps - 1
        evaluating = val_set is not None and ((step + 1) % eval_every == 0 or step == steps - 1)
        loss_total = math.nan  # not read unless a row is kept for this step
        if logged or evaluating:
            loss_total = _sync(pending, result, schedule)
            if loss_total is None:  # diverged: the run stops
                break
        row = {"step": step, "loss": loss_total, "lr": schedule(step)}
        update(row if logged else None)
        if evaluating:
            row["val_loss"], row["val_acc"] = evaluate(model, val_set, device=device,
                                                       precision=precision)
            bar.set_postfix(loss=f"{loss_total:.3f}", val_acc=f"{row['val_acc']:.3f}")
            if not row["val_acc"] <= result.best_val_acc:  # also true for the first (NaN)
                result.best_val_acc, result.best_step = row["val_acc"], step
                best = {n: p.detach().clone() for n, p in update.named} if keep_best else None
            if on_eval is not None:
                on_eval(step, model, row)
        if logged or "val_acc" in row:
            result.history.append(row)
    return best


def _accumulate(model, batches, scaler, *, accum_steps, device, precision, augment, generator,
                label_smoothing) -> torch.Tensor:
    """Forward and backward ``accum_steps`` micro-batches; their mean loss, on the device."""
    # float64, summed as the host did: the logged losses and the divergence test are exact
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for _ in range(accum_steps):
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if augment is not None:
            x = augment(x, generator)
        with autocast(device, precision):
            loss = F.cross_entropy(model(x).float(), y, label_smoothing=label_smoothing)
        scaler.scale(loss / accum_steps).backward()
        loss_sum += loss.detach().double() / accum_steps
    return loss_sum


def _sync(pending: list, result: TrainResult, schedule) -> float | None:
    """One host sync for the steps since the last one: the last step's loss, or ``None``
    when a step diverged (then the first diverged step is the run's last history row)."""
    losses = torch.stack([v for _, v, _ in pending]).tolist()
    flags = torch.stack([f for _, _, f in pending]).tolist()
    bad = flags.index(True) if True in flags else None
    if bad is not None:
        at = pending[bad][0]
        result.diverged = True
        result.history.append({"step": at, "loss": losses[bad], "lr": schedule(at)})
        return None
    pending.clear()
    return losses[-1]


def _finish(model, result: TrainResult, best, named, test_set, *, device, precision) -> None:
    """Restore the best-validation weights (if kept) and test once, unless diverged."""
    if best is not None and not result.diverged:
        with torch.no_grad():
            for n, p in named:
                p.copy_(best[n])
    if test_set is not None and not result.diverged:
        result.test_loss, result.test_acc = evaluate(model, test_set, device=device,
                                                     precision=precision)
    model.eval()
