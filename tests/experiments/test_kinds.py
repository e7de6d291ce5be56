"""Study kinds: every flag of ``vitplast sweep`` is honoured by every kind of study, or refused
naming the kinds it applies to; nothing is accepted and ignored. One tiny study per kind, a
temporary store and a fake training step (``runner.run_lrs``): each flag's effect is read from
what was trained and stored."""

import math
import re

import pandas as pd
import pytest

from vitplast.__main__ import main
from vitplast.experiments import confound_plasticity, confounds, runner, runs, studies
from vitplast.experiments.adaptive import ConfoundStudy, SearchedStudy
from vitplast.experiments.kinds import BudgetStudy, GridStudy, PaperStudy
from vitplast.experiments.runs import setting
from vitplast.experiments.runtime import FLAGS, Runtime
from vitplast.experiments.spec_types import Budget, Grid, PaperGrid, Search, Spec
from vitplast.experiments.store import Store

TINY = dict(steps=2, warmup_steps=1, eval_every=1, batch_size=8)
_GRID = GridStudy("t-grid", "a tiny grid", "t-grid", Grid(
    tasks=("digits",), lrs={"head": (0.1, 1.0), "LN1": (0.1, 1.0)}, seeds=(0, 1), fixed=TINY),
    place=".")
STUDIES = {
    "grid": _GRID,
    "budget": BudgetStudy("t-budget", "a tiny budget check", "t-budget", Budget(
        tasks=("digits",), seeds=(0, 1), fixed=dict(TINY, steps=3)), baselines=_GRID,
        place="."),
    "paper": PaperStudy("t-paper", "a tiny paper grid", "t-paper", PaperGrid(
        model="vitplast_fmnist", tasks=("digits",), configs=("head", "LN1"), lrs=(0.1, 1.0),
        lrs_domainnet=(), seeds=(0, 1)), place="."),
    "confound": ConfoundStudy("t-confound", "a tiny confound study", "t-confound",
                              "CONFOUNDS_SMOKE", baselines=_GRID, place="."),
    "searched": SearchedStudy("t-searched", "a tiny searched study", "t-searched", Search(
        tasks=("digits", "fmnist_contrast"), seeds=(0,), configs={"head": 0.3, "LN1": 0.3},
        fixed=TINY), place="."),
}


def _acc(lr: float) -> float:
    """Validation accuracy peaking at LR 0.3: every search brackets it."""
    return 0.9 - 0.1 * abs(math.log10(lr / 0.3))


def _record(run: dict, status: str = "ok") -> dict:
    return dict(run=run, status=status, best_val_acc=_acc(run["lr"]), best_step=1,
                test_acc=_acc(run["lr"]), history=[dict(step=0, loss=2.0),
                                                   dict(step=1, loss=1.0, val_loss=1.0)])


@pytest.fixture
def sweep_kind(monkeypatch, tmp_path):
    """``run(kind, *flags)``: ``vitplast sweep`` of the tiny study of ``kind`` into a
    temporary store; returns the calls of the fake training step (each: runs, device)."""
    calls = []

    def fake(todo, device=None, progress=False, preparations=None):
        calls.append(([dict(r) for r in todo], device))
        return [_record(r) for r in todo]

    monkeypatch.setattr(runner, "run_lrs", fake)
    monkeypatch.setattr(runs, "_train_split", lambda key: 5000)  # no task loaded
    confound_runs = runs.grid(["digits"], ["head", "LN1"], [0.1, 1.0], [0, 1], **TINY)
    monkeypatch.setattr(confounds, "study_runs", lambda spec, root: confound_runs)
    monkeypatch.setattr(confounds, "measure_study_scales", lambda spec, root: None)
    for study in STUDIES.values():
        monkeypatch.setitem(studies.STUDIES, study.name, study)
    root = tmp_path / "store"

    def run(kind, *flags):
        calls.clear()
        for done in _GRID.runs() if kind == "budget" else []:  # its baselines, stored
            if not Store(root).has(done):
                Store(root).save(done, _record(done))
        extra = ["--data-root", str(tmp_path)] if kind == "paper" else []
        main(["sweep", "--study", STUDIES[kind].name, "--root", str(root), *extra, *flags])
        return calls

    run.root = root
    return run


def _trained(calls) -> list[dict]:
    return [r for todo, _ in calls for r in todo]


KINDS = list(STUDIES)


def test_every_kind_is_tested_and_takes_one_spec_type():
    """``studies.KINDS`` holds every kind, each by the spec type it takes; a spec of another
    type is refused when read."""
    assert {k.KIND for k in studies.KINDS.values()} == set(KINDS)
    assert set(studies.KINDS) == set(Spec.__args__)
    assert all(studies.KINDS[type(s.spec)] is type(s) for s in STUDIES.values())
    with pytest.raises(TypeError, match="a grid study, which takes a Grid spec; got a Search"):
        GridStudy("t", "wrong", "t", STUDIES["searched"].spec).spec
    assert {k for f in FLAGS for k in f.kinds} <= set(KINDS)  # a flag names real kinds only


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag, value, key", [
    ("--precision", "bf16", "precision"), ("--workers", "2", "workers"),
    ("--accum-steps", "2", "accum_steps"), ("--eval-every", "3", "eval_every")])
def test_run_keys_reach_every_trained_run(sweep_kind, kind, flag, value, key):
    trained = _trained(sweep_kind(kind, flag, value))
    assert trained and all(str(r[key]) == value for r in trained)


@pytest.mark.parametrize("kind", KINDS)
def test_device_reaches_the_training_step(sweep_kind, kind):
    calls = sweep_kind(kind, "--device", "cpu")
    assert calls and {device for _, device in calls} == {"cpu"}


@pytest.mark.parametrize("kind", KINDS)
def test_limit_trains_at_most_n_runs(sweep_kind, kind):
    assert len(_trained(sweep_kind(kind, "--limit", "1"))) == 1
    assert len(_trained(sweep_kind(kind, "--limit", "2"))) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_shard_takes_every_other_setting(sweep_kind, kind):
    first = _trained(sweep_kind(kind, "--shard", "0/2"))
    second = _trained(sweep_kind(kind, "--shard", "1/2"))
    assert first and second
    assert {setting(r) for r in first}.isdisjoint(setting(r) for r in second)
    everything = STUDIES[kind].runs(sweep_kind.root, _runtime(kind, sweep_kind.root))
    assert {runs.run_hash(r) for r in first + second} >= {runs.run_hash(r) for r in everything}
    assert not _trained(sweep_kind(kind))  # the two shards covered the study


def _runtime(kind, root, **flags):
    """The runtime ``sweep_kind`` sweeps ``kind`` with (the paper study's datasets), and
    ``flags``."""
    return Runtime(**(dict(data_root=str(root.parent)) if kind == "paper" else {}), **flags)


@pytest.mark.parametrize("kind", KINDS)
def test_order_is_honoured_or_refused(sweep_kind, kind, capsys):
    if kind == "searched":
        with pytest.raises(SystemExit):
            sweep_kind(kind, "--order", "grid")
        err = capsys.readouterr().err
        named = re.search(r"order \(--order\) applies to (.*) studies only; study "
                          "'t-searched' is a searched study", err)
        assert named and set(named[1].split(", ")) == {"grid", "budget", "paper", "confound"}
        return
    seeds = [r["seed"] for r in _trained(sweep_kind(kind, "--order", "grid", "--limit", "2"))]
    assert seeds == [0, 1]  # the grid's order: seed fastest
    seeds = [r["seed"] for r in _trained(sweep_kind(kind, "--limit", "2"))]
    assert seeds == [0, 0]  # seed-first (the default)


@pytest.mark.parametrize("kind", KINDS)
def test_retry_failed_re_runs_failed_records(sweep_kind, kind):
    (done,) = _trained(sweep_kind(kind, "--limit", "1"))
    Store(sweep_kind.root).save(done, _record(done, status="failed"))
    key = runs.run_hash(done)
    assert key not in {runs.run_hash(r) for r in _trained(sweep_kind(kind))}
    assert key in {runs.run_hash(r) for r in _trained(sweep_kind(kind, "--retry-failed"))}


@pytest.mark.parametrize("kind", KINDS)
def test_batch_lrs_hands_a_setting_s_lrs_over_together(sweep_kind, kind):
    assert max(len(todo) for todo, _ in sweep_kind(kind)) == 1
    sweep_kind.root.rename(sweep_kind.root.with_name("first"))  # again, into a new store
    calls = sweep_kind(kind, "--batch-lrs")
    assert max(len(todo) for todo, _ in calls) > 1
    assert all(len({setting(r) for r in todo}) == 1 for todo, _ in calls)


@pytest.mark.parametrize("kind", KINDS)
def test_status_trains_nothing_and_counts(sweep_kind, kind, capsys):
    assert not sweep_kind(kind, "--status")
    assert capsys.readouterr().out.splitlines()[-1].split()[0] == "all"


@pytest.mark.parametrize("kind", KINDS)
def test_the_submitit_executor_runs_the_jobs(sweep_kind, kind):
    pytest.importorskip("submitit")
    assert _trained(sweep_kind(kind, "--executor", "submitit", "--cluster", "debug"))
    assert (sweep_kind.root / "submitit").is_dir()  # submitit's job folder


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag", ["--data-root", "--weights-file"])
def test_paper_settings_are_the_paper_study_s(sweep_kind, kind, flag, tmp_path, capsys):
    if kind == "paper":
        trained = _trained(sweep_kind(kind, flag, str(tmp_path)))
        key = flag[2:].replace("-", "_")
        assert trained and all(r[key] == str(tmp_path) for r in trained)
        return
    with pytest.raises(SystemExit):
        sweep_kind(kind, flag, str(tmp_path))
    assert "applies to paper studies only" in capsys.readouterr().err


@pytest.mark.parametrize("kind", KINDS)
def test_a_hashed_flag_set_on_the_command_line_is_read_back(sweep_kind, kind, monkeypatch):
    """``vitplast sweep --eval-every 3`` (a hashed flag: runs other than the study's) stores
    runs that the notebooks' ``studies.get(name).load(root, runtime)`` with that runtime reads
    back whole; read with the default runtime, they are not the study's runs."""
    monkeypatch.setattr(confounds, "study_scales", lambda *a, **k: {})  # nothing measured
    monkeypatch.setattr(confound_plasticity, "layer_plasticity", lambda *a, **k: pd.DataFrame())
    monkeypatch.chdir(sweep_kind.root.parent)  # the tiny confound study's baselines' store
    trained = _trained(sweep_kind(kind, "--eval-every", "3"))
    assert trained and {r["eval_every"] for r in trained} == {3}
    study, root = studies.get(STUDIES[kind].name), sweep_kind.root
    swept = study.load(root, _runtime(kind, root, eval_every=3))
    plain = study.load(root, _runtime(kind, root))
    if kind == "searched":  # every task's search ended: a chosen run per setting
        assert len(swept.runs) == len(study.spec.tasks) * 2 and plain.runs.empty
        assert set(swept.runs["lr"]) == {0.3}
        return
    assert swept.coverage == {"expected": len(trained), "ok": len(trained)}
    mine = swept.runs[swept.runs["eval_every"] == 3]
    assert set(mine["run"]) == {runs.run_hash(r) for r in trained}
    assert plain.coverage == {"expected": len(trained), "missing": len(trained)}
