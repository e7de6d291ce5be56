"""Sweeps: run the runs a results store lacks, here or as a cluster job array.

Paper: section 2 (finetuning protocol: configurations x LR grid x seeds per dataset).

A run is a flat JSON-able dict (``vitplast.experiments.runs.make_run``, ``runs.grid``); the hash of
its defining keys (``runs.run_hash``) names its record file.
``run_sweep`` runs only what the store lacks and saves each record the moment it finishes, so
a killed sweep resumes losing nothing; a diverged or failed run is recorded as such. Every run
starts from a new, seeded head (``models.new_head``). Runs that differ only in their LR may
train as one batched computation (``batch_lrs``, ``vitplast.train.batched``). Which of a study's
runs a sweep takes (order, shard, limit): ``vitplast.experiments.store.select``. Named
studies: ``vitplast.experiments.studies``; provenance of records and sessions, and a study's
progress: ``vitplast.provenance``; tables: ``vitplast.experiments.results``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import torch

from vitplast import models, provenance
from vitplast.datasets import tasks
from vitplast.experiments import jobs
from vitplast.experiments.results import runs_table
from vitplast.experiments.runs import (
    TRAIN_KEYS,
    check_batches,
    check_run,
    describe,
    run_hash,
    task_of,
)
from vitplast.experiments.runtime import EXECUTORS
from vitplast.experiments.store import Store
from vitplast.train import ablations, batched, finetune


def run_one(run: dict, *, device: str | torch.device | None = None, progress: bool = False,
            preparations: Mapping = ablations.PREPARE) -> dict:
    """Train one run; return its record. A failing run is recorded, not raised.

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
        ValueError: the runs differ in more than their ``lr``.
    """
    if len({_but_lr(r) for r in runs}) > 1:
        raise ValueError("run_lrs takes runs that differ only in their lr (sweep.lr_groups)")
    start = time.perf_counter()
    device = models.pick_device(device)
    records = [dict(status="failed", error=None, traceback=None, history=[]) for _ in runs]
    try:
        model, task, kwargs = build(runs[0], device, preparations)
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


def lr_groups(runs: list[dict]) -> list[list[dict]]:
    """``runs`` grouped by everything but their ``lr`` (groups in order of first
    appearance): the groups ``run_lrs`` can batch."""
    return [[r for r, _ in group] for group in _groups([(r, None) for r in runs], True)]


def _groups(todo: list[tuple[dict, int | None]], batch_lrs: bool
            ) -> list[list[tuple[dict, int | None]]]:
    """The (run, stale) pairs of ``todo`` grouped as ``lr_groups`` groups their runs
    (``batch_lrs``), else one pair a group."""
    groups: dict = {}
    for i, (r, stale) in enumerate(todo):
        groups.setdefault(_but_lr(r) if batch_lrs else i, []).append((r, stale))
    return list(groups.values())


def _but_lr(run: dict) -> str:
    """Everything of ``run`` but its ``lr``, as a key."""
    return json.dumps({**run, "lr": None}, sort_keys=True, default=str)


def build(run: dict, device: torch.device, preparations: Mapping = ablations.PREPARE
          ) -> tuple[torch.nn.Module, tasks.Task, dict]:
    """What a run trains: its model (loaded, with a new head, prepared by its ablation: the
    run's ``prepare`` named in ``preparations``), its task, and the ``finetune.train``
    keywords it passes."""
    prepare = run.get("prepare")
    if prepare is not None and prepare not in preparations:
        raise ValueError(f"unknown prepare {prepare!r}; valid: {sorted(preparations)}")
    task = task_of(run)
    finetune.seed_everything(run["seed"])  # a random model's init
    model = models.load_model(run["model"], pretrained=run["pretrained"],
                              checkpoint=run["checkpoint"], num_classes=task.num_classes,
                              weights_file=run.get("weights_file"), device=device,
                              **run.get("model_kwargs") or {})
    models.new_head(model, task.num_classes, seed=run["seed"])
    kwargs = {k: run[k] for k in TRAIN_KEYS if run.get(k) is not None}
    if "clip_grad_norm" in run:  # None is meaningful: no clipping (not the default 1.0)
        kwargs["clip_grad_norm"] = run["clip_grad_norm"]
    kwargs.setdefault("workers", default_workers())
    if prepare is not None:
        kwargs.update(preparations[prepare](model, run) or {})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return model, task, kwargs


def default_workers() -> int:
    """DataLoader workers of a run that names none: inside a SLURM job, its cpus-per-task
    minus the one the training process needs (``SLURM_CPUS_PER_TASK``); else 0 (this
    process reads the batches)."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return max(int(cpus) - 1, 0) if cpus.isdigit() else 0


def _finite(obj):
    """``obj`` with NaN and infinities replaced by ``None`` (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def run_sweep(runs: list[dict], root: str | Path, *, executor: str = "serial",
              device: str | torch.device | None = None, progress: bool = True,
              retry_failed: bool = False, batch_lrs: bool = False,
              preparations: Mapping = ablations.PREPARE, **executor_kwargs) -> pd.DataFrame:
    """Run the runs the store under ``root`` lacks; each record is saved atomically by
    whoever ran it (this process or the cluster job) as soon as it finishes.

    Every run is claimed before it trains (``Store.claim``), so concurrent sweeps over one
    store, sharded or not, never train a run twice: a run claimed by a live process is left
    to it (and reads "missing" here until it is stored). Before running, orphan temp files of
    killed writes are deleted (``Store.tidy``: ``Store.clean_temp``), dead claims of finished
    runs removed (``Store.clean_dead_claims``, one warning naming them) and the files that
    fail their schema named in a warning (``Store.audit``); a record that fails is re-run.

    Refused before any work (``ValueError``, naming the run, the setting and its range): a
    run whose settings fail the run schema (``runs.check_run``), one to run whose batch (or
    micro-batch, ``batch_size / accum_steps``) is larger than its task's training split or
    not divisible by ``accum_steps``, and a store whose study log fails its schema
    (``Store.companion``: its fix keeps its sessions).

    Args:
        runs: run dicts (``grid``, ``make_run``); duplicates run once.
        root: the results folder (``vitplast.experiments.store.Store``).
        executor: ``"serial"`` (here, one run after another) or ``"submitit"`` (a job array:
            SLURM when available, else submitit's local executor).
        device: where each run trains; ``None`` picks CUDA when available.
        progress: a progress bar over runs, and (serial executor) one over the steps of the
            run in flight.
        retry_failed: also re-run stored runs whose status is "failed" (once: a failed record
            another sweep re-ran meanwhile is not re-run again).
        batch_lrs: train the runs that differ only in their LR as one batched computation
            (``run_lrs``; a job per group with submitit): many runs per device-minute on a GPU.
        preparations: where a run's ``prepare`` is looked up (``build``); its jobs get them too.
        **executor_kwargs: submitit's ``folder`` (default ``root/submitit``), ``cluster``
            ("slurm", "local", "debug"; default detected) and ``update_parameters`` keywords
            (``timeout_min``, ``gpus_per_node``, ``slurm_array_parallelism``, ...), and
            ``runs_per_job``: the runs are packed into jobs (``vitplast.experiments.jobs``:
            by default as many jobs as can run at once), each training its pack one group
            after another (``run_pack``); runs a live process holds the claim on are left
            to it and waited for.

    Returns:
        ``results`` rows of ``runs``, in order; a run without a record (its job died) has
        status "missing" and runs again next time.
    """
    hashes = _check_sweep(runs, root, executor, executor_kwargs, preparations)
    store = Store(root)
    store.tidy()
    todo = store.plan(runs, retry_failed)  # (run, the modification time of a failed record)
    stored = len(runs) - len(todo)

    def done(group):  # the bar counts the runs now stored, a dead job's not among them
        nonlocal stored
        stored += sum(store.has(c) for c, _ in group)
        bar.set_description(f"sweep ({stored} stored)", refresh=False)
        bar.update(len(group))

    check_batches([c for c, _ in todo])
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"sweep ({stored} stored)", disable=not progress)
    groups = _groups(todo, batch_lrs)
    if executor == "serial":
        for group in groups:
            _run_and_save(group, store, device, preparations, progress=progress)
            done(group)
    elif groups:
        _submit(groups, store, device, done, executor_kwargs, preparations)
    bar.close()
    records = {h: store.record(c) or {"run": c, "status": "missing"}
               for h, c in zip(hashes, runs)}
    return runs_table(list(records.values()))


def run_as(runs: list[dict], root: str | Path, runtime, executor) -> pd.DataFrame:
    """``run_sweep`` as a ``runtime.Runtime`` (device, progress, retry_failed, batch_lrs) and
    a ``runtime.Executor`` say: every study kind's sweep (``Study.run``, ``search.run_search``)."""
    return run_sweep(runs, root, executor=executor.name, device=runtime.device,
                     progress=runtime.progress, retry_failed=runtime.retry_failed,
                     batch_lrs=runtime.batch_lrs, **executor.options)


def _submit(groups: list[list[tuple[dict, int | None]]], store: Store, device, done,
            executor_kwargs: dict, preparations: Mapping) -> None:
    """The groups as packs of a job array (``jobs.submit``, each job ``run_pack``); groups
    whose runs another live process holds the claim on (a killed sweep's jobs still
    running) are left to it and waited for (``Store.wait_for``)."""
    held = store.claimed()
    theirs = [g for g in groups if any(run_hash(c) in held for c, _ in g)]
    if theirs:
        jobs.say(f"{sum(map(len, theirs))} run(s) are being trained by other processes "
                 "(their claims): waiting for them too")
    job = functools.partial(run_pack, store=store, device=device,
                            preparations=dict(preparations))  # a plain dict pickles anywhere
    jobs.submit(job, [g for g in groups if g not in theirs], lambda pair: done([pair]),
                store=store, **executor_kwargs)
    for group in theirs:
        store.wait_for([c for c, _ in group])
        done(group)


def _check_sweep(runs, root, executor, executor_kwargs, preparations) -> list[str]:
    """``run_sweep``'s arguments, before anything is loaded or run; return the runs' hashes
    (``run_hash``)."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid: {list(EXECUTORS)}")
    if executor == "serial" and executor_kwargs:
        raise TypeError(f"the serial executor takes no options, got {sorted(executor_kwargs)}")
    if Path(root).exists() and not Path(root).is_dir():
        raise ValueError(f"root={str(root)!r} is a file: a store is a folder; give another path")
    for i, c in enumerate(runs):
        try:
            check_run(c)
        except ValueError as err:
            raise ValueError(f"run {i} of {len(runs)} ({describe(c)}) is refused before the sweep "
                             f"starts: {err}") from None
    unknown = {c["prepare"] for c in runs if c.get("prepare")} - set(preparations)
    if unknown:
        raise ValueError(f"unknown prepare {sorted(unknown)}; valid: {sorted(preparations)}")
    return [run_hash(c) for c in runs]


def _run_and_save(group: list[tuple[dict, int | None]], store: Store, device,
                  preparations: Mapping = ablations.PREPARE, progress: bool = False
                  ) -> list[str]:
    """The job: claim the runs of ``group`` ((run, stale) pairs differing only in LR), train
    those still wanted (``run_lrs``), store each record, release the claims; return each
    run's status, or "skipped" when another process holds its claim or has stored it."""
    import contextlib

    with contextlib.ExitStack() as claims:
        mine = [claims.enter_context(store.claim(run)) and store.needs(run, stale)
                for run, stale in group]
        todo = [run for (run, _), m in zip(group, mine) if m]
        records = iter(run_lrs(todo, device=device, progress=progress,
                               preparations=preparations) if todo else [])
        statuses = []
        for (run, _), m in zip(group, mine):
            if m:
                record = next(records)
                store.save(run, record)
            statuses.append(record["status"] if m else "skipped")
    return statuses


class JobStopped(BaseException):
    """Slurm stopped the job (SIGTERM: its time limit, or ``scancel``): the run in flight is
    dropped, its claim released, and nothing is recorded for it (a ``BaseException``, so
    that ``run_lrs`` does not record the run as failed)."""


def run_pack(pack: list[list[tuple[dict, int | None]]], store: Store, device,
             preparations: Mapping = ablations.PREPARE) -> list[str]:
    """A cluster job (``vitplast.experiments.jobs``): ``_run_and_save`` for each group of
    ``pack`` in turn (a run's ``prepare`` looked up in ``preparations``, which the job receives
    with its pack); return every run's status, "stopped" for those of the groups it did not
    start because Slurm warned that its time limit is near (submitit's signal, ``USR2``
    ``signal_delay_s`` seconds before it). ``SIGTERM`` (the time limit reached, ``scancel``)
    raises ``JobStopped``. Torch computes on the job's cores (``SLURM_CPUS_PER_TASK``)."""
    import signal

    near = []
    signal.signal(signal.SIGUSR2, lambda *_: near.append(True))

    def stop(signum, frame):
        raise JobStopped(f"stopped by {signal.Signals(signum).name} (time limit or scancel)")

    signal.signal(signal.SIGTERM, stop)
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit():
        torch.set_num_threads(int(cpus))
    statuses = []
    for group in pack:
        statuses += (["stopped"] * len(group) if near else
                     _run_and_save(group, store, device, preparations))
    return statuses


__all__ = ["JobStopped", "build", "default_workers", "lr_groups", "run_as", "run_lrs",
           "run_one", "run_pack", "run_sweep"]
