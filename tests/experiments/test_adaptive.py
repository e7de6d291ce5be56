"""The adaptive kinds: a searched study reads back only its complete tasks, from one read of
its store; a confound study compares with its baselines on its parts' tasks."""

from vitplast.experiments import search, studies
from vitplast.experiments.adaptive import SearchedStudy
from vitplast.experiments.spec_types import Search
from vitplast.experiments.store import Store


def test_a_searched_study_loads_its_complete_tasks_only(tmp_path, monkeypatch):
    spec = Search(tasks=("digits", "fmnist_contrast"), seeds=(0,), configs={"head": 0.3},
                  fixed=dict(steps=2, warmup_steps=1, eval_every=1))
    study = SearchedStudy("t", "a tiny search", "t", spec, place=".")
    acc = {0.1: 0.5, 0.3: 0.7, 1.0: 0.6}
    for run in search.search_runs(spec, tmp_path):
        if run["task"] == "digits":  # one task searched to its end, the other not begun
            Store(tmp_path).save(run, dict(run=run, status="ok", best_val_acc=acc[run["lr"]],
                                           best_step=1, test_acc=0.5,
                                           history=[dict(step=1, val_loss=1.0)]))
    reads = []
    real = Store.records
    monkeypatch.setattr(Store, "records", lambda self: reads.append(1) or real(self))
    chosen = study.load(tmp_path).runs
    assert chosen["task"].tolist() == ["digits"] and chosen["lr"].tolist() == [0.3]
    assert chosen["val_acc"].tolist() == [70.0] and len(reads) == 1  # the store read once
    assert search.complete_tasks(search.state(spec, tmp_path)) == ["digits"]


def test_a_confound_study_compares_with_its_baselines_on_its_tasks():
    study = studies.get("confounds")
    tasks = {t for part in study.spec.parts for t in part.tasks}
    baselines = study.baseline_runs()
    assert {r["task"] for r in baselines} == tasks
    assert {r["config"] for r in baselines} == set(studies.get("main").spec.lrs)
