"""How a Slurm job of a sweep ended, as Slurm and the job's folder tell it, and the line that
names a job that ended without storing its runs or that Slurm put back in the queue.

Paper: none (the machinery of section 2's grids on a cluster; ``jobs`` watches the jobs).

A job has ended when its result file is in its folder (it returned, or raised and submitit
recorded why) or when Slurm no longer runs it (``squeue``: time limit, cancelled, node failure;
or gone from the queue, after ``GRACE_S``). Job states come from ``squeue`` and the job
folders, never ``sacct``, which small clusters often run without (``accounting`` says whether
it answers; with accounting off, submitit's own watcher would warn on every poll). Why a job
ended is told as Slurm reports it: its ``squeue`` state and reason, or the line Slurm wrote in
its log (time limit, cancelled, node failure, preemption); and what exists of it: its log when
it started (Slurm opens the log as the job starts), else its submission file, saying it left
the queue before it started. A live job that Slurm requeues or holds for its node (``squeue``'s
state and reason) gets a line of its own.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

#: Slurm states of a job that still runs or will (``squeue``'s ``%T``).
LIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
        "SUSPENDED", "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED")
#: Live states of a job that Slurm put back in the queue (a node failure, a requeue).
REQUEUED = ("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
#: What a user reads for the states of a job that ended without its result, and a hint.
WHY = {"TIMEOUT": "hit its time limit", "CANCELLED": "was cancelled",
       "OUT_OF_MEMORY": "ran out of memory", "NODE_FAIL": "lost its node",
       "PREEMPTED": "was preempted", "FAILED": "failed", "BOOT_FAIL": "failed to boot",
       "DEADLINE": "passed its deadline", "REQUEUED": "was requeued by Slurm"}
HINT = {"TIMEOUT": "--timeout-min sets it", "CANCELLED": "scancel",
        "NODE_FAIL": "a node failure", "OUT_OF_MEMORY": "--slurm-param mem=... asks for more"}
#: The line Slurm writes into a job's log when it ends it (``*** JOB 12 ON node CANCELLED AT
#: <time> DUE TO <why> ***``): <why> -> the job's state.
DUE_TO = {"TIME LIMIT": "TIMEOUT", "NODE FAILURE": "NODE_FAIL", "PREEMPTION": "PREEMPTED",
          "JOB REQUEUE": "REQUEUED"}
#: ``squeue`` reasons (``%r``) of a job pending again after it started: Slurm put it back (a
#: node failure, a requeue; a requeued job waits for its new begin time).
REQUEUE_REASONS = ("NodeDown", "NodeFail", "launch failed requeued held", "BeginTime",
                   "ReqNodeNotAvail", "JobHeldAdmin")
#: Seconds a job gone from the queue may take to show its result file (a shared file
#: system's lag) before it counts as dead.
GRACE_S = 10.0


def ended(job, state: str, reason: str, missing: int, size: int) -> str:
    """The line naming ``job``, which ended (``state``: a Slurm state, "left the queue",
    "raised ...", "stopped ...") with ``missing`` of its ``size`` runs not stored: why, as
    Slurm reports it (its state, and ``squeue``'s ``reason`` unless "None"), and what exists
    of it: its log when it started (Slurm opens it as the job starts), else its submission
    file."""
    started = Path(job.paths.stderr).exists() or Path(job.paths.stdout).exists()
    if state in WHY:
        said = [f"Slurm state {state}", *([f"reason {reason}"] if reason not in ("", "None")
                                           else [])]
        why = f"{WHY[state]} ({', '.join(said)}{'; ' + HINT[state] if state in HINT else ''})"
    elif state.startswith(("raised", "stopped")):
        why = state
    else:
        why = "left the queue (squeue no longer lists it)" if state == "left the queue" else (
            f"ended ({state})")
    if started:
        return (f"job {job.job_id} {why} with {missing} of its {size} runs not stored (the same "
                f"command runs them again); its log: {job.paths.stderr}")
    return (f"job {job.job_id} {why} before it started, with {missing} of its {size} runs not "
            "stored (the same command runs them again); it wrote no log; its submission "
            f"file: {job.paths.submission_file}")


def requeued(job, state: str, reason: str) -> str | None:
    """The line naming a live ``job`` that Slurm requeued or holds for its node (``squeue``'s
    ``state`` and ``reason``), else None."""
    if state in REQUEUED or (state == "PENDING" and reason in REQUEUE_REASONS
                             and Path(job.paths.stderr).exists()):
        return (f"job {job.job_id} was put back in the queue by Slurm (state {state}, reason "
                f"{reason or 'None'}): it runs its runs not stored again when Slurm starts it")
    if state in LIVE and any(r in reason for r in ("NodeDown", "NodeFail")):
        return (f"job {job.job_id} waits for its node (Slurm state {state}, reason {reason}): "
                "the node is down; it starts when Slurm has the node back")
    return None


def end_state(job, states: dict, gone: dict, slurm: bool) -> str | None:
    """Why ``job`` has ended (``COMPLETED``, a Slurm state, "raised ...", "stopped ...",
    "left the queue"), or None while it runs. A debug job runs here, now."""
    if job.paths.result_pickle.exists() or not slurm and job.done():
        return _outcome(job)
    state = states.get(job.job_id, ("", ""))[0]
    if not slurm or state in LIVE:
        return None
    seen = gone.setdefault(job.job_id, time.monotonic())
    if state in WHY or time.monotonic() - seen > GRACE_S:
        logged = _state_in_log(job) if state in ("", "FAILED") else None  # Slurm's own words
        return logged or state or "left the queue"
    return None


def _outcome(job) -> str:
    """``COMPLETED`` when ``job`` returned having started every run, "stopped ..." when it
    left runs unstarted (its time limit near), "raised ..." with the last line of its error."""
    try:
        statuses = job.result()
    except Exception as err:  # the job raised: submitit's error holds its traceback
        lines = [line for line in str(err).splitlines() if line.strip()]
        return "raised " + (lines[-1].strip() if lines else type(err).__name__)
    if "stopped" in (statuses or []):
        return "stopped early (its time limit was near)"
    return "COMPLETED"


def squeue(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """Job id -> (Slurm state, ``squeue``'s reason) for ``job_ids`` still known to ``squeue``
    (array tasks one by one, finished ones too while Slurm keeps them)."""
    arrays = sorted({str(j).split("_")[0] for j in job_ids})
    done = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j",
                           ",".join(arrays)], capture_output=True, text=True)
    out = {}
    for line in done.stdout.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        out[job_id] = (state.split()[0] if state.strip() else "", reason.strip())
    return out


def _state_in_log(job) -> str | None:
    """The state Slurm wrote into a job's log when it ended it (``*** JOB ... CANCELLED AT
    ... DUE TO TIME LIMIT ***``: ``DUE_TO``; ``CANCELLED AT`` alone: cancelled), if any."""
    try:
        text = Path(job.paths.stderr).read_text(errors="replace")
    except OSError:
        return None
    for words, state in DUE_TO.items():
        if f"DUE TO {words}" in text:
            return state
    if "CANCELLED AT" in text:
        return "CANCELLED"
    return None


def accounting() -> bool:
    """Whether ``sacct`` answers (Slurm accounting on)."""
    try:
        return subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


__all__ = ["DUE_TO", "GRACE_S", "HINT", "LIVE", "REQUEUED", "REQUEUE_REASONS", "WHY",
           "accounting", "end_state", "ended", "requeued", "squeue"]
