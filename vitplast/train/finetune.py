"""Finetuning: the one training loop, used for every configuration and for pretraining.

Paper: section 5 and Takeaway 3 (finetuning each component alone). The default recipe is
the paper's, its values in ``keys.RECIPES["paper"]``: SGD with momentum, a global
gradient-norm clip, a cosine schedule to 0 after a linear warm-up.

Frozen parameters have ``requires_grad=False`` (no gradient is ever computed for them);
the optimizer sees only trainable ones. The best-validation weights are kept and tested.

A run is ``diverged`` when its loss is not finite or exceeds ``DIVERGENCE_FACTOR`` times its
first step's loss (with a new head that is ~ln(#classes), so ~230 on 10 classes: far above the
transient spikes of a high but working LR, which recover). Every step is checked; the check
is read at the next logging or evaluation step (no host sync per step, but a batched run's
copy of its K learning rates to the device), the history ends with the first diverged step,
and the run stops there and is not tested.

Logged (``TrainResult.history``, one row per logged step): ``step``, ``loss``, ``lr``,
``grad_norm`` (global, before clipping), ``grad_norm/<group>`` and
``grad_norm_per_param/<group>`` (= norm / sqrt(#params of the group)), and at evaluation
steps ``val_loss`` and ``val_acc``.

The loop (``run``) trains a trainee (``vitplast.train.trainees``): the model itself
(``train``), or K stacked copies of its trainable parameters, one run per learning rate
(``vitplast.train.batched.train_lrs``). A pass over data (loader, precision, ``evaluate``) is
``vitplast.train.passes``'s; what a run refuses before its first step,
``vitplast.train.preflight``'s.
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
from tqdm.auto import tqdm

from vitplast.measure.components import component_of
from vitplast.models import pick_device
from vitplast.train import trainees
from vitplast.train.configurations import set_trainable, trainable_names
from vitplast.train.keys import DEFAULTS
from vitplast.train.passes import EVAL_BATCH, _batches, loader, numerics
from vitplast.train.preflight import check_args, check_masks, check_splits

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


def _group_norms(names: list[str], sq: list[float], counts: dict[str, int]) -> dict[str, float]:
    """Gradient norm per group (component, head, norm...) and per trainable parameter of the
    group, from each parameter's squared gradient norm (``sq``) and trainable entries."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for n, s in zip(names, sq):
        g = component_of(n)
        total[g] = total.get(g, 0.0) + s
        count[g] = count.get(g, 0) + counts[n]
    out = {}
    for g in total:
        out[f"grad_norm/{g}"] = math.sqrt(total[g])
        out[f"grad_norm_per_param/{g}"] = math.sqrt(total[g] / count[g])
    return out


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


_D = DEFAULTS  # the training keys' defaults, declared in vitplast.train.keys.KEYS


def train(model: nn.Module, train_set: Dataset, val_set: Dataset | None = None,
          test_set: Dataset | None = None, *, config: str | list[str] = _D["config"],
          train_head: bool = _D["train_head"], steps: int = _D["steps"],
          batch_size: int = _D["batch_size"], lr: float = _D["lr"],
          optimizer: str = _D["optimizer"], momentum: float = _D["momentum"],
          weight_decay: float = _D["weight_decay"],
          betas: tuple[float, float] = _D["betas"],
          clip_grad_norm: float | None = _D["clip_grad_norm"],
          warmup_steps: int = _D["warmup_steps"], accum_steps: int = _D["accum_steps"],
          label_smoothing: float = _D["label_smoothing"], augment=None,
          eval_every: int = _D["eval_every"], log_every: int = _D["log_every"],
          seed: int = _D["seed"], device: str | torch.device | None = None,
          workers: int = _D["workers"], on_eval=None,
          grad_masks: dict[str, torch.Tensor] | None = None,
          lr_scales: dict[str, float] | None = _D["lr_scales"], keep_best: bool = True,
          precision: str = _D["precision"], progress: bool = True) -> TrainResult:
    """Train the parameters a configuration selects; keep the best-validation weights.

    The defaults of the keywords that are run keys are the table's (``keys.KEYS``, where
    each one's range and description are declared; ``help(train)`` shows their values).

    Args:
        model: a timm ViT whose head already has the task's number of classes.
        train_set, val_set, test_set: datasets of (image, label); ``val_set`` chooses the
            kept weights (the last ones if ``None``), ``test_set`` is evaluated once at the end.
        config: a configuration of ``vitplast.train.configurations.CONFIGS`` or parameter patterns.
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
        precision: one of ``passes.PRECISIONS`` (autocast on CUDA only).
        progress: show a tqdm bar.

    Returns:
        A ``TrainResult``; ``initial_val_acc`` is the validation accuracy of the model as
        given, before the first update (about chance with a new head).

    Raises:
        ValueError: before any step, naming the argument (``vitplast.train.preflight``):
            unknown optimizer or precision; ``steps``, ``batch_size``, ``accum_steps`` not
            positive integers; ``lr``, momentum, weight_decay, label_smoothing,
            clip_grad_norm, betas out of the run schema's ranges (the message a sweep and
            ``make_run`` give); an empty split; a (micro-)batch larger than the train split
            (``preflight.check_batch``: the message of ``run_one`` and a sweep); a
            configuration selecting no parameter (``configurations.trainable_names``).
    """
    args = {k: v for k, v in locals().items() if k not in ("model", "train_set", "val_set",
                                                           "test_set")}  # train's keywords
    desc = f"train {config if isinstance(config, str) else 'custom'}"
    return run(model, trainees.Single, (train_set, val_set, test_set), args, [lr], desc=desc)[0]


def run(model: nn.Module, trainee, splits: tuple, args: dict, lrs: list[float], *,
        desc: str, batches=None, schedule=lr_at) -> list[TrainResult]:
    """``train``'s run, of one model or of K copies at once: the one setup, loop and test.

    Args:
        model: as ``train``.
        trainee: the class of what trains: ``trainees.Single`` (``model`` itself, one run),
            or ``trainees.Stacked`` (K copies of its trainable parameters, one run per LR).
        splits: (train_set, val_set, test_set), as ``train``'s.
        args: ``train``'s keyword arguments (``lr`` is not read).
        lrs: peak learning rates, one run each (one for ``trainees.Single``).
        desc: the progress bar's label.
        batches: the training batches, an iterator of (images, labels) giving at least
            ``steps x accum_steps`` (None: ``train_set`` shuffled, ``passes._batches``).
        schedule: the LR at a step, ``f(step, *, lr, steps, warmup_steps)`` (``lr_at``:
            warm-up, then cosine decay).

    Returns:
        One ``TrainResult`` per LR, in order (``seconds``: the loop's time over the runs).
    """
    train_set, val_set, test_set = splits
    check_args(args, lrs)
    check_splits(train_set, val_set, test_set, args["batch_size"], args["accum_steps"])
    names = trainable_names(model, args["config"], train_head=args["train_head"])
    device = pick_device(args["device"])
    generator = seed_everything(args["seed"])
    model.to(device).train()
    count = set_trainable(model, names)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    masks = check_masks(args["grad_masks"] or {}, dict(named))
    trainee = trainee(model, named, args, lrs, device)
    if trainee.k != len(lrs):
        raise ValueError(f"{type(trainee).__name__} trains {trainee.k} run(s), given {len(lrs)} "
                         "LRs: one LR a run (trainees.Stacked trains several)")
    step = _Step(trainee, [n for n, _ in named],
                 [(i, masks[n]) for i, (n, _) in enumerate(named) if n in masks],
                 {n: int(masks[n].sum()) if n in masks else p.numel() for n, p in named},
                 args["clip_grad_norm"] or math.inf)
    trainable = count - sum(m.numel() - int(m.sum()) for m in masks.values())
    results = [TrainResult(trainable=trainable, device=str(device)) for _ in lrs]
    with numerics(device, args["precision"]):
        val = None
        if val_set is not None:  # one loader for every evaluation of the run
            val = loader(val_set, EVAL_BATCH, device=device, workers=args["workers"])
            for r, (loss, acc) in zip(results, step.trainee.evaluate(val)):
                r.initial_val_loss, r.initial_val_acc = loss, acc
        if batches is None:  # train_set shuffled, a fresh permutation per epoch
            batches = _batches(train_set, args["batch_size"] // args["accum_steps"], generator,
                               args["workers"], device)
        start = time.perf_counter()
        _loop(step, results, batches, val, generator=generator, device=device, args=args,
              lrs=lrs, desc=desc, schedule=schedule)
        for r in results:
            r.seconds = (time.perf_counter() - start) / len(lrs)
        _finish(step.trainee, results, test_set, device=device, keep_best=args["keep_best"])
    model.eval()
    return results


@dataclass
class _Step:
    """One optimisation step of K runs after their backward passes: the trainee
    (``trainees.Single`` or ``trainees.Stacked``), the trainable parameters' names, the gradient
    masks (index in ``names``, mask), the trainable entries per parameter and the clip norm."""

    trainee: object
    names: list
    masks: list
    counts: dict
    clip: float

    @torch.no_grad()
    def __call__(self, lrs: list[float], rows: list[dict] | None) -> None:
        """Mask and clip each run's gradients (global norm), then apply them (``lrs``: each
        run's learning rate); with ``rows``, log each run's gradient norms (per group, and
        global before clipping) into its row."""
        grads = self.trainee.grads()  # (K, ...) per trainable parameter
        for i, m in self.masks:
            grads[i].mul_(m)
        if rows is not None:
            sq = torch.stack([g.float().pow(2).flatten(1).sum(1) for g in grads])  # (P, K)
            for row, column in zip(rows, sq.T.tolist()):  # one device sync
                row.update(_group_norms(self.names, column, self.counts))
        # each run's norm as torch.nn.utils.clip_grad_norm_ takes it, and its clip
        norms = torch.stack([torch.nn.utils.get_total_norm([g[k] for g in grads])
                             for k in range(self.trainee.k)])
        coef = (self.clip / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view((-1,) + (1,) * (g.dim() - 1)).to(g.dtype))
        if rows is not None:
            for row, norm in zip(rows, norms.tolist()):
                row["grad_norm"] = norm
        self.trainee.apply(lrs)


def _loop(step: _Step, results: list[TrainResult], batches, val, *, generator, device,
          args, lrs, desc, schedule) -> None:
    """The steps of K runs on ``batches`` (an iterator of training batches): history rows
    into ``results``, best weights kept by the trainee. A run that diverges stops alone; the
    loop ends when every run has."""
    trainee, steps = step.trainee, args["steps"]
    schedules = [functools.partial(schedule, lr=lr, steps=steps,
                                   warmup_steps=args["warmup_steps"]) for lr in lrs]
    # (step, losses, diverged?) of the steps since the last host sync, kept on the device: the
    # divergence check of every step is exact, read at logging and evaluation steps and the end
    first, pending = None, []
    bar = tqdm(range(steps), desc=desc, disable=not args["progress"], leave=False)
    for at in bar:
        loss_sum = _accumulate(trainee, batches, args=args, device=device, generator=generator)
        first = loss_sum if first is None else first
        pending.append((at, loss_sum, ~torch.isfinite(loss_sum)
                        | (loss_sum > DIVERGENCE_FACTOR * first)))
        logged = at % args["log_every"] == 0 or at == steps - 1
        evaluating = val is not None and ((at + 1) % args["eval_every"] == 0 or at == steps - 1)
        totals = [math.nan] * trainee.k  # not read unless a row is kept for this step
        if logged or evaluating:
            totals = _sync(pending, trainee, results, schedules)
            if all(r.diverged for r in results):
                break
        rows = [{"step": at, "loss": total, "lr": s(at)} for total, s in zip(totals, schedules)]
        step([s(at) for s in schedules], rows if logged else None)
        if evaluating:
            for k, (r, row, (loss, acc)) in enumerate(zip(results, rows, trainee.evaluate(val))):
                row["val_loss"], row["val_acc"] = loss, acc
                if not r.diverged and not acc <= r.best_val_acc:  # true for the first (NaN)
                    r.best_val_acc, r.best_step = acc, at
                    if args["keep_best"]:
                        trainee.keep_best(k)
            bar.set_postfix(loss=f"{totals[0]:.3f}", val_acc=f"{rows[0]['val_acc']:.3f}")
            if args["on_eval"] is not None:
                args["on_eval"](at, trainee.model, rows[0])
        for r, row in zip(results, rows):
            if not r.diverged and (logged or "val_acc" in row):
                r.history.append(row)


def _accumulate(trainee, batches, *, args, device, generator) -> torch.Tensor:
    """Forward and backward ``accum_steps`` micro-batches; each run's mean loss (K,), on the
    device."""
    accum = args["accum_steps"]
    # float64, summed as the host did: the logged losses and the divergence test are exact
    loss_sum = torch.zeros(trainee.k, dtype=torch.float64, device=device)
    for _ in range(accum):
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if args["augment"] is not None:
            x = args["augment"](x, generator)
        logits = trainee.forward(x)  # (K, B, classes)
        losses = torch.stack([F.cross_entropy(logits[k], y,
                                              label_smoothing=args["label_smoothing"])
                              for k in range(trainee.k)])
        trainee.backward((losses / accum).sum())
        loss_sum += losses.detach().double() / accum
    return loss_sum


def _sync(pending: list, trainee, results: list[TrainResult], schedules) -> list[float]:
    """One host sync for the steps since the last one: a run whose step diverged gets the
    first diverged step as its last history row and stops. Returns each run's last loss."""
    losses = torch.stack([v for _, v, _ in pending]).T.tolist()  # (K, steps)
    flags = torch.stack([f for _, _, f in pending]).T.tolist()
    for k, (r, run_losses, run_flags) in enumerate(zip(results, losses, flags)):
        if r.diverged or True not in run_flags:
            continue
        bad = run_flags.index(True)
        at = pending[bad][0]
        r.diverged = True
        r.history.append({"step": at, "loss": run_losses[bad], "lr": schedules[k](at)})
        trainee.stop(k)
    pending.clear()
    return [run_losses[-1] for run_losses in losses]


def _finish(trainee, results: list[TrainResult], test_set, *, device, keep_best) -> None:
    """Restore each run's best-validation weights (if kept) and test it once, unless it
    diverged."""
    finished = [not r.diverged for r in results]
    if keep_best:
        trainee.restore_best(finished)
    if test_set is not None and any(finished):
        scores = trainee.evaluate(loader(test_set, EVAL_BATCH, device=device))
        for r, ok, (loss, acc) in zip(results, finished, scores):
            if ok:
                r.test_loss, r.test_acc = loss, acc
