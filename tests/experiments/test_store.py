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
from pathlib import Path

import pandas as pd
import pytest
import torch

from vitplast import cached, files, models, provenance
from vitplast.datasets import tasks
from vitplast.experiments import claims as claims_
from vitplast.experiments import results, store, study_log, sweep
from vitplast.experiments.runs import make_run, run_hash
from vitplast.experiments.store import Store
from vitplast.measure.fingerprint import measuring
from vitplast.train import finetune

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
    stored = results.records_table(tmp_path / "runs")
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
    assert (results.records_table(tmp_path)["status"] == "ok").all()


def _log_one(barrier, root, i):
    summary = pd.DataFrame(dict(run=[f"{i:016x}"], status=["ok"]))
    barrier.wait()
    study_log.log_session(root, f"session {i}", summary, 1.0, device="cpu")


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
              _claim(tmp_path, todo[1], "elsewhere", 1, 2 * claims_.CLAIM_TIMEOUT_S),  # silent
              _claim(tmp_path, todo[2], here, os.getppid(), 0),  # alive on this host
              _claim(tmp_path, todo[3], "elsewhere", 1, 0)]  # fresh heartbeat elsewhere
    kinds = Store(tmp_path).audit().set_index("file")["kind"]
    assert [kinds[c.name] for c in claims] == ["dead claim", "dead claim", "claim", "claim"]
    table = sweep.run_sweep(todo, tmp_path, progress=False).table
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
        table = sweep.run_sweep(todo, tmp_path / "runs", progress=False).table
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


OK = dict(status="ok", test_acc=0.9, best_val_acc=0.8, history=[dict(step=0, loss=1.0)])
BAD_RECORDS = [
    ("truncated", '{"run": {"kind": "fin', "not a JSON object"),
    ("no run", {"status": "ok", "run": None}, "no `run` object"),
    ("bad status", {**OK, "status": "done"},
     r"status='done' is not valid: expected one of \['ok', 'diverged', 'failed'\]"),
    ("text accuracy", {**OK, "test_acc": "97%"},
     r"test_acc='97%' is not valid: expected a number >= 0 and <= 1, or null"),
    ("accuracy out of range", {**OK, "test_acc": 97.0}, r"test_acc=97.0 is not valid"),
    ("ok without results", {"status": "ok", "test_acc": 0.9, "best_val_acc": None},
     r"best_val_acc=None is not valid: expected a number \(an ok run holds its results\); "
     r"history is missing"),
    ("missing status", {k: v for k, v in OK.items() if k != "status"},
     r"^status is missing: expected one of"),
    ("unknown key", {**OK, "run": {"grad_masks": None}},
     r"run.grad_masks is not a known key; valid: \['kind'"),
    ("negative lr", {**OK, "run": {"lr": -1.0}},
     r"run.lr=-1.0 is not valid: expected a number > 0"),
    ("negative clip", {**OK, "run": {"clip_grad_norm": -1.0}},
     r"run.clip_grad_norm=-1.0 is not valid: expected a number >= 0, or null"),
    ("wrong kind", {**OK, "run": {"kind": "pretrain"}}, "run.kind='pretrain' is not valid"),
    ("history of text", {**OK, "history": "none"}, r"history='none' is not valid: expected an "
                                                   r"array"),
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
    files.write_text(Store(root).path(config), text)
    Store(root).write_companion("study.json", {"sessions": []})  # companions: not reported
    Store(root).write_companion("scales-0123.json", COMPANIONS["scales-0123.json"])
    files.write_json(root / "notes.json", {"todo": "rerun"})  # foreign
    report = Store(root).audit().set_index("file")
    name = Store(root).path(config).name
    assert report["kind"].to_dict() == {name: "invalid", "notes.json": "foreign"}
    assert re.search(problem, report.loc[name, "problem"])
    with pytest.warns(UserWarning, match=f"2 file\\(s\\) .*{name}.*notes.json.*"
                      r"vitplast\.experiments\.store\.Store\(root\)\.audit\(\) says why"):
        assert Store(root).records() == []
    with pytest.warns(UserWarning, match=name):
        table = sweep.run_sweep([config], root, progress=False).table
    assert table["status"].tolist() == ["ok"] and fake.trainings() == {"0.1": 1}
    assert Store(root).audit()["file"].tolist() == ["notes.json"]


def test_a_record_at_another_runs_path_is_not_that_run(tmp_path):
    a, b = configs(2)
    files.write_json(Store(tmp_path).path(a), {"run": b, "status": "diverged"})
    assert not Store(tmp_path).has(a) and not Store(tmp_path).has(b)
    problem = Store(tmp_path).audit()["problem"].tolist()
    assert problem == [f"named {run_hash(a)} but its run hashes to {run_hash(b)} "
                       "(an older hash, or a moved file)"]


def test_complete_records_pass_and_load(tmp_path):
    a, b = configs(2)
    Store(tmp_path).save(a, dict(status="ok", test_acc=0.9, best_val_acc=0.8,
                                 history=[dict(step=0, loss=1.0)]))
    Store(tmp_path).save(b, dict(status="diverged", test_acc=None, best_val_acc=0.2))
    assert store.record_problems(files.read_json(Store(tmp_path).path(a)),
                                 Store(tmp_path).path(a)) == []
    assert len(Store(tmp_path).records()) == 2 and Store(tmp_path).audit().empty


def _without(content: dict, key: str) -> dict:
    return {k: v for k, v in content.items() if k != key}


#: A valid file of each companion kind (``cached.COMPANIONS``; plasticity also of relative
#: plasticity).
RUN = make_run("digits", "LN1", lr=0.1, **TINY)
ROW = dict(layer=0, component="LN1", plasticity=1.5, ci95=0.02)
COMPANIONS = {
    "study.json": {"sessions": [dict(command="python -m vitplast sweep", date="2026-12-01",
                                     status={"ok": 3}, wall_seconds=1.0)]},
    "scales-0123.json": dict(tasks=["digits"], target="FC1", n_pairs=8,
                             plasticity={"LN1": 0.9, "FC1": 1.4}, scales={"LN1": 1.6}),
    "layers-0123.json": dict(tasks=["digits"], n_pairs=8, protocol="hidden",
                             rows=[dict(ROW, task="digits")]),
    "after-0123.json": dict(run=RUN, n_pairs=8, before={"LN1": 0.9}, after={"LN1": 1.0}),
    "plasticity-0123.json": dict(task="digits", n_pairs=8, protocol="embedding", rows=[ROW]),
    "probe-0123.json": dict(task="digits", model="m", probe="p", test_acc=89.5, val_acc=90.0,
                            train_acc=99.0),
    "plasticity-4567.json": dict(task="digits", n_pairs=8, protocol="hidden",
                                 quantity="relative plasticity", rows=[dict(
                                     _without(ROW, "ci95"), relative_plasticity=1.0, s_in=2.0,
                                     s_out=3.0)]),
    "advise-0123.json": dict(task="digits", model="m", weights="ab12", c=1.0, rows=[dict(
        task="digits", rule="paper: MHA", config="MHA", score=1.0, rank=1, seconds=0.1)],
                             provenance=[{}]),
    "table-0123.json": dict(table="gauge-rankings", params={"n_pairs": 8}, columns=[
        dict(name="component", dtype="category", categories=["LN1", "MHA"]),
        dict(name="plasticity", dtype="float64")], rows=[["MHA", 1.5], ["LN1", None]],
                            provenance=dict(machine="x86_64, 2 cores", date="2026-12-01")),
}
#: Per companion kind: a key missing, a wrong type, a value out of range, and the problem the
#: audit names for each (the key, the value found, what is expected).
DAMAGES = {
    "study.json": [
        ("missing", lambda c: {}, r"^sessions is missing: expected an array"),
        ("type", lambda c: {"sessions": {}}, r"^sessions=\{\} is not valid: expected an array"),
        ("range", lambda c: {"sessions": [{**c["sessions"][0], "status": {"ok": -1}}]},
         r"^sessions\[0\].status.ok=-1 is not valid: expected an integer >= 0")],
    "scales-0123.json": [
        ("missing", lambda c: _without(c, "scales"), r"^scales is missing: expected an object"),
        ("type", lambda c: {**c, "scales": [1.6]},
         r"^scales=\[1.6\] is not valid: expected an object whose values are each a number > 0"),
        ("range", lambda c: {**c, "scales": {"LN1": 0.0}},
         r"^scales.LN1=0.0 is not valid: expected a number > 0")],
    "layers-0123.json": [
        ("missing", lambda c: {**c, "rows": [_without(c["rows"][0], "task")]},
         r"^rows\[0\].task is missing"),
        ("type", lambda c: {**c, "rows": "rows"}, r"^rows='rows' is not valid: expected an array"),
        ("range", lambda c: {**c, "rows": [{**c["rows"][0], "layer": -1}]},
         r"^rows\[0\].layer=-1 is not valid: expected an integer >= 0")],
    "after-0123.json": [
        ("missing", lambda c: _without(c, "before"), r"^before is missing: expected an object"),
        ("type", lambda c: {**c, "after": "1.0"}, r"^after='1.0' is not valid: expected an object"),
        ("range", lambda c: {**c, "run": {**c["run"], "clip_grad_norm": -1.0}},
         r"^run.clip_grad_norm=-1.0 is not valid: expected a number >= 0, or null")],
    "plasticity-0123.json": [
        ("missing", lambda c: _without(c, "rows"), r"^rows is missing: expected an array"),
        ("type", lambda c: {**c, "rows": [1, 2, 3]},
         r"^rows\[0\]=1 is not valid: expected an object with \['layer', 'component', "
         r"'plasticity'\]"),
        ("range", lambda c: {**c, "rows": [{**ROW, "plasticity": -0.5}]},
         r"^rows\[0\].plasticity=-0.5 is not valid: expected a number >= 0")],
    "probe-0123.json": [
        ("missing", lambda c: _without(c, "train_acc"), r"^train_acc is missing: expected a "
                                                        r"number >= 0 and <= 100 \(in %\)"),
        ("type", lambda c: {**c, "test_acc": "abc"},
         r"^test_acc='abc' is not valid: expected a number >= 0 and <= 100 \(in %\)"),
        ("range", lambda c: {**c, "val_acc": 100.5}, r"^val_acc=100.5 is not valid")],
    "plasticity-4567.json": [  # relative plasticity
        ("missing", lambda c: {**c, "rows": [_without(c["rows"][0], "s_in")]},
         r"^rows\[0\].s_in is missing: expected a number >= 0"),
        ("type", lambda c: {**c, "quantity": "relative"},
         r"^quantity='relative' is not valid: expected exactly 'relative plasticity'"),
        ("range", lambda c: {**c, "rows": [{**c["rows"][0], "relative_plasticity": -1.0}]},
         r"^rows\[0\].relative_plasticity=-1.0 is not valid: expected a number >= 0")],
    "advise-0123.json": [
        ("missing", lambda c: _without(c, "weights"), r"^weights is missing"),
        ("type", lambda c: {**c, "rows": {"MHA": 1}}, r"^rows=\{'MHA': 1\} is not valid: "
                                                     r"expected an array"),
        ("range", lambda c: {**c, "rows": [{**c["rows"][0], "rank": 0}]},
         r"^rows\[0\].rank=0 is not valid: expected an integer >= 1")],
}
DAMAGES["table-0123.json"] = [
    ("missing", lambda c: _without(c, "provenance"), r"^provenance is missing: expected an object"),
    ("type", lambda c: {**c, "rows": [{"component": "MHA"}]},
     r"^rows\[0\]=\{'component': 'MHA'\} is not valid: expected an array"),
    ("range", lambda c: {**c, "columns": []}, r"^columns=\[\] is not valid: expected an array "
                                              r"of at least 1 \(each an object with \['name', "
                                              r"'dtype'\]\)")]
CASES = [(name, *damage) for name, damages in DAMAGES.items() for damage in damages]


def test_every_companion_kind_has_a_valid_example_and_three_damages(tmp_path):
    tmp = tmp_path
    assert sorted({cached.companion_kind(n) for n in COMPANIONS}) == sorted(
        set(cached.COMPANIONS.values()))
    assert sorted(DAMAGES) == sorted(COMPANIONS)
    for name, content in COMPANIONS.items():
        assert cached.companion_problems(files.write_json(Path(tmp) / name, content)) == []


@pytest.mark.parametrize("name, damage, change, problem", CASES,
                         ids=[f"{c[0].removesuffix('.json')}-{c[1]}" for c in CASES])
def test_a_companion_that_fails_its_schema_is_named_and_never_used(tmp_path, name, damage,
                                                                   change, problem):
    """The audit names the file, the key, the value found and what is expected; the file is
    never read as it is: a measurement is set aside and computed again by the call that
    computes it (refused without one), and a study log is refused with a fix that keeps it."""
    files.write_json(tmp_path / name, change(COMPANIONS[name]))
    report = Store(tmp_path).audit()
    assert report[["file", "kind"]].values.tolist() == [[name, "invalid companion"]]
    assert re.search(problem, report["problem"][0]), report["problem"][0]
    fix = "restart_log" if name == "study.json" else "sets it aside and measures it again"
    with pytest.raises(ValueError, match=f"{name} does not pass the .* schema .*{fix}"):
        Store(tmp_path).companion(name)
    if name == "study.json":
        with pytest.raises(ValueError, match="restart_log"):
            study_log.log_session(tmp_path, "c", pd.DataFrame(dict(run=["x"], status=["ok"])), 1)
        return
    with pytest.warns(UserWarning, match=f"{name} does not pass .*set aside as {name}.invalid-"):
        got = Store(tmp_path).companion(name, compute=lambda: COMPANIONS[name])
    stamp = dict(measured_by=measuring()) if cached.companion_kind(name) in cached.MEASURED \
        else {}  # a measurement carries the measuring code's fingerprint
    assert got == dict(json.loads(json.dumps(COMPANIONS[name])), **stamp)
    assert Store(tmp_path).audit().empty
    (aside,) = tmp_path.glob(f"{name}.invalid-*")  # kept whole for inspection
    assert json.loads(aside.read_text()) == change(COMPANIONS[name])


def test_a_companion_naming_an_unknown_component_fails_naming_the_valid_ones(tmp_path):
    """The published schema takes any component name; the store checks them against the
    component table's (``components.names``): an audit names the file, and a write or a
    measurement of a component ``FC9`` is refused, each naming the valid components."""
    from vitplast.measure import components, fingerprint

    valid = re.escape(str(list(components.names())))
    bad = {**COMPANIONS["plasticity-0123.json"], "rows": [{**ROW, "component": "FC9"}]}
    files.write_json(tmp_path / "plasticity-0123.json", bad)
    report = Store(tmp_path).audit()
    assert report[["file", "kind"]].values.tolist() == [["plasticity-0123.json",
                                                         "invalid companion"]]
    assert re.search(rf"component='FC9' is not valid: expected one of {valid}",
                     report["problem"][0]), report["problem"][0]
    with pytest.raises(ValueError, match=rf"not written: .*'FC9'.*{valid}"):
        Store(tmp_path).write_companion("plasticity-4567.json", bad)
    with pytest.raises(ValueError, match=rf"not written: .*'FC9'.*{valid}"):  # a measured one
        cached.companion(tmp_path, "plasticity-89ab.json", lambda: bad, **fingerprint.stamp())
    assert not (tmp_path / "plasticity-4567.json").exists()


def test_a_damaged_study_log_restarts_keeping_its_sessions(tmp_path, fast_runs):
    """``study_log.restart_log``: the damaged log is set aside whole, the new one points to
    it, and sessions are logged again; a sweep over the store refused it before any work."""
    damaged = {"sessions": {"0": COMPANIONS["study.json"]["sessions"][0]}}
    files.write_json(tmp_path / "study.json", damaged)
    with pytest.raises(ValueError, match=r"study.json does not pass the study schema \(schemas/"
                                         r"study.schema.json\): sessions=.* is not valid: "
                                         r"expected an array.*restart_log"):
        sweep.run_sweep(configs(1), tmp_path, progress=False)
    assert Store(tmp_path).records() == []  # refused before any run
    new = study_log.restart_log(tmp_path)
    (aside,) = tmp_path.glob("study.json.invalid-*")
    assert json.loads(aside.read_text()) == damaged
    assert files.read_json(new) == {"sessions": [], "earlier": [aside.name]}
    study_log.log_session(tmp_path, "c", pd.DataFrame(dict(run=["x"], status=["ok"])), 1.0)
    assert [s["command"] for s in Store(tmp_path).companion("study.json")["sessions"]] == ["c"]
    with pytest.raises(ValueError, match="is valid: restart_log sets aside only"):
        study_log.restart_log(tmp_path)


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
    with pytest.raises(ValueError, match=r"probe-4567.json: not a complete probe file; not "
                       r"written: train_acc is missing: expected a number >= 0 and <= 100"):
        runs.write_companion("probe-4567.json", {k: v for k, v in probe.items()
                                                 if k != "train_acc"})
    assert not (tmp_path / "probe-4567.json").exists()
    files.write_json(tmp_path / "notes.json", {"todo": "rerun"})
    for name in ("notes.json", "sub/study.json", "../probe-0123.json"):
        with pytest.raises(ValueError, match=re.escape(f"{name!r} is not a companion file of a "
                                                       f"store; valid: {list(cached.COMPANIONS)}")):
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
    assert files.read_json(tmp_path / "probe-1.json") == probe
    with pytest.raises(ValueError, match="model is missing"):
        runs.companion("probe-2.json", compute=lambda: {"task": "digits"})
    assert not (tmp_path / "probe-2.json").exists()


def test_a_dead_claim_beside_a_finished_record_is_removed_once_saying_so(tmp_path, fast_runs,
                                                                       monkeypatch):
    """The owner stored the record and died before removing its claim: the next sweep removes
    the claim (one warning naming it), the one after has nothing to say; a dead claim of a run
    without a record stays for its run's sweep, a live one is left alone."""
    import socket
    import warnings

    fake = MarkedTrain(tmp_path / "trained")
    monkeypatch.setattr(finetune, "train", fake)
    done, todo, live = configs(3)
    Store(tmp_path).save(done, OK)
    dead = _claim(tmp_path, done, socket.gethostname(), _dead_pid(), 0)
    other = _claim(tmp_path, todo, socket.gethostname(), _dead_pid(), 0)
    held = _claim(tmp_path, live, socket.gethostname(), os.getppid(), 0)
    with pytest.warns(UserWarning, match=rf"removed 1 dead claim\(s\) under .* whose runs have "
                                         rf"complete records .*\['{dead.name}'\]"):
        sweep.run_sweep([done], tmp_path, progress=False)
    assert not dead.exists() and other.exists() and held.exists() and fake.trainings() == {}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        sweep.run_sweep([done], tmp_path, progress=False)
    assert [str(w.message) for w in said if "removed" in str(w.message)] == []  # once
    assert Store(tmp_path).clean_dead_claims() == []
    assert Store(tmp_path).audit().set_index("file")["kind"].to_dict() == {
        other.name: "dead claim", held.name: "claim"}


def test_every_shipped_file_passes_its_schema():
    """Every record and companion of every store shipped under data/ passes its schema: the
    audit of each store is empty, so every JSON file there is a complete record or a
    companion that passes its kind's schema."""
    data = Path(__file__).resolve().parents[2] / "data"
    roots = sorted(p.parent for p in data.glob("*/study.json"))
    assert {p.name for p in roots} >= {"finetune", "confounds", "suite", "gauge"}
    for root in roots:  # an empty audit: every record and companion passes (about 3 ms each)
        audit = Store(root).audit()
        assert audit.empty, audit.head().to_dict("records")


def test_wait_for_returns_once_a_live_claim_on_the_runs_is_released(tmp_path):
    """Another holder of a run's claim (here a thread of this process: a live owner) keeps
    ``wait_for`` waiting until it lets go; runs nobody holds are not waited for."""
    import threading
    import time

    store, run = Store(tmp_path), make_run("digits", lr=0.1, seed=0)
    other = make_run("digits", lr=0.01, seed=0)
    held, released = threading.Event(), threading.Event()

    def train_elsewhere():
        with store.claim(run) as mine:
            assert mine
            held.set()
            time.sleep(2.0)
        released.set()

    thread = threading.Thread(target=train_elsewhere)
    thread.start()
    held.wait()
    store.wait_for([other], poll=0.05)
    assert not released.is_set()  # it did not wait for the claim it does not need
    store.wait_for([run, other], poll=0.05)
    assert released.is_set()
    thread.join()
