"""Cluster jobs of a sweep: its runs packed into jobs, submitted as one submitit job array,
and watched through the store and the job folders until every job has ended.

Paper: none (the machinery of section 2's grids on a cluster).

**Packs.** A job pays its start-up once (a fresh Python, torch, timm and its task: seconds
to tens of seconds) and then trains the groups of its pack one after another (a group: one
run, or a setting's LRs with ``--batch-lrs``), storing each record as it finishes, so a job
that dies leaves only its unfinished runs. ``packs`` deals the groups round-robin over as
many jobs as can run at once (``slots``: ``--array-parallelism`` if given, else the
partition's idle CPUs over ``--cpus-per-task``; a local cluster's cores), so that no slot
idles while another has runs queued and no job pays a start-up a running job could have
spared; ``runs_per_job`` (``--runs-per-job N``) sets the pack size instead (more, shorter
jobs: e.g. a cluster whose queue favours short jobs). ``vitplast sweep`` on Slurm submits its
jobs before it lists its runs (``prestart``): while it does, they import what training needs,
then wait for their packs (``Early``), so their start-up costs no time of its own.

**Watching.** ``watch`` settles each run as its record appears in the store (the progress
bar counts them) and asks ``squeue`` how the jobs stand. A job that ends without storing all
its runs is named once, with its job id, why it ended as Slurm reports it and what exists of
it (its log, else its submission file); a live job that Slurm requeues or holds for its node
is named once as such, and waited for: how a job ended and those lines are
``vitplast.experiments.job_states``'s. A job's runs not stored are missing, and the same
command runs them again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
import pickle
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vitplast.experiments.job_states import accounting, end_state, ended, requeued, squeue
from vitplast.files import atomic_path

#: Seconds between two reads of the job folders; ``squeue`` is asked every ``SQUEUE_S``.
POLL_S = 0.2
SQUEUE_S = 2.0


def slots(cluster: str, parameters: dict) -> int:
    """How many jobs of an array can run at once: ``slurm_array_parallelism`` if set; else on
    Slurm the partition's idle CPUs (``sinfo``) over ``cpus_per_task``; else (local) this
    machine's cores over ``cpus_per_task``; at least 1."""
    if parameters.get("slurm_array_parallelism"):
        return int(parameters["slurm_array_parallelism"])
    cpus_per_task = int(parameters.get("cpus_per_task") or 1)
    if cluster == "debug":
        return 1
    if cluster == "slurm":  # %C: allocated/idle/other/total CPUs
        idle = sum(int(v.split("/")[1]) for v in _partition("%C", parameters) if v.count("/") == 3)
        return max(idle // cpus_per_task, 1)
    return max((os.cpu_count() or 1) // cpus_per_task, 1)


def default_minutes(cluster: str, parameters: dict) -> int:
    """A job's time limit when ``--timeout-min`` is not given: on Slurm its partition's limit
    (``sinfo``; 0, no limit, where the partition has none), elsewhere a week. submitit's own
    default, 5 minutes, is shorter than most packs of runs."""
    limits = _partition("%l", parameters) if cluster == "slurm" else []
    return _minutes(limits[0]) if limits else 7 * 24 * 60


def _partition(field: str, parameters: dict) -> list[str]:
    """``sinfo``'s ``field`` of the jobs' partition: ``slurm_partition``, else the default one
    (marked ``*``)."""
    partition = parameters.get("slurm_partition")
    command = ["sinfo", "-h", "-o", f"%P|{field}"] + (["-p", str(partition)] if partition else [])
    lines = subprocess.run(command, capture_output=True, text=True).stdout.splitlines()
    return [value for name, _, value in (line.partition("|") for line in lines)
            if partition or name.endswith("*")]


def _minutes(limit: str) -> int:
    """Slurm's time limit text (``infinite``, ``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS``) in
    minutes, rounded down; 0 for no limit."""
    if limit.lower() in ("infinite", "unlimited"):
        return 0
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    hours, minutes = (parts[0], parts[1]) if len(parts) == 3 else (0, parts[0])
    return int(days or 0) * 24 * 60 + hours * 60 + minutes


def packs(groups: list[list], n_jobs: int | None = None, runs_per_job: int | None = None
          ) -> list[list[list]]:
    """``groups`` dealt round-robin into packs: ``n_jobs`` of them, or as many as hold
    ``runs_per_job`` runs each (a group is never split, so a pack may hold more). Each pack
    keeps its groups in their given order."""
    n_runs = sum(len(g) for g in groups)
    if runs_per_job is not None:
        n_jobs = math.ceil(n_runs / runs_per_job)
    n_jobs = max(min(n_jobs or 1, len(groups)), 1)
    return [p for p in (groups[i::n_jobs] for i in range(n_jobs)) if p]


def executor_for(folder, cluster: str | None, parameters: dict):
    """submitit's executor writing into ``folder``, with ``parameters`` and the defaults of a
    pack's job: its partition's time limit (``default_minutes``), and of a limit under 6
    minutes the warning in its last quarter (submitit's: 90 s before it)."""
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    if "timeout_min" not in parameters and "slurm_time" not in parameters:
        parameters["timeout_min"] = default_minutes(executor.cluster, parameters)
    short = parameters.get("timeout_min") and 15 * parameters["timeout_min"] < 90
    if short and "slurm_signal_delay_s" not in parameters:
        parameters["slurm_signal_delay_s"] = 15 * parameters["timeout_min"]
    executor.update_parameters(**parameters)
    return executor


@dataclass
class Early:
    """Jobs submitted before a sweep knows its runs (``prestart``): each imports what training
    needs, then waits for its pack in ``inbox/<i>.pkl``; the sweep's first array hands them
    their packs (``submit``), and ``release`` ends those it did not need."""

    jobs: list
    inbox: Path
    used: bool = False
    started: float = field(default_factory=time.monotonic)

    def waiting(self) -> bool:
        """Whether its jobs still wait for packs: none handed yet, and well within ``WAIT_S``
        of their submission (a sweep that took longer to list its runs submits anew)."""
        return not self.used and time.monotonic() - self.started < WAIT_S - 120

    def hand(self, job, chosen: list[list[list]]) -> list:
        """Give the i-th waiting job ``job(chosen[i])``, the others nothing; return the jobs
        that got a pack."""
        import cloudpickle

        self.used = True
        for i in range(len(self.jobs)):
            with atomic_path(self.inbox / f"{i}.pkl") as tmp:  # never read half-written
                tmp.write_bytes(cloudpickle.dumps((job, chosen[i]) if i < len(chosen) else None))
        return self.jobs[:len(chosen)]

    def release(self) -> None:
        """End the waiting jobs no sweep handed a pack to."""
        for i in range(len(self.jobs)):
            path = self.inbox / f"{i}.pkl"
            if not path.exists():
                with atomic_path(path) as tmp:
                    tmp.write_bytes(pickle.dumps(None))


@contextlib.contextmanager
def prestart(folder, cluster: str | None = None, **parameters) -> Iterator[Early | None]:
    """For the block, as many waiting jobs (``Early``) as can run at once, submitted now, so
    that their start-up (Python, torch, timm: seconds) overlaps the sweep's own listing of its
    runs; None where packs are sized by ``runs_per_job`` or the cluster is not Slurm. After the
    block, the jobs no pack was handed to end (``Early.release``)."""
    import submitit

    if parameters.get("runs_per_job") or (cluster or submitit.AutoExecutor.which()) != "slurm":
        yield None
        return
    executor = executor_for(folder, cluster, dict(parameters))
    inbox = Path(folder) / f"inbox-{uuid.uuid4().hex[:8]}"
    inbox.mkdir(parents=True)
    early = Early(executor.map_array(functools.partial(_waiting, inbox=str(inbox)),
                                     list(range(slots(executor.cluster, parameters)))), inbox)
    try:
        yield early
    finally:
        early.release()


#: How long a waiting job waits for its pack (a sweep killed before handing them out).
WAIT_S = 1800.0


def _waiting(i: int, inbox: str) -> list[str]:
    """A prestarted job: import the training code, wait for pack ``i`` and run it."""
    # warm this job up: load what training imports (seconds) while the sweep lists the runs;
    # by name, so that the sweep itself submits these jobs before it imports torch
    for module in ("timm", "vitplast.train.batched", "vitplast.train.finetune"):
        importlib.import_module(module)
    path, end = Path(inbox) / f"{i}.pkl", time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > end:
            return []
        time.sleep(0.05)
    content = pickle.loads(path.read_bytes())
    return [] if content is None else content[0](content[1])


def submit(job, groups: list[list], settled, *, store, folder=None, cluster=None,
           runs_per_job: int | None = None, early: Early | None = None, **parameters) -> None:
    """Run ``job(pack)`` for every pack of ``groups`` as one submitit job array and wait until
    every job has ended (module docstring).

    Args:
        job: the job's function, called with one pack (a list of groups); it returns one
            status per run, "stopped" for a run it did not start (its time limit was near).
        groups: lists of (run, stale) pairs (``sweep.run_sweep``); a group stays in one job.
        settled: called with each pair and whether its record is stored, once it is or its
            job has ended without it.
        store: the ``Store`` the jobs write to (its folder holds the job folders by default).
        folder: submitit's folder (default ``<store>/submitit``).
        cluster: ``slurm``, ``local`` or ``debug`` (default: what submitit detects).
        runs_per_job: the pack size (default: one pack per ``slots``).
        early: jobs already waiting (``prestart``): the first array's packs go to them.
        **parameters: submitit's ``update_parameters`` keywords.
    """
    if early is not None and early.waiting() and runs_per_job is None:
        chosen = packs(groups, len(early.jobs))
        jobs, slurm = early.hand(job, chosen), True
    else:
        executor = executor_for(folder or store.root / "submitit", cluster, parameters)
        chosen = packs(groups, slots(executor.cluster, parameters), runs_per_job)
        jobs, slurm = executor.map_array(job, chosen), executor.cluster == "slurm"
    if slurm and not accounting():
        say("job states: read from squeue and the job folders (Slurm accounting is off here, "
            "so sacct is not used)")
    try:
        watch(jobs, chosen, store, settled, slurm=slurm)
    except KeyboardInterrupt:
        arrays = sorted({str(j.job_id).split("_")[0] for j in jobs})
        say(f"the job array {' '.join(arrays)} still runs"
            + (f" (scancel {' '.join(arrays)} stops it)" if slurm else ""))
        raise


def watch(jobs: list, chosen: list[list[list]], store, settled, *, slurm: bool) -> None:
    """Wait for ``jobs`` (one per pack of ``chosen``): settle each run as its record appears,
    a job's other runs when it ends, and name a job that ended without them, or that Slurm
    requeued (``submit``)."""
    left = {job: [pair for group in pack for pair in group] for job, pack in zip(jobs, chosen)}
    size = {job: len(runs) for job, runs in left.items()}
    states, asked, gone, told = {}, -math.inf, {}, set()
    while left:
        if slurm and time.monotonic() - asked > SQUEUE_S:
            states, asked = squeue([j.job_id for j in left]), time.monotonic()
            for job in left:
                line = requeued(job, *states.get(job.job_id, ("", "")))
                if line and line not in told:
                    told.add(line)
                    say(line)
        for job in list(left):
            state = end_state(job, states, gone, slurm)
            still = []
            for pair in left[job]:
                if store.needs(*pair):
                    still.append(pair)
                else:
                    settled(pair, True)
            left[job] = still
            if state is None:
                continue
            for pair in still:
                settled(pair, False)
            if still and state == "COMPLETED":  # the job skipped runs held by others
                say(f"job {job.job_id} left {len(still)} of its {size[job]} runs to other "
                    "processes that held their claims (missing until those store them)")
            elif still:
                say(ended(job, state, states.get(job.job_id, ("", ""))[1], len(still),
                          size[job]))
            del left[job]
        if left:
            time.sleep(POLL_S)


def say(line: str) -> None:
    """One line on stderr, above a progress bar if one is drawn."""
    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


__all__ = ["Early", "default_minutes", "executor_for", "packs", "prestart", "say", "slots",
           "submit", "watch"]
