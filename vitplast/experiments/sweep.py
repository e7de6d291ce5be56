"""Sweeps: run the runs a results store lacks, here or as a cluster job array.

Paper: section 2 (finetuning protocol: configurations x LR grid x seeds per dataset).

A run is a flat JSON-able dict (``vitplast.experiments.runs.make_run``, ``runs.grid``); the hash of
its defining keys (``runs.run_hash``) names its record file.
``run_sweep`` runs only what the store lacks and saves each record the moment it finishes, so
a killed sweep resumes losing nothing; a diverged or failed run is recorded as such. How a
run is trained into its record (a new, seeded head; its ablation; runs that differ only in
their LR as one batched computation, ``batch_lrs``): ``vitplast.experiments.runner``. Which
of a study's runs a sweep takes (order, shard, limit): ``vitplast.experiments.store.select``.
Named studies: ``vitplast.experiments.studies``; provenance of records and sessions, and a
study's progress: ``vitplast.provenance``; tables: ``vitplast.experiments.results``.

A sweep returns its ``Outcome``: complete when every run it was given is stored ``ok`` or
``diverged`` (a finished run), else how many are not stored (a job died, or was cancelled or
stopped before it ran them) or stored ``failed`` (the run raised), and what resumes them
(``vitplast sweep`` exits with ``vitplast.__main__.INCOMPLETE``, 3, then).
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from vitplast.experiments import jobs, runner, runtime
from vitplast.experiments.results import runs_table
from vitplast.experiments.runs import (
    check_ready,
    check_run,
    describe,
    run_hash,
)
from vitplast.experiments.store import Store
from vitplast.train import ablations


def lr_groups(runs: list[dict]) -> list[list[dict]]:
    """``runs`` grouped by everything but their ``lr`` (groups in order of first
    appearance): the groups ``runner.run_lrs`` can batch."""
    return [[r for r, _ in group] for group in _groups([(r, None) for r in runs], True)]


def _groups(todo: list[tuple[dict, int | None]], batch_lrs: bool
            ) -> list[list[tuple[dict, int | None]]]:
    """The (run, stale) pairs of ``todo`` grouped as ``lr_groups`` groups their runs
    (``batch_lrs``), else one pair a group."""
    groups: dict = {}
    for i, (r, stale) in enumerate(todo):
        groups.setdefault(runner.but_lr(r) if batch_lrs else i, []).append((r, stale))
    return list(groups.values())


#: A run's statuses in an ``Outcome``: a record's, or "missing" (no record).
STATUSES = ("ok", "diverged", "failed", "missing")


@dataclass(frozen=True)
class Outcome:
    """What a sweep left in its store of the runs it was given (``run_sweep``; a searched
    study's rounds, ``run_plan``, and its whole search, ``search.run_search``).

    Attributes:
        table: ``results.runs_table`` rows of those runs, in order; a run without a record
            has status "missing" (its job died, or was cancelled or stopped before it ran it:
            the same sweep runs it again).
        trained: how many of them this sweep stored (here or in its jobs); the others were
            stored before, by another process, or not at all.
    """

    table: pd.DataFrame
    trained: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """Runs per status (``STATUSES``)."""
        found = self.table["status"].value_counts() if len(self.table) else {}
        return {s: int(found.get(s, 0)) for s in STATUSES}

    @property
    def complete(self) -> bool:
        """Whether every run is stored as a finished run (``ok`` or ``diverged``)."""
        return self.counts["missing"] == self.counts["failed"] == 0

    def says(self, resume: str | None = None) -> str:
        """One line: how many runs are stored; when not complete, how many are not stored and
        how many stored failed, and ``resume``, the command that runs them again (default:
        this sweep again, with ``retry_failed=True`` for the failed)."""
        n, c = len(self.table), self.counts
        if self.complete:
            return f"complete: {n} of {n} runs stored ({c['ok']} ok, {c['diverged']} diverged)"
        if resume is None:
            resume = "the same sweep" + (" with retry_failed=True" if c["failed"] else "")
        return (f"incomplete: {c['missing']} of {n} runs not stored, {c['failed']} stored failed"
                f" ({c['ok']} ok, {c['diverged']} diverged); to resume: {resume}")


def outcome(runs: list[dict], store: Store, trained: int = 0) -> Outcome:
    """The ``Outcome`` of ``runs`` (each once, by hash) in ``store`` now."""
    records = {store.path(c): store.record(c) or {"run": c, "status": "missing"} for c in runs}
    return Outcome(runs_table(list(records.values())), trained)


def run_sweep(runs: list[dict], root: str | Path, *, executor: str = "serial",
              device: str | torch.device | None = None, progress: bool = True,
              retry_failed: bool = False, batch_lrs: bool = False,
              preparations: Mapping = ablations.PREPARE, **executor_kwargs) -> Outcome:
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
            (``runner.run_lrs``; a job per group with submitit): many runs per device-minute
            on a GPU.
        preparations: where a run's ``prepare`` is looked up (``runner.build``); its jobs get
            them too.
        **executor_kwargs: submitit's ``folder`` (default ``root/submitit``), ``cluster``
            ("slurm", "local", "debug"; default detected) and ``update_parameters`` keywords
            (``timeout_min``, ``gpus_per_node``, ``slurm_array_parallelism``, ...), and
            ``runs_per_job``: the runs are packed into jobs (``vitplast.experiments.jobs``:
            by default as many jobs as can run at once), each training its pack one group
            after another (``run_pack``); runs a live process holds the claim on are left
            to it and waited for.

    Returns:
        Its ``Outcome``: ``table``, the rows of ``runs`` in order (a run without a record,
        its job died or was cancelled, has status "missing" and runs again next time);
        ``complete`` only when every run is stored ok or diverged; ``says()``, the line.
    """
    _check_sweep(runs, root, executor, executor_kwargs, preparations)
    store = Store(root)
    store.tidy()
    todo = store.plan(runs, retry_failed)  # (run, the modification time of a failed record)
    trained = _train(todo, store, executor, device, progress, batch_lrs, preparations,
                     executor_kwargs, stored=len(runs) - len(todo))
    return outcome(runs, store, trained)


def run_as(runs: list[dict], root: str | Path, runtime, executor) -> Outcome:
    """``run_sweep`` as a ``runtime.Runtime`` (device, progress, retry_failed, batch_lrs) and
    a ``runtime.Executor`` say: every study kind's sweep (``Study.run``)."""
    return run_sweep(runs, root, executor=executor.name, device=runtime.device,
                     progress=runtime.progress, retry_failed=runtime.retry_failed,
                     batch_lrs=runtime.batch_lrs, **executor.options)


def run_plan(todo: list[tuple[dict, int | None]], store: Store, runtime, executor) -> Outcome:
    """Train a store's plan, ``todo`` (``Store.plan``'s (run, stale) pairs of runs that
    ``make_run`` made), as a ``runtime.Runtime`` (device, progress, batch_lrs) and a
    ``runtime.Executor`` say: the sweep of a caller that plans itself (a round of
    ``search.run_search``). Return the ``Outcome`` of its runs: a run not stored is one
    another process holds (``Store.claimed``) or one lost (its job died)."""
    trained = _train(todo, store, executor.name, runtime.device, runtime.progress,
                     runtime.batch_lrs, ablations.PREPARE, executor.options)
    return outcome([run for run, _ in todo], store, trained)


def _train(todo: list[tuple[dict, int | None]], store: Store, executor: str, device,
           progress: bool, batch_lrs: bool, preparations: Mapping, executor_kwargs: dict,
           stored: int = 0) -> int:
    """Train the (run, stale) pairs of a plan (``Store.plan``) into ``store``, here one group
    after another or as a job array (``run_sweep``'s arguments), refused first
    (``check_ready``) when a batch does not fit its task or a model's weights are not here;
    return how many it stored. ``stored``: how many runs of the sweep were stored before (for
    the progress bar)."""
    check_ready([c for c, _ in todo])
    bar = tqdm(total=len(todo), desc=f"sweep ({stored} stored)", disable=not progress)
    before = stored

    def done(saved: list[bool]):  # the runs this sweep stored (not a dead job's, nor others')
        nonlocal stored
        stored += sum(saved)
        bar.set_description(f"sweep ({stored} stored)", refresh=False)
        bar.update(len(saved))

    groups = _groups(todo, batch_lrs)
    if executor == "serial":
        for group in groups:
            done([status != "skipped" for status in
                  _run_and_save(group, store, device, preparations, progress=progress)])
    elif groups:
        _submit(groups, store, device, done, executor_kwargs, preparations)
    bar.close()
    return stored - before


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
    jobs.submit(job, [g for g in groups if g not in theirs], lambda pair, saved: done([saved]),
                store=store, **executor_kwargs)
    for group in theirs:
        store.wait_for([c for c, _ in group])
        done([not store.needs(*pair) for pair in group])


def _check_sweep(runs, root, executor, executor_kwargs, preparations) -> None:
    """Refuse ``run_sweep``'s arguments before anything is loaded or run: the executor and
    its options as ``runtime.Executor`` refuses them, each run, each ``prepare``."""
    runtime.Executor(executor, executor_kwargs)
    if Path(root).exists() and not Path(root).is_dir():
        raise ValueError(f"root={str(root)!r} is a file: a store is a folder; give another path")
    for i, c in enumerate(runs):
        try:
            check_run(c)
        except ValueError as err:
            raise ValueError(f"run {i} of {len(runs)} ({describe(c)}) is refused before the sweep "
                             f"starts: {err}") from None
    runner.check_prepare(runs, preparations)


def _run_and_save(group: list[tuple[dict, int | None]], store: Store, device,
                  preparations: Mapping = ablations.PREPARE, progress: bool = False
                  ) -> list[str]:
    """The job: claim the runs of ``group`` ((run, stale) pairs differing only in LR), train
    those still wanted (``runner.run_lrs``), store each record, release the claims; return each
    run's status, or "skipped" when another process holds its claim or has stored it."""
    with contextlib.ExitStack() as claims:
        mine = [claims.enter_context(store.claim(run)) and store.needs(run, stale)
                for run, stale in group]
        todo = [run for (run, _), m in zip(group, mine) if m]
        records = iter(runner.run_lrs(todo, device=device, progress=progress,
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
    that ``runner.run_lrs`` does not record the run as failed)."""


def run_pack(pack: list[list[tuple[dict, int | None]]], store: Store, device,
             preparations: Mapping = ablations.PREPARE) -> list[str]:
    """A cluster job (``vitplast.experiments.jobs``): ``_run_and_save`` for each group of
    ``pack`` in turn (a run's ``prepare`` looked up in ``preparations``, which the job receives
    with its pack); return every run's status, "stopped" for those of the groups it did not
    start because Slurm warned that its time limit is near (submitit's signal, ``USR2``
    ``signal_delay_s`` seconds before it). ``SIGTERM`` (the time limit reached, ``scancel``)
    raises ``JobStopped``. Torch computes on the job's cores (``runtime.slurm_cpus``)."""
    near = []
    signal.signal(signal.SIGUSR2, lambda *_: near.append(True))

    def stop(signum, frame):
        raise JobStopped(f"stopped by {signal.Signals(signum).name} (time limit or scancel)")

    signal.signal(signal.SIGTERM, stop)
    cpus = runtime.slurm_cpus()
    if cpus:
        torch.set_num_threads(cpus)
    statuses = []
    for group in pack:
        statuses += (["stopped"] * len(group) if near else
                     _run_and_save(group, store, device, preparations))
    return statuses


__all__ = ["STATUSES", "JobStopped", "Outcome", "lr_groups", "outcome", "run_as",
           "run_pack", "run_plan", "run_sweep"]
