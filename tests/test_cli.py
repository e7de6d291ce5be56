"""The command line: --version, a description in every --help, SLURM settings reaching
submitit, and results stores that are absent said so."""

import argparse

import pandas as pd
import pytest
import torch
from helpers import with_spec

import vitplast
from vitplast import files, models
from vitplast.__main__ import _parser, main
from vitplast.experiments import results, studies
from vitplast.experiments.runs import run_hash
from vitplast.experiments.store import Store
from vitplast.train import finetune


def _commands(parser: argparse.ArgumentParser, above: tuple = ()) -> list[list[str]]:
    """Every command and subcommand of ``parser``, read from it (not a copy of it)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [[*above, name], *_commands(sub, (*above, name))]
    return out


SUBCOMMANDS = _commands(_parser())


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == (
        f"vitplast {vitplast.__version__}")


def test_version_and_help_import_no_torch():
    """Building the parser imports no study (torch, timm): ``--version`` and ``--help`` answer
    at once. A fresh interpreter, as the ``vitplast`` command starts one."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nimport vitplast\nfrom vitplast.__main__ import main\n"
            "for argv in (['--version'], ['--help'], ['sweep', '--help'], "
            "['notebooks', '--help'], ['data', '--help'], ['cache', 'info', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(vitplast.__file__, 'torch' in sys.modules)\n")
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True,
                         text=True, check=True).stdout.splitlines()[-1].split()
    assert out == [str(repo / "vitplast" / "__init__.py"), "False"]


def test_the_study_help_and_choices_are_the_study_registry(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines at spaces, hyphens
    assert all("".join(s.describe().split()) in text for s in studies.STUDIES.values())
    with pytest.raises(SystemExit):
        main(["sweep", "--study", "finetune"])
    assert f"choose from {', '.join(map(repr, studies.STUDIES))}" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], *SUBCOMMANDS], ids=lambda c: " ".join(c) or "vitplast")
def test_every_help_has_a_description(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    lines = capsys.readouterr().out.split("\n\n")
    assert lines[0].startswith("usage: vitplast") and len(lines[1].split()) >= 8, lines[:2]


def test_paper_grid_command_in_the_sweep_help_parses():
    """The docs' SLURM command for the paper grid is a valid command line."""
    from vitplast.__main__ import PAPER_SLURM_EXAMPLE

    args = _parser().parse_args(PAPER_SLURM_EXAMPLE.split()[1:])
    assert (args.study, args.executor, args.cluster, args.gpus_per_node) == (
        "paper", "submitit", "slurm", 1)


@pytest.fixture
def fake_runs(monkeypatch):
    """A two-run main study whose runs take no time (no model, a fake training loop)."""
    with_spec(monkeypatch, "main", tasks=("digits",), lrs={"head": [1.0]}, seeds=(0, 42))
    monkeypatch.setattr(models, "load_model", lambda *a, **k: torch.nn.Linear(1, 1))
    monkeypatch.setattr(models, "new_head", lambda model, n, seed: model)
    monkeypatch.setattr(finetune, "train", lambda *a, **k: finetune.TrainResult(
        history=[{"step": 0, "loss": 1.0}], best_val_acc=0.5, test_acc=0.5, trainable=1))


def test_slurm_settings_reach_submitit(tmp_path, fake_runs, monkeypatch):
    """submitit's ``debug`` cluster runs the jobs in this process; the SLURM settings given on
    the command line are what its executor receives (slurm_* keys are SLURM's alone, so the
    debug cluster accepts and ignores them, as a SLURM cluster would use them)."""
    submitit = pytest.importorskip("submitit")
    received = []
    update = submitit.AutoExecutor.update_parameters

    def spy(self, **kwargs):
        received.append(kwargs)
        return update(self, **kwargs)

    monkeypatch.setattr(submitit.AutoExecutor, "update_parameters", spy)
    root = tmp_path / "runs"
    main(["sweep", "--root", str(root), "--executor", "submitit", "--cluster", "debug",
          "--timeout-min", "240", "--gpus-per-node", "1", "--cpus-per-task", "8",
          "--partition", "gpu", "--array-parallelism", "32", "--slurm-param", "qos=high",
          "--slurm-param", "mem=64G", "--slurm-param", "hint=nomultithread"])
    assert received == [dict(timeout_min=240, gpus_per_node=1, cpus_per_task=8,
                             slurm_partition="gpu", slurm_array_parallelism=32,
                             slurm_qos="high", slurm_mem="64G",
                             slurm_additional_parameters={"hint": "nomultithread"})]
    assert all(Store(root).has(c) for c in studies.get("main").runs())


def test_submitit_settings_need_the_submitit_executor(tmp_path, fake_runs, capsys):
    for bad in (["--timeout-min", "5"], ["--executor", "submitit", "--slurm-param", "qos"]):
        with pytest.raises(SystemExit):
            main(["sweep", "--root", str(tmp_path), *bad])
    err = capsys.readouterr().err
    assert "add --executor submitit" in err and "KEY=VALUE" in err


@pytest.mark.parametrize("bad", [
    ["--executor", "slurm"], ["--order", "random"], ["--precision", "fp8"],
    ["--cluster", "slurm"], ["--executor", "submitit", "--cluster", "slurn"],
    ["--order", "random", "--status"], ["--limit", "0"],
    ["--shard", "1"]], ids=" ".join)
def test_bad_sweep_options_fail_before_anything_is_written(bad, tmp_path, fake_runs,
                                                             monkeypatch, capsys):
    """A typo in a closed option fails at parsing, naming the valid values (or the missing
    --executor submitit): nothing runs, no session is logged, the store is not made."""
    from vitplast.experiments import study_log

    logged = []
    monkeypatch.setattr(study_log, "log_session", lambda *a, **k: logged.append(a))
    root = tmp_path / "store"
    with pytest.raises(SystemExit) as done:
        main(["sweep", "--root", str(root), *bad])
    err = capsys.readouterr().err
    assert done.value.code == 2 and not logged and not root.exists()
    assert any(hint in err for hint in ("choose from", "add --executor submitit", "N >= 1",
                                        "I/N")), err


@pytest.mark.parametrize("bad", [["--device", "cuda:7"], ["--data-root", "somewhere"],
                                 ["--root", "FILE"]], ids=" ".join)
def test_an_option_refused_starts_no_cluster_job(bad, tmp_path, fake_runs, monkeypatch, capsys):
    """With --executor submitit, jobs are prestarted (``jobs.prestart``) only once every
    option has passed: a refused --device, flag or --root submits nothing."""
    from vitplast.experiments import jobs

    started = []
    monkeypatch.setattr(jobs, "prestart", lambda *a, **k: started.append(a))
    (tmp_path / "FILE").write_text("")
    bad = [str(tmp_path / "FILE") if b == "FILE" else b for b in bad]
    with pytest.raises(SystemExit) as done:
        main(["sweep", "--executor", "submitit", "--cluster", "debug", *bad])
    assert done.value.code == 2 and not started, capsys.readouterr().err


def test_absent_results_stores_are_named_not_read_as_empty(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(files.DATA_ENV, str(tmp_path / "nowhere"))
    for command in (["sweep", "--status"], ["sweep", "--study", "budget"], ["sweep"],
                    ["sweep", "--root", str(tmp_path / "none"), "--status"]):
        with pytest.raises(SystemExit) as err:
            main(command)
        assert err.value.code == 2
        assert "no results store at" in capsys.readouterr().err


def test_the_smoke_study_starts_on_a_fresh_cache(tmp_path, fake_train, monkeypatch, capsys):
    """The smoke study's default store is a cache folder, not a shipped store: on a fresh
    cache (not even its parent there) ``--status`` counts it empty and a sweep makes it."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "fresh" / "cache"))
    monkeypatch.setattr(models, "load_model", lambda *a, **k: torch.nn.Linear(1, 1))
    monkeypatch.setattr(models, "new_head", lambda model, n, seed: model)
    root = tmp_path / "fresh" / "cache" / "finetune-smoke"
    assert studies.get("main-smoke").root() == root and not studies.get("main-smoke").shipped
    main(["sweep", "--study", "main-smoke", "--status"])
    n = len(studies.get("main-smoke").runs())
    assert capsys.readouterr().out.splitlines()[-1].split()[:7] == ["all", str(n), "0", "0",
                                                                   "0", "0", str(n)]
    main(["sweep", "--study", "main-smoke", "--limit", "1"])
    assert len(fake_train.calls) == 1 and len(results.records_table(root)) == 1
    assert len(Store(root).companion("study.json")["sessions"]) == 1


def test_the_cluster_page_shows_the_paper_grid_command():
    from pathlib import Path

    from vitplast.__main__ import PAPER_SLURM_EXAMPLE

    readme = (Path(__file__).resolve().parents[1] / "docs" / "cluster.md").read_text()
    start = readme.index("vitplast sweep --study paper")
    command = readme[start:readme.index("```", start)].replace("\\\n", " ")
    assert " ".join(command.split()) == PAPER_SLURM_EXAMPLE


def test_cli_shards_split_the_study_without_overlap(tmp_path, fake_train, monkeypatch, capsys):
    """Two ``--shard`` processes over one store run disjoint halves, each every other setting
    (a run without its LR: here configuration and seed); a bad shard or study is refused
    naming the valid forms; each session is logged in study.json; ``--status`` runs nothing
    and prints the counts."""
    from vitplast.experiments.runs import setting

    with_spec(monkeypatch, "main", tasks=("digits",),
              lrs={"head": [1.0, 3.0], "LN1": [0.1, 0.3, 1.0]})
    monkeypatch.setattr(models, "load_model", lambda *a, **k: torch.nn.Linear(1, 1))
    monkeypatch.setattr(models, "new_head", lambda model, n, seed: model)
    for shard in ("0/2", "1/2"):
        main(["sweep", "--root", str(tmp_path), "--shard", shard, "--limit", "3"])
    seeds = studies.get("main").spec.seeds
    expected = studies.get("main").runs()
    expected.sort(key=lambda c: seeds.index(c["seed"]))  # seed-first
    settings = list(dict.fromkeys(map(setting, expected)))
    halves = [[c for c in expected if setting(c) in settings[i::2]] for i in (0, 1)]
    stored = results.records_table(tmp_path)
    assert len(fake_train.calls) == 6 and stored["run"].is_unique
    assert set(stored["run"]) == {run_hash(c) for c in halves[0][:3] + halves[1][:3]}
    assert {setting(c) for c in halves[0]}.isdisjoint(map(setting, halves[1]))
    log = Store(tmp_path).companion("study.json")["sessions"]
    assert [s["command"].split()[-3] for s in log] == ["0/2", "1/2"]
    assert log[-1]["status"] == {"ok": 6}
    table = pd.read_csv(tmp_path / "runs.csv")  # the store as one table, rewritten each session
    assert sorted(table["run"]) == sorted(stored["run"]) and (table["status"] == "ok").all()
    main(["sweep", "--root", str(tmp_path), "--status"])  # runs nothing, logs nothing
    assert len(fake_train.calls) == 6
    assert len(Store(tmp_path).companion("study.json")["sessions"]) == 2
    total = capsys.readouterr().out.splitlines()[-1].split()  # task, expected, ok, ..., pending
    assert total[:7] == ["all", str(len(expected)), "6", "0", "0", "0", str(len(expected) - 6)]
    for bad in (["--shard", "2/2"], ["--shard", "half"], ["--study", "finetune"],
                ["--precision", "fp8"]):
        with pytest.raises(SystemExit):
            main(["sweep", "--root", str(tmp_path), *bad])


def test_a_study_that_declares_its_precision_keeps_it(tmp_path, capsys):
    """The suite and gauge studies declare fp32: their runs carry it (a runtime key: no hash
    moves), and a sweep asked for another precision is refused before anything runs."""
    from dataclasses import replace

    from vitplast.experiments import search

    for name in ("suite", "gauge"):
        assert studies.get(name).spec.precision == "fp32"
    one = replace(studies.get("suite").spec, tasks=("digits",))
    assert search.settings(one)[0]["precision"] == "fp32"
    assert search.settings(one, precision="bf16")[0]["precision"] == "bf16"  # the caller's
    with pytest.raises(SystemExit):
        main(["sweep", "--study", "suite", "--root", str(tmp_path), "--precision", "bf16"])
    assert "declares precision 'fp32'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_pretrain_stages_are_parsed_or_refused_with_the_format(capsys):
    from vitplast.train.pretrain import parse_stages

    assert parse_stages("12:1e-3:0,8:5e-4:1") == ((12, 1e-3, 0), (8, 5e-4, 1))
    for bad in ("12:1e-3", "0:1e-3:0", "6:fast:0"):
        with pytest.raises(SystemExit):
            main(["pretrain", "--stages", bad])
        assert "expected EPOCHS:PEAK_LR:SEED per stage" in capsys.readouterr().err


def test_ctrl_c_on_a_sweep_ends_with_one_line_keeping_records_and_log(tmp_path, fake_runs,
                                                                      monkeypatch, capsys):
    """Ctrl-C during the second of two runs: exit 130, one line on stderr (no traceback), the
    first run's record and the session's log kept; the same command then runs the rest."""
    import signal

    from helpers import FakeTrain

    fake = FakeTrain()
    fake.kill_at = 2
    monkeypatch.setattr(finetune, "train", fake)
    handler = signal.getsignal(signal.SIGINT)
    assert main(["sweep", "--root", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        f"interrupted: 1 run record(s) in {tmp_path}, the session logged in its study.json; the "
        "same command resumes")
    assert len(results.records_table(tmp_path)) == 1
    assert Store(tmp_path).companion("study.json")["sessions"][-1]["status"] == {"ok": 1}
    signal.signal(signal.SIGINT, handler)  # the sweep's own handler, restored for pytest
    assert main(["sweep", "--root", str(tmp_path)]) == 0
    assert len(results.records_table(tmp_path)) == 2 and len(fake.calls) == 3


def test_a_sweep_that_leaves_runs_failed_exits_3_saying_what_resumes(tmp_path, fake_runs,
                                                                     monkeypatch, capsys):
    """A run that raised is stored failed: the sweep exits ``INCOMPLETE`` (3), its last
    line counting the runs not stored and stored failed and giving the command that re-runs
    them (with --retry-failed); that command then exits 0. The code is the one --help
    documents."""
    from vitplast.__main__ import INCOMPLETE

    assert INCOMPLETE == 3
    calls = []

    def second_fails(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 2:
            raise RuntimeError("out of luck")
        return finetune.TrainResult(history=[{"step": 0, "loss": 1.0}], best_val_acc=0.5,
                                    test_acc=0.5, trainable=1)

    monkeypatch.setattr(finetune, "train", second_fails)
    assert main(["sweep", "--root", str(tmp_path)]) == INCOMPLETE
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"vitplast sweep: incomplete: 0 of 2 runs not stored, 1 stored failed "
                       f"(1 ok, 0 diverged); to resume: python -m vitplast sweep --root "
                       f"{tmp_path} --retry-failed")
    assert main(["sweep", "--root", str(tmp_path), "--retry-failed"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "complete: 2 of 2 runs stored (2 ok, " \
        "0 diverged)"
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (f"{INCOMPLETE} runs are left not stored (a job died, or was cancelled or stopped "
            "before it ran them) or stored failed") in text and "130 interrupted" in text


def test_a_sweep_whose_job_dies_exits_3_and_the_same_command_completes(tmp_path, fake_runs,
                                                                       monkeypatch, capsys):
    """A job (submitit's debug cluster: in this process) that ends before storing its run
    (stopped: its time limit was near) leaves it not stored: exit 3, the last line naming the
    same command; that command then exits 0."""
    pytest.importorskip("submitit")
    from vitplast.experiments import sweep

    real = sweep.run_pack
    deaths = []

    def stopped_once(pack, **kwargs):
        if not deaths:
            deaths.append(1)
            return ["stopped"] * sum(map(len, pack))
        return real(pack, **kwargs)

    monkeypatch.setattr(sweep, "run_pack", stopped_once)
    command = ["sweep", "--root", str(tmp_path), "--executor", "submitit", "--cluster", "debug",
               "--runs-per-job", "1"]
    assert main(command) == 3
    err = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()
    assert err[-1] == (f"vitplast sweep: incomplete: 1 of 2 runs not stored, 0 stored failed "
                       f"(1 ok, 0 diverged); to resume: python -m vitplast {' '.join(command)}")
    assert any("stopped early (its time limit was near) with 1 of its 1 runs not stored" in line
               for line in err)
    assert main(command) == 0 and len(results.records_table(tmp_path)) == 2


def test_the_sweep_bar_counts_the_runs_it_stores(tmp_path, fake_runs, capsys):
    main(["sweep", "--root", str(tmp_path), "--limit", "1"])
    first = capsys.readouterr().err.replace("\r", "\n")
    assert "sweep (0 stored)" in first and "sweep (1 stored)" in first
    main(["sweep", "--root", str(tmp_path)])
    bar = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines()
           if line.startswith("sweep (")]
    assert bar[0].startswith("sweep (1 stored)") and bar[-1].startswith("sweep (2 stored)")


def test_pretrain_on_a_device_this_machine_lacks_refuses_before_making_out(tmp_path, capsys,
                                                                          monkeypatch):
    from vitplast.train import pretrain

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "new-model"
    with pytest.raises(SystemExit) as done:
        main(["pretrain", "--out", str(out), "--device", "cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(err) == 2 and "Traceback" not in "".join(err)
    assert err[1] == ("vitplast: error: --device 'cuda': no CUDA GPU is available "
                      "here; use cpu, or leave the device out (cuda when available)")
    assert not out.exists()
    with pytest.raises(ValueError, match="no CUDA GPU"):  # the Python route too
        pretrain.pretrain(out, device="cuda")
    assert not out.exists()


@pytest.mark.slow
def test_a_real_ctrl_c_on_a_sweep_ends_with_one_line(tmp_path):
    """Ctrl-C in a terminal reaches the sweep's whole process group after its first record:
    exit 130, the last line says what is kept, no traceback; the records and the log stay."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vitplast", "sweep", "--study", "main-smoke", "--root",
         str(root), "--device", "cpu"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
             "VITPLAST_CACHE": str(tmp_path / "cache")},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal does
    deadline = time.monotonic() + 300
    while not list(root.glob("*.json")) and proc.poll() is None:
        assert time.monotonic() < deadline, "the sweep stored no record in 300 s"
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before a Ctrl-C could be sent"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "interrupted: ") and err.strip().endswith("the same command resumes")
    records = [p for p in root.glob("*.json") if p.name != "study.json"]
    assert records and json.loads((root / "study.json").read_text())["sessions"]
