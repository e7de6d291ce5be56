"""Cluster jobs without a cluster: how runs are packed into jobs, and what a job does when
Slurm signals it (``sweep.run_pack``: USR2 = its time limit is near, SIGTERM = reached or
scancel). How a job ended: ``test_job_states.py``; the real Slurm: ``test_slurm.py``."""

import os
import signal

import pytest
from helpers import TINY

from vitplast.experiments import jobs, runner, runs, sweep
from vitplast.experiments.store import Store


def _groups(*sizes):
    return [[(f"g{i}r{j}", None) for j in range(n)] for i, n in enumerate(sizes)]


def test_groups_are_dealt_round_robin_over_the_jobs_and_never_split():
    groups = _groups(1, 1, 1, 1, 1)
    assert jobs.packs(groups, n_jobs=2) == [groups[0::2], groups[1::2]]
    assert jobs.packs(groups, n_jobs=9) == [[g] for g in groups]  # no empty job
    assert len(jobs.packs(groups, runs_per_job=2)) == 3
    big = _groups(3, 3, 3)
    assert jobs.packs(big, runs_per_job=2) == [[g] for g in big]  # a group stays whole
    assert jobs.packs(big, runs_per_job=6) == [big[0::2], big[1::2]]


def test_slots_are_the_array_parallelism_when_given():
    assert jobs.slots("slurm", dict(slurm_array_parallelism=3)) == 3
    assert jobs.slots("debug", {}) == 1
    assert jobs.slots("local", dict(cpus_per_task=os.cpu_count())) == 1


def test_a_time_limit_reads_as_slurm_writes_it():
    assert [jobs._minutes(t) for t in ("infinite", "UNLIMITED", "30", "45:00", "2:30:00",
                                        "1-00:00:00", "2-12:00:00")] == [
        0, 0, 30, 45, 150, 1440, 3600]
    assert jobs.default_minutes("local", {}) == 7 * 24 * 60


def _two(tmp_path):
    todo = runs.grid(["digits"], ["head"], [0.1, 1.0], [0], **TINY)
    return todo, Store(tmp_path)


def test_a_job_warned_of_its_time_limit_starts_no_further_run(tmp_path, monkeypatch):
    todo, store = _two(tmp_path)

    def train(group, device=None, progress=False, preparations=None):
        os.kill(os.getpid(), signal.SIGUSR2)  # submitit's warning, during the first run
        return [dict(status="ok") for _ in group]

    monkeypatch.setattr(runner, "run_lrs", train)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR2)
    try:
        statuses = sweep.run_pack([[(todo[0], None)], [(todo[1], None)]], store, "cpu")
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGUSR2, before[1])
    assert statuses == ["ok", "stopped"]
    assert store.path(todo[0]).exists() and not store.path(todo[1]).exists()


def test_sigterm_drops_the_run_in_flight_and_releases_its_claim(tmp_path, monkeypatch):
    """Not recorded as failed (a ``BaseException``), its claim gone, nothing stored."""
    todo, store = _two(tmp_path)

    def train(group, device=None, progress=False, preparations=None):
        assert list(tmp_path.glob("*.claim"))  # held while it trains
        os.kill(os.getpid(), signal.SIGTERM)  # the time limit reached, or scancel
        return [dict(status="ok") for _ in group]

    monkeypatch.setattr(runner, "run_lrs", train)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR2)
    try:
        with pytest.raises(sweep.JobStopped, match="SIGTERM"):
            sweep.run_pack([[(todo[0], None)], [(todo[1], None)]], store, "cpu")
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGUSR2, before[1])
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.claim"))


def _statuses(pack):
    return [f"ran {run}" for group in pack for run, _ in group]


def test_prestarted_jobs_run_the_pack_handed_to_them_and_the_others_end(tmp_path):
    """``jobs.Early``: the i-th waiting job runs ``job(chosen[i])``; a job handed nothing, or
    released, returns at once with no run."""
    early = jobs.Early(jobs=["first", "second", "third"], inbox=tmp_path)
    chosen = jobs.packs(_groups(1, 1, 1), n_jobs=2)
    assert early.hand(_statuses, chosen) == ["first", "second"] and early.used
    assert jobs._waiting(0, str(tmp_path)) == ["ran g0r0", "ran g2r0"]
    assert jobs._waiting(1, str(tmp_path)) == ["ran g1r0"]
    assert jobs._waiting(2, str(tmp_path)) == []
    idle = jobs.Early(jobs=["a"], inbox=tmp_path / "idle")
    idle.inbox.mkdir()
    idle.release()
    assert jobs._waiting(0, str(idle.inbox)) == []
