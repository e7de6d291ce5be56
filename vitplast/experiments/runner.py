"""The runner: a run (or runs that differ only in their LR) trained into its record.

Paper: section 2 (finetuning protocol: each configuration finetuned at one LR and seed).

``build`` makes what a run trains (its model with a new head, prepared by its ablation; its
task; the ``finetune.train`` keywords it passes); ``run_one`` trains it and returns its
record, a failing run recorded, not raised; ``run_lrs`` trains runs that differ only in
their LR as one batched computation (``vitplast.train.batched``). Which runs to train, where,
and storing their records: ``vitplast.experiments.sweep``.
"""

from __future__ import annotations

import json
import math
import time
import traceback
from collections.abc import Mapping

import torch

from vitplast import models, provenance
from vitplast.datasets import tasks
from vitplast.experiments import runtime
from vitplast.experiments.runs import TRAIN_KEYS, check_ready, check_run, task_of
from vitplast.train import ablations, batched, finetune


def run_one(run: dict, *, device: str | torch.device | None = None, progress: bool = False,
            preparations: Mapping = ablations.PREPARE) -> dict:
    """Train one run; return its record. A failing run is recorded, not raised; what a sweep
    refuses before any work is refused here too, with its message (``run_lrs``).

    The model is loaded, its classifier replaced by a new one seeded by the run's seed
    (``models.new_head``; the final norm stays pretrained), the ablation's ``prepare`` applied,
    then ``finetune.train`` trains what the configuration selects.

    Record fields: ``status`` ("ok", "diverged" or "failed"), ``error`` (a failed run's
    exception line) and ``traceback``, ``initial_val_acc`` (validation accuracy before the
    first update: about chance with the new head), ``test_acc``, ``test_loss``,
    ``best_val_acc``, ``best_step``, ``trainable``, ``seconds`` (whole run), ``train_seconds``,
    ``device``,
    ``history`` (``TrainResult.history``, see ``vitplast.train.finetune``), and provenance:
    ``machine`` (e.g. "x86_64, 2 cores"), ``vitplast``, ``torch``, ``timm``, ``python``,
    ``git_commit``, ``git_dirty``, ``date`` (UTC). Non-finite numbers become ``None``.

    Args:
        run: from ``make_run``.
        device: where to train; ``None`` picks CUDA when available.
        progress: show the training loop's progress bar.
        preparations: name -> ``prepare(model, run)``, where the run's ``prepare`` is looked
            up (``build``).
    """
    return run_lrs([run], device=device, progress=progress, preparations=preparations)[0]


def run_lrs(runs: list[dict], *, device: str | torch.device | None = None,
            progress: bool = False, preparations: Mapping = ablations.PREPARE) -> list[dict]:
    """Train runs that differ only in their ``lr``; return their records, as ``run_one``
    would (with its ``preparations``). Two or more train as one batched computation
    (``vitplast.train.batched``; their records say ``batched``: how many, and ``seconds`` is
    the shared time divided among them), unless the batched path refuses them
    (``batched.check_batchable``): then one by one.

    Raises:
        ValueError: the runs differ in more than their ``lr``; before any work, with the
            messages a sweep gives, what ``sweep.run_sweep`` refuses: settings that fail the
            run schema or an unknown task (``runs.check_run``), a batch larger than the task's
            training split or a fetched model whose weights are not here (``runs.check_ready``),
            an unknown ``prepare``.
    """
    if len({but_lr(r) for r in runs}) > 1:
        raise ValueError("run_lrs takes runs that differ only in their lr (``sweep.lr_groups``)")
    for run in runs:  # refused, not recorded as failed: as a sweep refuses them
        check_run(run)
    check_prepare(runs, preparations)
    check_ready(runs)
    start = time.perf_counter()
    device = models.pick_device(device)
    records = [dict(status="failed", error=None, traceback=None, history=[]) for _ in runs]
    try:
        model, task, kwargs = build(runs[0], preparations=preparations)
        kwargs.pop("lr")
        if len(runs) > 1:
            try:
                batched.check_batchable(model, device=device, **kwargs)
            except ValueError:
                del model
                return [r for run in runs for r in run_lrs(
                    [run], device=device, progress=progress, preparations=preparations)]
            results = batched.train_lrs(model, task.train, task.val, task.test,
                                        lrs=[r["lr"] for r in runs], device=device,
                                        progress=progress, **kwargs)
        else:
            results = [finetune.train(model, task.train, task.val, task.test, lr=runs[0]["lr"],
                                      device=device, progress=progress, **kwargs)]
        del model
        for record, r in zip(records, results):
            record.update(status="diverged" if r.diverged else "ok",
                          initial_val_acc=r.initial_val_acc, test_acc=r.test_acc,
                          test_loss=r.test_loss, best_val_acc=r.best_val_acc,
                          best_step=r.best_step, trainable=r.trainable, train_seconds=r.seconds,
                          history=r.history, **({"batched": len(runs)} if len(runs) > 1 else {}))
    except Exception as err:  # recorded; a KeyboardInterrupt still stops the sweep
        for record in records:
            record["error"] = "".join(traceback.format_exception_only(type(err), err)).strip()
            record["traceback"] = traceback.format_exc()
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    seconds = (time.perf_counter() - start) / len(runs)
    made = provenance.provenance(device)
    return [_finite({**record, "seconds": seconds, "device": str(device), **made})
            for record in records]


def but_lr(run: dict) -> str:
    """Everything of ``run`` but its ``lr``, as a key."""
    return json.dumps({**run, "lr": None}, sort_keys=True, default=str)


def check_prepare(runs: list[dict], preparations: Mapping = ablations.PREPARE) -> None:
    """Refuse (``ValueError``, naming the valid ones) a run whose ``prepare`` is not a name of
    ``preparations``: the one message of ``run_lrs``, ``build`` and a sweep (before any work)."""
    unknown = sorted({r["prepare"] for r in runs if r.get("prepare") is not None}
                     - set(preparations))
    if unknown:
        raise ValueError(f"unknown prepare {unknown[0]!r}; valid: {sorted(preparations)}")


def build(run: dict, *, preparations: Mapping = ablations.PREPARE
          ) -> tuple[torch.nn.Module, tasks.Task, dict]:
    """What a run trains: its model (loaded, with a new head, prepared by its ablation: the
    run's ``prepare`` named in ``preparations``), its task, and the ``finetune.train``
    keywords it passes. Built on the CPU, so that a run starts from the same model on every
    machine (an adapter's random init included); the training loop moves it to its device."""
    check_prepare([run], preparations)
    prepare = run.get("prepare")
    task = task_of(run)
    finetune.seed_everything(run["seed"])  # a random model's init
    model = models.load_model(run["model"], pretrained=run["pretrained"],
                              checkpoint=run["checkpoint"], num_classes=task.num_classes,
                              weights_file=run.get("weights_file"), device="cpu",
                              **run.get("model_kwargs") or {})
    models.new_head(model, task.num_classes, seed=run["seed"])
    task = tasks.fitted(task, model)  # an embedded task for another model: resized to its input
    kwargs = {k: run[k] for k in TRAIN_KEYS if run.get(k) is not None}
    if "clip_grad_norm" in run:  # None is meaningful: no clipping (not the default 1.0)
        kwargs["clip_grad_norm"] = run["clip_grad_norm"]
    if kwargs.get("workers") is None:  # the cores of the Slurm job training it, if any
        kwargs["workers"] = runtime.workers(cpus=runtime.slurm_cpus()) or 0
    if prepare is not None:
        kwargs.update(preparations[prepare](model, run) or {})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return model, task, kwargs


def _finite(obj):
    """``obj`` with NaN and infinities replaced by ``None`` (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


__all__ = ["build", "but_lr", "check_prepare", "run_lrs", "run_one"]
