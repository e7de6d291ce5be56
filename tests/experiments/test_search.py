"""LR search: three LRs around the start, then half-decade steps until the best is interior."""

import math
from dataclasses import replace

import pytest

from vitplast import files
from vitplast.experiments import search, studies
from vitplast.experiments.runs import run_hash
from vitplast.experiments.runtime import Runtime
from vitplast.experiments.spec_types import Search


def _walk(start, accuracy):
    """Run the search against a known accuracy curve; return the LRs it tried, in order."""
    outcomes, order = {}, []
    while todo := search.next_lrs(start, outcomes):
        for lr in todo:
            order.append(lr)
            outcomes[lr] = (accuracy(lr), 0.0)
    return order, outcomes


def test_search_stops_at_once_when_the_start_is_best():
    order, outcomes = _walk(0.1, lambda lr: -abs(math.log10(lr / 0.1)))
    assert order == [0.03, 0.1, 0.3] and search.best(outcomes) == 0.1
    assert search.bracketed(outcomes)


def test_search_walks_to_a_far_optimum_and_brackets_it():
    order, outcomes = _walk(0.1, lambda lr: -abs(math.log10(lr / 10.0)))
    assert order == [0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0]
    assert search.best(outcomes) == 10.0 and search.bracketed(outcomes)
    order, _ = _walk(0.1, lambda lr: -abs(math.log10(lr / 3e-3)))
    assert order == [0.03, 0.1, 0.3, 0.01, 3e-3, 1e-3]


def test_search_stops_at_the_ladder_end_unbracketed():
    order, outcomes = _walk(30.0, lambda lr: lr)  # better and better: runs off the top
    assert order[-1] == 100.0 and search.next_lrs(30.0, outcomes) == []
    assert not search.bracketed(outcomes)


def test_ties_go_to_the_lower_validation_loss_then_the_smaller_lr():
    assert search.best({0.1: (0.9, -0.5), 0.3: (0.9, -0.4)}) == 0.3
    assert search.best({0.1: (0.9, -0.5), 0.3: (0.9, -0.5)}) == 0.1


def test_diverged_runs_score_below_every_finished_run():
    ok = dict(status="ok", best_val_acc=0.1, best_step=20,
              history=[dict(step=20, val_loss=2.0)])
    assert search.score(ok) == (0.1, -2.0)
    assert search.score(dict(status="diverged", best_val_acc=None)) == (-math.inf, -math.inf)
    order, outcomes = _walk(1.0, lambda lr: -math.inf if lr > 0.05 else lr)  # all diverge above
    assert order == [0.3, 1.0, 3.0, 0.1, 0.03, 0.01]
    assert search.best(outcomes) == 0.03 and search.bracketed(outcomes)


def test_lrs_off_the_ladder_are_refused():
    with pytest.raises(ValueError, match="not on the LR ladder"):
        search.next_lrs(0.2, {})


def test_a_search_round_that_loses_its_runs_ends_the_search_incomplete(tmp_path, monkeypatch):
    """A round whose runs come back not stored, and held by no live process (their jobs
    died), ends the search at once (what it asks next depends on them), its outcome counting
    them not stored; a round whose runs another live process holds is waited for instead."""
    from vitplast.experiments import sweep
    from vitplast.experiments.store import Store

    study = Search(tasks=("digits",), seeds=(0,), configs={"LN1": 0.3},
                   fixed=dict(steps=2, warmup_steps=1, eval_every=1))
    rounds = []
    monkeypatch.setattr(sweep, "_train", lambda todo, *a, **k: rounds.append(len(todo)) or 0)
    lost = search.run_search(study, tmp_path, runtime=Runtime(progress=False))
    assert rounds == [3] and lost.trained == 0 and not lost.complete
    assert lost.counts == dict(ok=0, diverged=0, failed=0, missing=3)
    assert lost.table["lr"].tolist() == [0.1, 0.3, 1.0]
    assert lost.says() == ("incomplete: 3 of 3 runs not stored, 0 stored failed (0 ok, 0 "
                           "diverged); to resume: the same sweep")
    held = []  # another live process holds the first round's claims, then stores them
    monkeypatch.setattr(Store, "claimed", lambda self: held.append(1) or (
        {run_hash(r) for r in search.search_runs(study, tmp_path)} if len(held) == 1 else set()))
    monkeypatch.setattr("time.sleep", lambda s: [Store(tmp_path).save(r, _ok(r))
                                                 for r in search.search_runs(study, tmp_path)])
    waited = search.run_search(study, tmp_path, runtime=Runtime(progress=False))
    assert rounds[1] == 3 and waited.complete and waited.trained == 0


def _ok(run):
    acc = {0.1: 0.5, 0.3: 0.7, 1.0: 0.6}[run["lr"]]
    return dict(status="ok", best_val_acc=acc, best_step=1, test_acc=acc,
                history=[dict(step=0, loss=2.0), dict(step=1, loss=1.0, val_loss=1.0)])


def test_search_resumes_from_the_store_and_reuses_identical_runs(tmp_path, monkeypatch):
    from vitplast.experiments import runner, runs
    from vitplast.experiments.store import Store

    study = Search(tasks=("digits",), seeds=(0,), configs={"LN1": 0.3, "MHA sparse": 1.0},
                   fixed=dict(steps=2, warmup_steps=1, eval_every=1))
    first = search.search_runs(study, tmp_path / "a")
    assert [r["lr"] for r in first] == [0.1, 0.3, 1.0, 0.3, 1.0, 3.0]
    assert first[3]["prepare"] == "sparse" and first[3]["ablation"]["count"] == 1536
    acc = {0.1: 0.5, 0.3: 0.7, 1.0: 0.8, 3.0: 0.6, 10.0: 0.1}

    def fake(run, **kwargs):  # a record whose best_val_acc follows ``acc``
        rise = 2.5 if run.get("prepare") != "sparse" else 1.5  # LN1's loss rises above 2.0
        return dict(run=run, status="ok", best_val_acc=acc[run["lr"]], best_step=1,
                    history=[dict(step=0, loss=2.0), dict(step=1, loss=rise, val_loss=1.0)],
                    test_acc=acc[run["lr"]])

    monkeypatch.setattr(runner, "run_lrs", lambda runs, **kwargs: [fake(r) for r in runs])
    Store(tmp_path / "b").save(first[0], fake(first[0]))  # another store holds one run
    Store(tmp_path / "a").save(first[1], dict(fake(first[1]), status="failed"))
    todo = Store(tmp_path / "a").plan(first, sources=[tmp_path / "b"])  # copies first[0]
    assert [r for r, _ in todo] == first[2:] and Store(tmp_path / "a").has(first[0])
    assert (Store(tmp_path / "a").path(first[0]).read_bytes()
            == Store(tmp_path / "b").path(first[0]).read_bytes())
    quiet = Runtime(progress=False)
    waits = search.run_search(study, tmp_path / "a", runtime=quiet)  # the failed run waits
    assert search.state(study, tmp_path / "a")["next"].tolist()[0] == [0.3]
    assert not waits.complete and waits.counts["failed"] == 1 and waits.counts["missing"] == 0
    assert waits.table.loc[waits.table["status"] == "failed", "lr"].tolist() == [0.3]
    retried = search.run_search(study, tmp_path / "a",
                                runtime=Runtime(progress=False, retry_failed=True))
    assert retried.complete and retried.counts["failed"] == 0
    state = search.state(study, tmp_path / "a")
    assert state["tried"].tolist() == [[0.1, 0.3, 1.0, 3.0], [0.3, 1.0, 3.0]]
    assert state["best"].tolist() == [1.0, 1.0] and state["bracketed"].all()
    assert state["loss_rose"].tolist() == [1.0, 0.0]
    assert len(search.search_runs(study, tmp_path / "a")) == 7
    assert all(Store(tmp_path / "a").has(r) for r in search.search_runs(study, tmp_path / "a"))
    assert files.read_json(Store(tmp_path / "a").path(first[1]))["status"] == "ok"  # re-run
    # a search whose every run another store holds is copied to its end, training nothing
    copied = tmp_path / "c"
    nothing = search.run_search(study, copied, sources=[tmp_path / "a"], runtime=quiet)
    assert nothing.trained == 0 and nothing.complete
    assert search.state(study, copied)["tried"].tolist() == state["tried"].tolist()
    assert runs.run_hash(first[0]) == runs.run_hash({**first[0], "precision": "fp32"})


def test_the_suite_study_is_declared_with_three_primaries():
    study = studies.get("suite")
    p1, p2, p3 = study.primaries
    assert (p1.a, p1.b) == (("MHA sparse", "FC1 sparse", "FC2 sparse"), ("LN1", "LN2"))
    assert (p2.a, p2.b, round(p2.paper, 2)) == (("MHA",), ("LN1",), 0.93)
    assert p3.statistic == "spearman(plasticity, gain)"
    assert len(study.spec.tasks) == 33 and study.spec.seeds == (0,)
    assert all(lr in search.LR_LADDER for lr in study.spec.configs.values())
    assert study.KIND == "searched"


def test_settings_take_run_keywords_and_a_fixed_grid_joins_the_search(tmp_path):
    study = Search(tasks=("digits",), seeds=(0,), grid=(1e-3, 0.01),
                   configs={"LN1": 0.3, "LN1 x2": dict(config="LN1", prepare="rescale_ln",
                                                       start=0.3,
                                                       ablation=dict(component="LN1", c=2.0))})
    named = search.settings(study)
    assert [s["name"] for s in named] == ["LN1", "LN1 x2"]
    assert named[1]["prepare"] == "rescale_ln" and named[1]["start"] == 0.3
    asked = search.search_runs(study, tmp_path)
    assert [r["lr"] for r in asked] == [1e-3, 0.01, 0.1, 0.3, 1.0] * 2
    assert asked[5]["ablation"] == dict(component="LN1", c=2.0) and "name" not in asked[5]


def test_the_cross_gauge_study_is_declared_and_shares_the_suite_runs():
    from vitplast.experiments import runs

    gauge, study = studies.get("gauge"), studies.get("gauge").spec
    assert len(study.tasks) == 17 and set(study.tasks) <= set(studies.get("suite").spec.tasks)
    assert len(gauge.primaries) == 3 and gauge.KIND == "searched"
    named = {s["name"]: s for s in search.settings(replace(study, tasks=("digits_rotate90",)))}
    assert named["MHA c=8"]["prepare"] == "gauge" and named["MHA c=8"]["ablation"] == {"c": 8.0}
    suite = {s["name"]: s for s in search.settings(replace(studies.get("suite").spec,
                                                           tasks=("digits_rotate90",)))}
    for name in ("head", "LN1", "MHA", "FC2"):  # c = 1: the suite study's runs, same hashes
        assert runs.run_hash(search._run(named[name], 0.1)) == runs.run_hash(
            search._run(suite[name], 0.1))


def test_a_grid_runs_after_every_task_s_search(tmp_path, monkeypatch):
    from vitplast.experiments import runner

    study = Search(tasks=("digits", "fmnist_contrast"), seeds=(0,), grid=(1e-3, 0.3),
                   configs={"LN1": 0.3}, fixed=dict(steps=2, warmup_steps=1, eval_every=1))
    acc = {1e-3: 0.9, 0.1: 0.5, 0.3: 0.7, 1.0: 0.6}  # the grid's 1e-3 beats the search's best
    trained = []

    def fake(runs, **kwargs):
        trained.extend((r["task"], r["lr"]) for r in runs)
        return [dict(run=r, status="ok", best_val_acc=acc.get(r["lr"], 0.1), best_step=1,
                     history=[dict(step=1, val_loss=1.0)], test_acc=0.5) for r in runs]

    monkeypatch.setattr(runner, "run_lrs", fake)
    search.run_search(study, tmp_path, runtime=Runtime(progress=False))
    searched = [(t, lr) for t in study.tasks for lr in (0.1, 0.3, 1.0)]
    assert sorted(trained[:6]) == sorted(searched)  # both searches before any grid run
    assert set(trained[6:]) >= {("digits", 1e-3), ("fmnist_contrast", 1e-3)}
    state = search.state(study, tmp_path)  # the grid joined: its best asks for 3e-4 too
    assert state["best"].tolist() == [1e-3, 1e-3] and state["bracketed"].all()
    assert all(3e-4 in tried for tried in state["tried"])
    on_grid = search.state(study, tmp_path, grid=True)  # chosen among the grid's LRs only
    assert on_grid["best"].tolist() == [1e-3, 1e-3] and on_grid["next"].map(len).eq(0).all()
    assert all(tried == [1e-3, 0.3] for tried in on_grid["tried"])
    more = search.state(replace(study, grid=(1e-3, 0.3, 3e-2)), tmp_path, grid=True)
    assert more["next"].tolist() == [[3e-2], [3e-2]]  # a grid run not stored yet is asked for
