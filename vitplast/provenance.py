"""Provenance: what made a result (machine, versions, git commit, date), written into every run
record, the embedded model's manifest and each sweep session of a study's log
(``experiments.study_log``). Shipped logs name no machine's folders (``shipped_command``).
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

import vitplast


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes?) of the vitplast checkout, or (None, None). Cached: a
    sweep asks once per process (call it before forking workers)."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():  # an installed copy: no enclosing repo's commit
        return None, None

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout
    try:
        # results written into data/ while a sweep runs do not make the code dirty
        return git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain", "-uno", "--",
                                                          ".", ":(exclude)data"))
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        return None, None


def provenance(device: torch.device) -> dict:
    """Where and with what a result was made: ``machine`` (e.g. "x86_64, 2 cores", plus the
    GPU), ``vitplast``, ``torch``, ``timm``, ``python``, ``git_commit``, ``git_dirty``,
    ``date`` (UTC), and in a Slurm job ``slurm_job`` (``slurm_job``)."""
    from importlib.metadata import version  # timm's, without importing it (about a second)

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = f"{platform.machine()}, {cores} cores"
    if device.type == "cuda":
        machine += f", {torch.cuda.get_device_name(device)}"
    commit, dirty = git_state()
    job = slurm_job()
    return dict(machine=machine, vitplast=vitplast.__version__, torch=torch.__version__,
                timm=version("timm"), python=platform.python_version(), git_commit=commit,
                git_dirty=dirty, date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **({"slurm_job": job} if job else {}))


def slurm_job() -> str | None:
    """The Slurm job this process runs in (``<array>_<task>`` for an array's task), or None
    outside Slurm: a record names the job that made it, whose log is
    ``<submitit folder>/<job>_0_log.err``."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def shipped_command(command: str) -> str:
    """``command`` with each absolute path shortened to its last two parts
    (``/home/me/kit/data/suite`` -> ``data/suite``): a shipped log names no machine's folders."""
    return " ".join(str(Path(*Path(w).parts[-2:])) if w.startswith("/") and len(Path(w).parts) > 3
                    else w for w in command.split(" "))
