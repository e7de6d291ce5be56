"""The store (``Store(root)``) accounts for every run: complete records only, every other file
reported by name, claims so that concurrent sweeps train each run once, companions read and
written through their keys, and no session lost."""

import dataclasses
import json
import multiprocessing
import os
import pickle
import re
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from vitplast import finetune, models, provenance, results, store, sweep, tasks
from vitplast.experiments.runs import make_run, run_hash
from vitplast.experiments.store import Store

TINY = dict(pretrained=False, steps=2, batch_size=16, eval_every=100)
FORK = multiprocessing.get_context("fork")


def configs(n):
    return [make_run("digits", "LN1", lr=0.1 * (i + 1), **TINY) for i in range(n)]


class MarkedTrain:
    """Stands in for ``finetune.train``: leaves one marker file per training in ``folder``
    (named by the run's lr and the process), sleeps ``seconds``, returns an ok result; or
    raises ``error`` instead."""

    def __init__(self, folder, seconds=0.0, error=None):
        self.folder, self.seconds, self.error = folder, seconds, error
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, model, train_set, val_set, test_set, *, lr, **kwargs):
        (self.folder / f"{lr:.1f}-{os.getpid()}-{time.monotonic_ns()}").touch()
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return finetune.TrainResult(history=[{"step": 0, "loss": 1.0}], best_val_acc=0.5,
                                    best_step=0, test_acc=0.25, trainable=7)

    def trainings(self) -> dict[str, int]:
        """lr -> how many times a run of that lr was trained."""
        counts: dict[str, int] = {}
        for p in self.folder.iterdir():
            counts[p.name.split("-")[0]] = counts.get(p.name.split("-")[0], 0) + 1
        return counts


@pytest.fixture
def fast_runs(monkeypatch):
    """No model nor data loading: a run is only its (fake) training."""
    task = tasks.load("digits")
    monkeypatch.setattr(tasks, "load", lambda *a, **k: task)
    monkeypatch.setattr(models, "load_model", lambda *a, **k: torch.nn.Linear(1, 1))
    monkeypatch.setattr(models, "new_head", lambda model, n, seed: model)
    provenance.git_state()  # cached before any fork: no git process per child


def _sweep_after(barrier, todo, root, retry_failed=False):
    barrier.wait()
    sweep.run_sweep(todo, root, progress=False, retry_failed=retry_failed)


def _in_processes(target, args_per_process, timeout=120):
    """Run ``target(barrier, *args)`` in forked processes released together; their exit
    codes."""
    barrier = FORK.Barrier(len(args_per_process))
    procs = [FORK.Process(target=target, args=(barrier, *args)) for args in args_per_process]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    return [p.exitcode for p in procs]


def test_two_unsharded_sweeps_train_each_run_exactly_once(tmp_path, fast_runs, monkeypatch):
    fake = MarkedTrain(tmp_path / "trained", seconds=0.05)
    monkeypatch.setattr(finetune, "train", fake)
    todo = configs(16)
    assert _in_processes(_sweep_after, [(todo, tmp_path / "runs")] * 2) == [0, 0]
    assert fake.trainings() == {f"{c['lr']:.1f}": 1 for c in todo}  # 16 runs, once each
    stored = results.results(tmp_path / "runs")
    assert len(stored) == 16 and (stored["status"] == "ok").all()
    assert not list((tmp_path / "runs").glob("*.claim"))  # every claim released


def test_two_sweeps_retry_a_failed_run_once(tmp_path, fast_runs, monkeypatch):
    fake = MarkedTrain(tmp_path / "trained", seconds=0.05)
    monkeypatch.setattr(finetune, "train", fake)
    todo = configs(3)
    for c in todo:
        Store(tmp_path).save(c, dict(status="failed", error="RuntimeError: out of memory"))
    sweep.run_sweep(todo, tmp_path, progress=False)  # failed runs stay failed by default
    assert fake.trainings() == {}
    args = (todo, tmp_path, True)
    assert _in_processes(_sweep_after, [args, args]) == [0, 0]
    assert fake.trainings() == {"0.1": 1, "0.2": 1, "0.3": 1}
    assert (results.results(tmp_path)["status"] == "ok").all()


def _log_one(barrier, root, i):
    summary = pd.DataFrame(dict(run=[f"{i:016x}"], status=["ok"]))
    barrier.wait()
    provenance.log_session(root, f"session {i}", summary, 1.0, device="cpu")


def test_fifty_concurrent_sessions_are_all_logged(tmp_path, fast_runs):
    codes = _in_processes(_log_one, [(tmp_path, i) for i in range(50)])
    assert codes == [0] * 50
    sessions = Store(tmp_path).companion("study.json")["sessions"]
    assert sorted(s["command"] for s in sessions) == sorted(f"session {i}" for i in range(50))
    assert len(pd.read_csv(tmp_path / "runs.csv")) == 1  # the last writer's table, whole


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _claim(root, config, host, pid, age):
    path = root / f"{run_hash(config)}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(host=host, pid=pid, token="x")))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_dead_claims_are_taken_over_and_live_ones_left_alone(tmp_path, fast_runs, monkeypatch):
    import socket

    fake = MarkedTrain(tmp_path / "trained")
    monkeypatch.setattr(finetune, "train", fake)
    here = socket.gethostname()
    todo = configs(4)
    claims = [_claim(tmp_path, todo[0], here, _dead_pid(), 0),  # owner gone on this host
              _claim(tmp_path, todo[1], "elsewhere", 1, 2 * store.CLAIM_TIMEOUT_S),  # silent
              _claim(tmp_path, todo[2], here, os.getppid(), 0),  # alive on this host
              _claim(tmp_path, todo[3], "elsewhere", 1, 0)]  # fresh heartbeat elsewhere
    kinds = Store(tmp_path).audit().set_index("file")["kind"]
    assert [kinds[c.name] for c in claims] == ["dead claim", "dead claim", "claim", "claim"]
    table = sweep.run_sweep(todo, tmp_path, progress=False)
    assert table["status"].tolist() == ["ok", "ok", "missing", "missing"]
    assert fake.trainings() == {"0.1": 1, "0.2": 1}
    assert [c.exists() for c in claims] == [False, False, True, True]
    assert json.loads(claims[2].read_text())["pid"] == os.getppid()  # untouched


def test_a_claim_beats_while_held_and_goes_when_the_run_ends(tmp_path):
    config = configs(1)[0]
    path = tmp_path / f"{run_hash(config)}.claim"
    with Store(tmp_path).claim(config, heartbeat=0.05) as mine:
        assert mine
        owner = json.loads(path.read_text())
        assert owner["pid"] == os.getpid() and owner["host"] and owner["claimed"]
        with Store(tmp_path).claim(config) as again:
            assert not again  # held: a second claim is refused
        os.utime(path, (time.time() - 3600, time.time() - 3600))
        time.sleep(0.3)
        assert time.time() - path.stat().st_mtime < 60  # the heartbeat touched it again
    assert not path.exists()


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()],
                         ids=["failed run", "interrupted"])
def test_claims_are_removed_when_a_run_fails_or_is_interrupted(tmp_path, fast_runs,
                                                               monkeypatch, error):
    monkeypatch.setattr(finetune, "train", MarkedTrain(tmp_path / "trained", error=error))
    todo = configs(1)
    if isinstance(error, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            sweep.run_sweep(todo, tmp_path / "runs", progress=False)
    else:
        table = sweep.run_sweep(todo, tmp_path / "runs", progress=False)
        assert table["status"].tolist() == ["failed"]
    assert not list((tmp_path / "runs").glob("*.claim"))


def test_orphan_temp_files_are_cleaned_and_young_ones_kept(tmp_path, fast_runs, monkeypatch):
    monkeypatch.setattr(finetune, "train", MarkedTrain(tmp_path / "trained"))
    root = tmp_path / "runs"
    root.mkdir()
    old, young = root / ".0123456789abcdef.json.k1ll.tmp", root / ".fedcba9876543210.json.w.tmp"
    for path in (old, young):
        path.write_text('{"run": {')
    os.utime(old, (time.time() - 2 * store.TEMP_AGE_S, time.time() - 2 * store.TEMP_AGE_S))
    assert Store(root).audit()[["file", "kind"]].values.tolist() == [[old.name, "orphan temp"]]
    sweep.run_sweep(configs(1), root, progress=False)
    assert not old.exists() and young.exists()  # young: maybe a write in progress


def test_clean_temp_deletes_only_temp_files_older_than_asked(tmp_path):
    names = [".0123456789abcdef.json.a.tmp", ".fedcba9876543210.json.b.tmp", ".study.json.c.tmp"]
    for name, age in zip(names, [2 * store.TEMP_AGE_S, 60.0, 0.0]):
        (tmp_path / name).write_text("{")
        os.utime(tmp_path / name, (time.time() - age, time.time() - age))
    (tmp_path / "notes.tmp").write_text("not a temp file of a write")
    os.utime(tmp_path / "notes.tmp", (time.time() - 3600, time.time() - 3600))
    runs = Store(tmp_path)
    assert runs.clean_temp() == [names[0]]
    assert runs.clean_temp(older_than=30.0) == [names[1]]
    assert runs.clean_temp() == [] and sorted(p.name for p in tmp_path.iterdir()) == [
        names[2], "notes.tmp"]


BAD_RECORDS = [
    ("truncated", '{"run": {"kind": "fin', "not a JSON object"),
    ("no run", {"status": "ok", "run": None}, "no `run` object"),
    ("bad status", {"status": "done"}, "status 'done' is not one of"),
    ("text accuracy", {"status": "ok", "test_acc": "97%"}, "test_acc '97%' is not a number"),
    ("ok without results", {"status": "ok", "test_acc": 0.9, "best_val_acc": None},
     "status 'ok' without its results \\(best_val_acc, history missing\\)"),
    ("unknown key", {"status": "ok", "run": {"grad_masks": None}},
     r"run: unknown run setting\(s\) \['grad_masks'\]"),
    ("negative lr", {"status": "ok", "run": {"lr": -1.0}}, "run: lr=-1.0"),
    ("wrong kind", {"status": "ok", "run": {"kind": "pretrain"}}, "kind='pretrain'"),
]


@pytest.mark.parametrize("text, problem", [c[1:] for c in BAD_RECORDS],
                         ids=[c[0] for c in BAD_RECORDS])
def test_an_invalid_record_is_reported_by_name_and_re_run(tmp_path, fast_runs, monkeypatch,
                                                          text, problem):
    fake = MarkedTrain(tmp_path / "trained")
    monkeypatch.setattr(finetune, "train", fake)
    root, config = tmp_path / "runs", configs(1)[0]
    if isinstance(text, dict):  # changes to a complete record
        changed = text.get("run", {})
        text = json.dumps({**text, "run": changed if changed is None else {**config,
                                                                           **changed}})
    store.write_text(Store(root).path(config), text)
    Store(root).write_companion("study.json", {"sessions": []})  # companions: not reported
    Store(root).write_companion("scales-0123.json", dict(tasks=[], target="MHA", n_pairs=8,
                                                         plasticity={}, scales={}))
    store.write_json(root / "notes.json", {"todo": "rerun"})  # foreign
    report = Store(root).audit().set_index("file")
    name = Store(root).path(config).name
    assert report["kind"].to_dict() == {name: "invalid", "notes.json": "foreign"}
    assert re.search(problem, report.loc[name, "problem"])
    with pytest.warns(UserWarning, match=f"2 file\\(s\\) .*{name}.*notes.json.*"
                      r"vitplast\.store\.Store\(root\)\.audit\(\) says why"):
        assert Store(root).records() == []
    with pytest.warns(UserWarning, match=name):
        table = sweep.run_sweep([config], root, progress=False)
    assert table["status"].tolist() == ["ok"] and fake.trainings() == {"0.1": 1}
    assert Store(root).audit()["file"].tolist() == ["notes.json"]


def test_a_record_at_another_runs_path_is_not_that_run(tmp_path):
    a, b = configs(2)
    store.write_json(Store(tmp_path).path(a), {"run": b, "status": "diverged"})
    assert not Store(tmp_path).has(a) and not Store(tmp_path).has(b)
    problem = Store(tmp_path).audit()["problem"].tolist()
    assert problem == [f"named {run_hash(a)} but its run hashes to {run_hash(b)} "
                       "(an older hash, or a moved file)"]


def test_complete_records_pass_and_load(tmp_path):
    a, b = configs(2)
    Store(tmp_path).save(a, dict(status="ok", test_acc=0.9, best_val_acc=0.8,
                                 history=[dict(step=0, loss=1.0)]))
    Store(tmp_path).save(b, dict(status="diverged", test_acc=None, best_val_acc=0.2))
    assert store.record_problems(store.read_json(Store(tmp_path).path(a)),
                                 Store(tmp_path).path(a)) == []
    assert len(Store(tmp_path).records()) == 2 and Store(tmp_path).audit().empty


@pytest.mark.parametrize("name, content", [
    ("study.json", {"session": []}),
    ("scales-0123.json", dict(tasks=[], target="MHA", n_pairs=8, plasticity={})),
    ("layers-0123.json", dict(tasks=[], n_pairs=8, protocol="hidden")),
    ("after-0123.json", dict(run={}, n_pairs=8, before={})),
    ("plasticity-0123.json", dict(task="digits", n_pairs=8, rows=[])),
    ("probe-0123.json", dict(task="digits", model="m", probe="p", val_acc=1, train_acc=1)),
    ("probe-4567.json", '{"task": "dig'),
])
def test_a_companion_without_its_keys_is_named_and_never_used(tmp_path, name, content):
    """Every companion kind has its keys (``store.COMPANIONS``): one that lacks one is named by
    the audit and refused by ``Store.companion`` with the fix, not read into a KeyError."""
    path = tmp_path / name
    store.write_text(path, content) if isinstance(content, str) else store.write_json(path,
                                                                                      content)
    report = Store(tmp_path).audit()
    assert report.values.tolist()[0][:2] == [name, "invalid companion"]
    with pytest.raises(ValueError, match=f"{name}: .*delete it to measure again"):
        Store(tmp_path).companion(name)
    assert Store(tmp_path).companion("probe-absent.json") is None


def test_a_store_is_its_folder(tmp_path):
    """A value: made from a str or a Path, equal by folder, frozen, sent to other processes
    whole; a run's record lies at ``<run hash>.json`` in it."""
    runs, config = Store(str(tmp_path)), configs(1)[0]
    assert runs == Store(tmp_path) and runs.root == tmp_path and runs != Store(tmp_path / "b")
    assert pickle.loads(pickle.dumps(runs)) == runs
    with pytest.raises(dataclasses.FrozenInstanceError):
        runs.root = tmp_path / "b"
    assert runs.path(config) == tmp_path / f"{run_hash(config)}.json"


def test_a_saved_record_is_read_back_whole(tmp_path):
    runs, (a, b) = Store(tmp_path / "runs"), configs(2)
    assert runs.record(a) is None and not runs.has(a) and runs.records() == []
    outcome = dict(status="ok", test_acc=0.9, best_val_acc=0.8, history=[dict(step=0, loss=1.0)])
    assert runs.save(a, outcome) == runs.path(a)  # the folder is made
    assert runs.record(a) == {"run": json.loads(json.dumps(a)), **outcome}
    assert runs.has(a) and not runs.has(b) and runs.record(b) is None
    assert runs.records() == [runs.record(a)] and runs.audit().empty


def test_a_companion_is_written_and_read_by_name(tmp_path):
    """``write_companion`` refuses what ``companion`` would refuse, and writes nothing then;
    a name that is no companion kind's fails naming the kinds."""
    runs = Store(tmp_path)
    probe = dict(task="digits", model="m", probe="p", test_acc=89.5, val_acc=90.0, train_acc=99.0)
    assert runs.companion("probe-0123.json") is None
    assert runs.write_companion("probe-0123.json", probe) == tmp_path / "probe-0123.json"
    assert runs.companion("probe-0123.json") == probe and runs.audit().empty
    with pytest.raises(ValueError, match=r"probe-4567.json: missing \['train_acc'\]"):
        runs.write_companion("probe-4567.json", {k: v for k, v in probe.items()
                                                 if k != "train_acc"})
    assert not (tmp_path / "probe-4567.json").exists()
    store.write_json(tmp_path / "notes.json", {"todo": "rerun"})
    for name in ("notes.json", "sub/study.json", "../probe-0123.json"):
        with pytest.raises(ValueError, match=re.escape(f"{name!r} is not a companion file of a "
                                                       f"store; valid: {list(store.COMPANIONS)}")):
            runs.companion(name)
        with pytest.raises(ValueError, match="is not a companion file"):
            runs.write_companion(name, {"sessions": []})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json", "probe-0123.json"]


def test_a_companion_is_computed_once_then_read(tmp_path):
    """With ``compute``, a missing companion is computed, written and returned; later calls
    read the file and never compute again; content that lacks its keys is refused unwritten."""
    runs, calls = Store(tmp_path), []
    probe = dict(task="digits", model="m", probe="p", test_acc=89.5, val_acc=90.0, train_acc=99.0)

    def compute():
        calls.append(1)
        return probe

    assert runs.companion("probe-1.json", compute=compute) == probe
    assert runs.companion("probe-1.json", compute=compute) == probe and len(calls) == 1
    assert store.read_json(tmp_path / "probe-1.json") == probe
    with pytest.raises(ValueError, match="missing"):
        runs.companion("probe-2.json", compute=lambda: {"task": "digits"})
    assert not (tmp_path / "probe-2.json").exists()
