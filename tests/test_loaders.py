"""The data loaders of a run, and how their settings reach it: persistent workers, pinned
memory on CUDA (one DataLoader per split, the batches of a loader per epoch:
``test_passes.py``), and ``--workers`` / ``--accum-steps`` / ``--eval-every`` from the command line
(runtime keys outside run hashes; the evaluation period inside, as it changes the run)."""

import signal

import pytest
import torch
from helpers import tiny_vit, toy_task, with_spec

from vitplast.__main__ import main
from vitplast.experiments import runner, runs, runtime, sweep
from vitplast.train import finetune, passes


def test_loaders_keep_their_workers_and_pin_memory_on_cuda():
    data = toy_task(16)
    cpu = passes.loader(data, 4, device=torch.device("cpu"), workers=2)
    cuda = passes.loader(data, 4, device=torch.device("cuda"), workers=0)
    assert cpu.persistent_workers and cpu.num_workers == 2 and not cpu.pin_memory
    assert cuda.pin_memory and not cuda.persistent_workers
    result = finetune.train(tiny_vit(), data, toy_task(8, seed=1), steps=3, batch_size=8,
                            eval_every=1, workers=2, progress=False)
    assert len(result.history) == 3


def test_a_slurm_job_reads_with_its_cpus_but_one(monkeypatch):
    """One function works the workers out (``runtime.workers``) from the cores that one
    function reads (``runtime.slurm_cpus``): a run that names none and a job's torch threads
    (``sweep.run_pack``) read them."""
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert runtime.slurm_cpus() is None
    assert runtime.workers() is None and runtime.workers(3, 8) == 3
    assert runtime.workers(cpus=1) == 0 and runtime.workers(cpus=4) == 3
    run = runs.make_run("digits", "head", lr=0.1, pretrained=False, steps=1)
    assert runner.build(run)[2]["workers"] == 0
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    assert runtime.slurm_cpus() == 8
    assert runner.build(run)[2]["workers"] == 7
    assert runner.build({**run, "workers": 2})[2]["workers"] == 2
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM)}
    try:  # a job of no runs: its torch threads set, its signal handlers installed
        assert sweep.run_pack([], None, "cpu") == [] and torch.get_num_threads() == 8
    finally:
        torch.set_num_threads(threads)
        for number, handler in handlers.items():
            signal.signal(number, handler)


@pytest.fixture
def chosen(monkeypatch, tmp_path):
    """The runs ``vitplast sweep`` hands to ``run_sweep`` (nothing runs)."""
    got, nothing = [], sweep.Outcome(__import__("pandas").DataFrame({"status": []}))
    monkeypatch.setattr(sweep, "run_sweep", lambda todo, *a, **k: got.extend(todo) or nothing)
    monkeypatch.setattr("vitplast.experiments.study_log.log_session", lambda *a, **k: None)
    monkeypatch.setattr("vitplast.experiments.results.records_table",
                        lambda root: __import__("pandas").DataFrame({"status": []}))
    with_spec(monkeypatch, "main", tasks=("digits",))
    return lambda *options: (got.clear(), main(["sweep", "--root", str(tmp_path), *options]),
                             list(got))[-1]


def test_workers_and_accum_steps_reach_every_run_outside_its_hash(chosen):
    plain = chosen()
    set_ = chosen("--workers", "3", "--accum-steps", "2")
    assert [runs.run_hash(r) for r in set_] == [runs.run_hash(r) for r in plain]
    assert all(r["workers"] == 3 and r["accum_steps"] == 2 for r in set_)
    assert "workers" not in plain[0]
    slurm = chosen("--executor", "submitit", "--cluster", "debug", "--cpus-per-task", "8")
    assert all(r["workers"] == 7 for r in slurm)


def test_eval_every_makes_other_runs_and_leaves_the_study_s_hashes(chosen):
    plain = chosen()
    other = chosen("--eval-every", "5")
    assert all(r["eval_every"] == 5 for r in other)
    assert not {runs.run_hash(r) for r in other} & {runs.run_hash(r) for r in plain}
    assert [runs.run_hash(r) for r in chosen()] == [runs.run_hash(r) for r in plain]


def test_slurm_without_srun_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun there
    code = main(["sweep", "--root", str(tmp_path / "s"), "--executor", "submitit",
                 "--cluster", "slurm"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "srun" in err
    assert not (tmp_path / "s").exists()
