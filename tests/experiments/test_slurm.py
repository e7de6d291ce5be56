"""The cluster path on a real Slurm (the ``slurm`` fixture: a one-node cluster on this
machine, ``vitplast.experiments.local_slurm``): ``vitplast sweep --executor submitit --cluster
slurm`` stores what a serial sweep stores, for a grid and a searched study; survives a job
cancelled while it trains and a submitting process killed mid-array; names a job that hits
its time limit and re-runs its run; and ``--status`` counts the runs jobs are training.
Every run trains for real, at the smoke studies' settings (under a second a run)."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vitplast.__main__ import main
from vitplast.experiments import kinds, runs, studies
from vitplast.experiments.adaptive import SearchedStudy
from vitplast.experiments.spec_types import Grid, Search
from vitplast.experiments.store import Store
from vitplast.experiments.study_specs import SMOKE_RUN

pytestmark = pytest.mark.slow
SLURM = ["--executor", "submitit", "--cluster", "slurm", "--cpus-per-task", "1"]
#: What a run computes the same way wherever it trains: its outcome and every number of its
#: history, bit for bit, when both sides compute on one thread (the jobs' one CPU, the serial
#: sweep's ``one_thread``; another thread count sums in another order, and the losses move in
#: their last digits). Not the same, by nature: ``seconds``, ``train_seconds``, ``date`` and
#: ``slurm_job`` (a record made in a job names it).
SAME = ("status", "test_acc", "test_loss", "best_val_acc", "best_step", "initial_val_acc",
        "trainable", "history")


@pytest.fixture
def one_thread():
    """The serial arm computes on one thread, as a job with one CPU does (``run_pack``): the
    same reduction order, so the same floating-point numbers."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _records(root) -> dict[str, dict]:
    return {runs.run_hash(r["run"]): r for r in Store(root).records()}


def _same(serial: dict, slurm: dict) -> None:
    assert sorted(serial) == sorted(slurm)  # the same run hashes
    for key, record in serial.items():
        assert {k: record.get(k) for k in SAME} == {k: slurm[key].get(k) for k in SAME}, key


def _sweep(study: str, root, *flags) -> int:
    return main(["sweep", "--study", study, "--root", str(root), *flags])


def test_a_grid_study_on_slurm_stores_what_a_serial_sweep_stores(slurm, tmp_path, one_thread,
                                                                  capfd):
    """main-smoke's 14 runs: the same hashes, statuses and numbers as here, one after another;
    the jobs' records name their job; one line says where job states come from."""
    assert _sweep("main-smoke", tmp_path / "serial") == 0
    assert _sweep("main-smoke", tmp_path / "slurm", *SLURM, "--timeout-min", "10") == 0
    serial, on_slurm = _records(tmp_path / "serial"), _records(tmp_path / "slurm")
    assert len(serial) == 14
    _same(serial, on_slurm)
    assert all(r["slurm_job"] for r in on_slurm.values())
    print("grid:", len(on_slurm), "records, jobs", sorted({r["slurm_job"] for r in
                                                           on_slurm.values()}))
    assert not any("slurm_job" in r for r in serial.values())
    err = capfd.readouterr().err
    assert err.count("job states: read from squeue and the job folders") == 1
    assert "sacct" not in err.replace("so sacct is not used", "")  # no warning flood


def test_a_searched_study_on_slurm_stores_what_a_serial_search_stores(slurm, tmp_path,
                                                                       monkeypatch, one_thread):
    """A search (three LRs, then one more while the best is at an edge) asks for the same
    runs and gets the same outcomes on Slurm, one job array per rung."""
    study = SearchedStudy("t-search", "a tiny search", "t-search", Search(
        tasks=("fmnist_contrast",), seeds=(0,), configs={"head": 1.0, "LN1": 0.3},
        fixed=SMOKE_RUN), place=".")
    monkeypatch.setitem(studies.STUDIES, study.name, study)
    assert _sweep(study.name, tmp_path / "serial") == 0
    assert _sweep(study.name, tmp_path / "slurm", *SLURM) == 0
    serial, on_slurm = _records(tmp_path / "serial"), _records(tmp_path / "slurm")
    assert len(serial) >= 6
    _same(serial, on_slurm)
    print("search:", len(on_slurm), "records, jobs", sorted({r["slurm_job"] for r in
                                                             on_slurm.values()}))


def _squeue(array: str) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-j", array],
                         capture_output=True, text=True).stdout
    return dict(line.split("|") for line in out.split())


def _wait(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


class Writes:
    """Every record file's inode as first seen: a record written again (``os.replace`` makes
    a new file) is a run stored twice."""

    def __init__(self, root: Path):
        self.root, self.first, self.rewritten = root, {}, set()

    def look(self):
        for path in self.root.glob("*.json"):
            try:
                inode = path.stat().st_ino
            except FileNotFoundError:
                continue
            if self.first.setdefault(path.name, inode) != inode:
                self.rewritten.add(path.name)
        return self


def test_a_cancelled_job_and_a_killed_submitter_lose_nothing(slurm, tmp_path):
    """A job cancelled (scancel) while it trains, then the submitting process killed
    (SIGKILL) mid-array, the rest of the array left running; then the same command: every
    run stored exactly once, no claim left. `--status` meanwhile accounts for every run."""
    root = tmp_path / "store"
    command = [sys.executable, "-m", "vitplast", "sweep", "--study", "main-smoke", "--root",
               str(root), *SLURM, "--runs-per-job", "3"]
    writes = Writes(root)
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    claim = _wait(lambda: writes.look() and next(root.glob("*.claim"), None), 120,
                  "a job training a run")
    task = _job_of(json.loads(claim.read_text())["pid"])  # the job training that run
    subprocess.run(["scancel", task], check=True)
    print("cancel: job", task, "cancelled while it trained", claim.stem, "; records then:",
          len(Writes(root).look().first))
    status = subprocess.run([sys.executable, "-m", "vitplast", "sweep", "--study",
                             "main-smoke", "--root", str(root), "--status"],
                            capture_output=True, text=True, check=True).stdout
    counts = _all_row(status)
    assert counts["expected"] == 14
    assert counts["ok"] + counts["diverged"] + counts["failed"] + counts["running"] + counts[
        "pending"] == 14
    first.send_signal(signal.SIGKILL)
    first.wait()
    array = task.split("_")[0]
    _wait(lambda: _squeue(array).get(task) == "CANCELLED", 30, f"job {task} cancelled")
    assert not any(p.name.startswith(f"{task}_0_result") for p in (root / "submitit").iterdir())
    # the same command, the old array's other jobs still running beside it
    second = subprocess.run(command, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    _wait(lambda: writes.look() and not any(s in ("PENDING", "RUNNING", "COMPLETING")
                                             for s in _squeue(array).values()), 120,
          "the first array's jobs to end")
    writes.look()
    expected = studies.get("main-smoke").runs(root)
    assert all(Store(root).has(run) for run in expected)
    assert len(writes.first) == 14 + 1  # the records and the study log
    assert not writes.rewritten - {"study.json"}  # each record written once
    assert not list(root.glob("*.claim"))
    print("cancel: --status then", counts, "; the same command:", second.stderr.replace(
        "\r", "\n").splitlines()[-1:], "; records", len(writes.first) - 1, "each written once,",
        "claims left: 0")


def test_a_killed_job_and_jobs_cancelled_before_they_start_exit_3_then_the_same_command_0(
        slurm, tmp_path):
    """One job a run (one at a time: --array-parallelism 1): the training job's process killed
    (SIGKILL), then the jobs not started cancelled (scancel). The sweep names the killed job
    with its log, and each cancelled one as having left the queue before it started (Slurm
    drops a pending array task it cancels: squeue shows no state) with its submission file,
    never a log it did not write; it exits 3, its last line counting the runs not stored and giving
    the command that resumes; that command stores the rest and exits 0."""
    root = tmp_path / "store"
    command = [sys.executable, "-m", "vitplast", "sweep", "--study", "main-smoke", "--root",
               str(root), *SLURM, "--runs-per-job", "1", "--array-parallelism", "1"]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    claim = _wait(lambda: next(root.glob("*.claim"), None), 120, "a job training a run")
    pid = json.loads(claim.read_text())["pid"]
    killed = _job_of(pid)
    os.kill(pid, signal.SIGKILL)
    array = killed.split("_")[0]
    subprocess.run(["scancel", f"{array}_[9-13]"], check=True)
    out, err = first.communicate(timeout=300)
    lines = err.replace("\r", "\n").splitlines()
    assert first.returncode == 3, err
    stored = len(Store(root).records())
    assert 0 < stored <= 14 - 6  # the killed job's run and the five cancelled ones are not
    assert lines[-1] == (
        f"vitplast sweep: incomplete: {14 - stored} of 14 runs not stored, 0 stored failed "
        f"({stored - _diverged(root)} ok, {_diverged(root)} diverged); to resume: python -m "
        f"vitplast {' '.join(command[3:])}")
    named = [line for line in lines if line.startswith(f"job {killed} ")]
    log = root / "submitit" / f"{killed}_0_log.err"
    assert len(named) == 1 and named[0].endswith(f"its log: {log}") and log.exists(), err
    assert "(Slurm state " in named[0] and "with 1 of its 1 runs not stored" in named[0]
    submission = root / "submitit" / f"{array}_submission.sh"
    for task in range(9, 14):
        line, = [line for line in lines if line.startswith(f"job {array}_{task} ")]
        assert line == (  # Slurm keeps no record of an array task cancelled while pending
            f"job {array}_{task} left the queue (squeue no longer lists it) before it started, "
            "with 1 of its 1 runs not stored (the same command runs them again); it wrote no "
            f"log; its submission file: {submission}")
        assert not (root / "submitit" / f"{array}_{task}_0_log.err").exists()
    assert submission.exists()
    print("killed and cancelled: exit", first.returncode, "; the sweep said:", named[0], "|",
          line, "|", lines[-1])
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == (
        f"complete: 14 of 14 runs stored ({14 - _diverged(root)} ok, {_diverged(root)} "
        "diverged)")
    assert len(Store(root).records()) == 14 and not list(root.glob("*.claim"))
    print("the same command: exit", again.returncode, ";", again.stdout.splitlines()[-1])


def _diverged(root) -> int:
    return sum(r["status"] == "diverged" for r in Store(root).records())


def _job_of(pid: int) -> str:
    """The array task (``<array>_<task>``) whose process is ``pid``: Slurm's variables in its
    environment (one node: the job runs on this machine)."""
    env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text(
        errors="replace").split("\0") if "=" in item)
    return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"


def _all_row(status: str) -> dict[str, int]:
    header, *rows = [line.split() for line in status.strip().splitlines()]
    row = next(r for r in rows if r[0] == "all")
    return dict(zip(header[2:], [int(float(v)) for v in row[1:]]))  # its seed is blank


def test_a_job_at_its_time_limit_is_named_and_its_runs_run_again(slurm, tmp_path, monkeypatch,
                                                                  capfd):
    """One job packing 160 smoke runs (minutes of work) under a one-minute limit (Slurm's
    shortest; it warns the job 15 s before, and enforces limits every 30 s): `--status`
    counts its run in flight while it trains; the sweep names the job by its id, why it
    ended and its log, and exits 3 saying how many runs are not stored; no claim is left; the
    next sweep trains only the runs not stored, and exits 0."""
    many = kinds.GridStudy("t-many", "160 smoke runs", "t-many", Grid(
        tasks=("fmnist_contrast",), lrs={c: (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
                                          for c in ("head", "LN1", "LN2", "FC2")},
        seeds=(0, 1, 2, 3, 4), fixed=SMOKE_RUN), place=".")
    monkeypatch.setitem(studies.STUDIES, many.name, many)
    root = tmp_path / "store"
    status = {}

    def look():  # `--status` while the job trains
        _wait(lambda: next(root.glob("*.claim"), None), 120, "the job training a run")
        with contextlib.redirect_stdout(io.StringIO()) as out:
            main(["sweep", "--study", many.name, "--root", str(root), "--status"])
        status.update(_all_row(out.getvalue()))

    reader = threading.Thread(target=look)
    reader.start()
    assert _sweep(many.name, root, *SLURM, "--timeout-min", "1", "--runs-per-job", "160") == 3
    reader.join()
    assert status["expected"] == 160 and status["running"] == 1 and status["pending"] >= 1
    assert sum(status[k] for k in ("ok", "diverged", "failed", "running", "pending")) == 160
    err = capfd.readouterr().err
    job = next(p.name.rsplit("_", 2)[0] for p in (root / "submitit").glob("*_0_log.err"))
    stored = len(Store(root).records())
    named = [line for line in err.replace("\r", "\n").splitlines() if f"job {job} " in line]
    assert len(named) == 1 and "time limit" in named[0], err  # killed at it, or warned of it
    assert f"with {160 - stored} of its 160 runs not stored" in named[0]
    assert named[0].endswith(f"its log: {root / 'submitit' / f'{job}_0_log.err'}")
    assert 0 < stored < 160 and not list(root.glob("*.claim"))
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith(f"vitplast sweep: incomplete: {160 - stored} of 160 runs not stored, "
                           "0 stored failed") and last.endswith("--runs-per-job 160"), last
    print("time limit: --status while it trained", status, "; the sweep said:", named[0])
    before = {p.name: p.stat().st_ino for p in root.glob("*.json")}
    assert _sweep(many.name, root, *SLURM, "--timeout-min", "10") == 0
    assert len(Store(root).records()) == 160
    assert all(root.joinpath(name).stat().st_ino == inode for name, inode in before.items()
               if name != "study.json")  # the stored runs were not trained again


def test_the_throughput_benchmark_runs_in_its_quick_mode(slurm, tmp_path):
    """``benchmarks/slurm_throughput.py --quick`` on the tests' Slurm: its RESULT line in the
    declared form, its exit code as the printed comparison says (``test_benchmarks``)."""
    from test_benchmarks import BENCHMARKS, QUICK, ROOT, check_output

    out = subprocess.run([sys.executable, str(BENCHMARKS / "slurm_throughput.py"), "--quick"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(out.stdout)
    check_output(out.stdout, out.returncode, QUICK["slurm_throughput.py"])
