"""How a Slurm job ended, without a cluster (``vitplast.experiments.job_states``): a job's
state read as Slurm reports it (``squeue``, else the line Slurm wrote in its log), and the line
naming a job that ended without its runs or that Slurm put back in the queue. The real Slurm:
``test_slurm.py``."""

import math

import pytest

from vitplast.experiments import job_states


class _Job:
    """What ``job_states`` (and ``jobs.watch``) read of a submitit job: its id and the paths
    of its folder."""

    def __init__(self, folder, job_id="30_2"):
        from submitit.core.utils import JobPaths

        self.job_id, self.paths = job_id, JobPaths(folder, job_id)


def test_a_job_that_never_started_is_named_with_its_submission_file(tmp_path):
    """Slurm opens a job's log as it starts: a job without one left the queue before it
    started, and its line names the submission file (which exists), never the log."""
    pytest.importorskip("submitit")
    job = _Job(tmp_path)
    job.paths.submission_file.write_text("#!/bin/bash\n")
    for state, reason, why in (
            ("left the queue", "", "left the queue (squeue no longer lists it)"),
            ("CANCELLED", "None", "was cancelled (Slurm state CANCELLED; scancel)"),
            ("NODE_FAIL", "NodeDown", "lost its node (Slurm state NODE_FAIL, reason NodeDown; "
                                      "a node failure)")):
        assert job_states.ended(job, state, reason, 2, 3) == (
            f"job 30_2 {why} before it started, with 2 of its 3 runs not stored (the same "
            f"command runs them again); it wrote no log; its submission file: "
            f"{tmp_path / '30_submission.sh'}")
    assert not job.paths.stderr.exists() and job.paths.submission_file.exists()


def test_a_job_that_started_is_named_with_its_log_and_why_slurm_ended_it(tmp_path):
    """A job with a log: the line names the log; why it ended is read as Slurm reports it:
    its squeue state, else the line Slurm wrote into its log (a node failure, a time limit)."""
    pytest.importorskip("submitit")
    job = _Job(tmp_path, "31_0")
    job.paths.stderr.write_text("slurmstepd: error: *** JOB 31 ON localhost CANCELLED AT "
                                "2026-12-04T22:00:00 DUE TO NODE FAILURE ***\n")
    assert job_states._state_in_log(job) == "NODE_FAIL"
    assert job_states.end_state(job, {}, {"31_0": -math.inf}, slurm=True) == "NODE_FAIL"
    assert job_states.ended(job, "NODE_FAIL", "", 1, 1) == (
        "job 31_0 lost its node (Slurm state NODE_FAIL; a node failure) with 1 of its 1 runs "
        f"not stored (the same command runs them again); its log: {job.paths.stderr}")
    job.paths.stderr.write_text("*** JOB 31 ON localhost CANCELLED AT 2026 DUE TO TIME LIMIT"
                                " ***\n")
    assert job_states.end_state(job, {"31_0": ("FAILED", "NonZeroExitCode")}, {"31_0": 0.0},
                                slurm=True) == "TIMEOUT"
    assert job_states.end_state(job, {"31_0": ("RUNNING", "None")}, {}, slurm=True) is None


def test_a_requeued_job_is_named_as_slurm_reports_it(tmp_path):
    pytest.importorskip("submitit")
    job = _Job(tmp_path, "32_1")
    assert job_states.requeued(job, "PENDING", "JobArrayTaskLimit") is None  # waits its turn
    assert job_states.requeued(job, "REQUEUED", "None") == (
        "job 32_1 was put back in the queue by Slurm (state REQUEUED, reason None): it runs "
        "its runs not stored again when Slurm starts it")
    assert job_states.requeued(job, "PENDING", "NodeDown") == (
        "job 32_1 waits for its node (Slurm state PENDING, reason NodeDown): the node is "
        "down; it starts when Slurm has the node back")
    job.paths.stderr.write_text("")  # it had started: pending again is a requeue
    assert job_states.requeued(job, "PENDING", "BeginTime").startswith(
        "job 32_1 was put back in the queue by Slurm (state PENDING, reason BeginTime)")


def test_squeue_is_read_one_array_task_a_line(monkeypatch):
    """``squeue -r -o %i|%T|%r``: one line per array task; each array asked once."""
    import subprocess

    asked = []

    def run(command, **kwargs):
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, stdout=(
            "40_0|RUNNING|None\n40_1|PENDING|NodeDown\n 41_0|CANCELLED by 1000|None \n"))

    monkeypatch.setattr(job_states.subprocess, "run", run)
    assert job_states.squeue(["40_0", "40_1", "41_0"]) == {
        "40_0": ("RUNNING", "None"), "40_1": ("PENDING", "NodeDown"),
        "41_0": ("CANCELLED", "None")}
    assert asked[0][-1] == "40,41"


class _Returned:
    """A job whose result file holds what it returned, or the error it raised."""

    def __init__(self, result):
        self._result = result

    def result(self):
        if isinstance(self._result, Exception):
            raise self._result
        return self._result


def test_a_job_s_outcome_is_read_from_its_result():
    assert job_states._outcome(_Returned(["ok", "failed"])) == "COMPLETED"
    assert job_states._outcome(_Returned(["ok", "stopped"])) == (
        "stopped early (its time limit was near)")
    raised = RuntimeError("Traceback ...\n  File x\nValueError: no such task\n\n")
    assert job_states._outcome(_Returned(raised)) == "raised ValueError: no such task"
