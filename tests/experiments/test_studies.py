"""Studies: the one registry, their runs, the budget check's LRs, reading a study from a store."""

import dataclasses
from dataclasses import replace

import pandas as pd
import pytest

from vitplast import files
from vitplast.experiments import results, runs, spec_types, studies
from vitplast.experiments.kinds import Study, budget_runs, grid_runs
from vitplast.experiments.runs import run_hash
from vitplast.experiments.runtime import Runtime
from vitplast.experiments.store import Store
from vitplast.report import finetuning_tables


def test_unknown_study_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown study 'mian'; valid: \\['main', 'main-smoke', "
                       "'budget', 'confounds', 'confounds-smoke', 'suite', 'gauge', 'length', "
                       "'real', 'real-paper', 'paper'\\]"):
        studies.get("mian")


def test_each_study_is_a_value_of_its_kind():
    """The kind is the type: one way to tell a study's kind, and each kind loads one way."""
    kinds = {name: type(s).__name__ for name, s in studies.STUDIES.items()}
    assert kinds == dict(main="GridStudy", budget="BudgetStudy", confounds="ConfoundStudy",
                         suite="SearchedStudy", gauge="SearchedStudy", length="SearchedStudy",
                         real="SearchedStudy", **{"real-paper": "SearchedStudy"},
                         paper="PaperStudy", **{"main-smoke": "GridStudy",
                                                "confounds-smoke": "ConfoundStudy"})
    assert isinstance(studies.get("main").spec, spec_types.Grid)
    assert isinstance(studies.get("suite").spec, spec_types.Search)
    with pytest.raises(dataclasses.FrozenInstanceError):
        studies.get("main").spec.tasks = ("digits",)


def test_the_registry_imports_no_torch():
    """The CLI builds ``--study``'s help and choices from the registry: importing it (and
    describing every study) loads no torch, in a fresh interpreter."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom vitplast.experiments import studies\n"
            "[s.describe() for s in studies.STUDIES.values()]\n"
            "print('torch' in sys.modules)\n")
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["False"]


def test_a_smoke_study_is_derived_from_its_full_study():
    """The smoke versions replace a few fields of their full study's spec and keep the rest
    (primaries included); they go to the cache and compare with their baselines' smoke."""
    for name in ("main", "confounds"):
        full, smoke = studies.get(name), studies.get(f"{name}-smoke")
        assert smoke == studies.smoke(full) and type(smoke) is type(full)
        assert smoke.primaries == full.primaries and smoke.spec != full.spec
        assert not smoke.shipped and smoke.root() == files.cache_dir() / f"{full.folder}-smoke"
    assert studies.get("confounds-smoke").spec.target == studies.get("confounds").spec.target
    assert studies.get("confounds-smoke").baselines == studies.get("main-smoke")
    assert len(studies.get("main-smoke").runs()) == 7 * 2  # seconds long
    assert studies.get("main-smoke").budget == "" and studies.get("main").budget == "BUDGET"
    with pytest.raises(ValueError, match="no smoke version"):
        studies.smoke(studies.get("suite"))


def test_there_is_one_study_registry():
    """``STUDIES`` is the only module-level collection of studies (or of study specs keyed
    by name) anywhere in the package."""
    import importlib
    import pkgutil

    import vitplast

    found = []
    for info in pkgutil.walk_packages(vitplast.__path__, "vitplast."):
        module, name = importlib.import_module(info.name), info.name.split(".")[-1]
        for attr, value in vars(module).items():
            if isinstance(value, Study):
                found.append(f"{name}.{attr}")
            values = (list(value.values()) if isinstance(value, dict)
                      else list(value) if isinstance(value, (list, tuple)) else [])
            if any(isinstance(v, Study) for v in values) or (
                    isinstance(value, dict) and value and set(value) <= set(studies.STUDIES)
                    and all(isinstance(v, dict) for v in value.values())):
                found.append(f"{name}.{attr}")
    assert found == ["studies.STUDIES"]
    assert all(name == study.name for name, study in studies.STUDIES.items())
    assert all(studies.get(s.baselines.name) == s.baselines
               for s in studies.STUDIES.values() if s.baselines)


def test_budget_runs_take_the_chosen_lr_and_its_grid_neighbours():
    rows = []
    main = studies.get("main")
    for config, lrs in main.spec.lrs.items():
        best = lrs[0] if config == "head" else lrs[3]  # head at its grid's bottom edge
        for c in grid_runs(replace(main.spec, tasks=("digits",), lrs={config: lrs})):
            rows.append(dict(run=runs.run_hash(c), task=c["task"], config=config, lr=c["lr"],
                             seed=c["seed"], status="ok", test_acc=0.5,
                             best_val_acc=0.9 if c["lr"] == best else 0.5))
    budget = budget_runs(pd.DataFrame(rows), main, studies.get("budget").spec)
    got = {}
    for c in budget:
        got.setdefault(c["config"], set()).add(c["lr"])
        assert c["steps"] == 480 and c["task"] == "digits"
    for config, lrs in main.spec.lrs.items():
        assert got[config] == (set(lrs[:2]) if config == "head" else set(lrs[2:5]))


def test_load_reads_only_the_study_runs_of_a_store(tmp_path):
    study = studies.get("main-smoke")
    smoke = study.runs()
    for c in smoke[:3]:
        Store(tmp_path).save(c, dict(status="ok", test_acc=0.5, best_val_acc=0.5,
                                     history=[dict(step=0, loss=1.0)]))
    other = runs.make_run("digits", "MHA", lr=7.0)
    Store(tmp_path).save(other, dict(status="ok", test_acc=0.5, best_val_acc=0.5,
                                     history=[dict(step=0, loss=1.0)]))
    s = study.load(str(tmp_path))
    assert len(s.runs) == 3 and s.coverage == {"expected": len(smoke), "ok": 3,
                                               "missing": len(smoke) - 3}
    assert s.budget.empty and s.root == str(tmp_path)


def test_shipped_results_are_the_complete_study():
    """The shipped records are exactly the main study's runs and its budget check's (run
    hashes did not drift), each finished, each from a new head, on grids that bracket every
    chosen LR and every LR band."""
    shipped = results.records_table(studies.get("main").root())
    main = {run_hash(c) for c in studies.get("main").runs()}
    assert len(main) == 7 * 3 * (9 + 10 + 10 + 9 + 10 + 9 + 9)  # per configuration its LRs
    budget = {run_hash(c) for c in studies.get("budget").runs()}
    assert 2 * 7 * 2 * 3 <= len(budget) <= 2 * 7 * 3 * 3  # the chosen LR and 1-2 neighbours
    assert set(shipped["run"]) == main | budget
    assert shipped["status"].isin(["ok", "diverged"]).all()
    # every run started from a new head: before any update, about chance on 10 classes
    assert shipped["initial_val_acc"].max() <= 0.3
    # the grid brackets every best LR and every band within 1 and 2 points of it
    runs = shipped[shipped["run"].isin(main)]
    assert not finetuning_tables.main_table(runs)["lr_at_edge"].any()
    assert finetuning_tables.lr_bands(runs)["bracketed"].all()


@pytest.mark.parametrize("study", ["finetune", "confounds"])
def test_shipped_runs_table_agrees_with_the_shipped_records(study):
    """``runs.csv``, written at the end of each sweep session, lists only stored runs, with
    their stored status and accuracies (it may lag the records of a session cut short)."""

    root = {"finetune": studies.get("main").root(),
            "confounds": studies.get("confounds").root()}[study]
    stored = results.records_table(root).set_index("run")
    if not (root / "runs.csv").exists():  # a store no session has filled yet
        assert stored.empty
        return
    table = pd.read_csv(root / "runs.csv").set_index("run")
    assert len(table) > 0 and table.index.isin(stored.index).all()
    for column in ("status", "test_acc", "best_val_acc", "seconds"):
        pd.testing.assert_series_equal(table[column], stored.loc[table.index, column],
                                       check_dtype=False)


def test_a_study_lists_its_runs_from_its_spec_and_runtime():
    assert studies.get("main").runs("unused") == grid_runs(studies.get("main").spec)
    assert studies.get("main").root() == files.results_root("finetune")
    paper = studies.get("paper").runs(None, Runtime(data_root="/data",
                                                    weights_file="w.safetensors"))
    assert len(paper) == 11 * 7 * 4 * 3 and {r["steps"] for r in paper} == {4_000, 5_000,
                                                                          10_000, 20_000}
    domainnet = {r["lr"] for r in paper if r["task"].startswith("domainnet")}
    assert domainnet == set(studies.get("paper").spec.lrs_domainnet)
    assert {r["weights_file"] for r in paper} == {"w.safetensors"}
    with pytest.raises(ValueError, match="paper study needs data_root"):
        studies.get("paper").check(Runtime())
    with pytest.raises(ValueError, match=r"data_root \(--data-root\) applies to paper studies "
                       "only; study 'main' is a grid study"):
        studies.get("main").check(Runtime(data_root="/data"))


#: The searched studies' shipped stores: (study, settings, complete). A store still filling is
#: a strict xfail: its test fails the day the store is complete, to drop the mark.
SEARCHED = {"suite": 33 * 9, "length": 4 * 6 * 2, "gauge": 17 * 10}
FILLING: set[str] = set()


@pytest.mark.parametrize("name", SEARCHED)
def test_shipped_searched_records_are_runs_of_their_study(name):
    """What a searched study's store holds (complete or not) is what its search asked for:
    every record is a run of a setting of the study on the ladder (or its fixed grid),
    finished (ok or diverged), from a new head; identical runs of the stores it reuses are
    their records, copied."""
    study = studies.get(name)
    root = study.root()
    asked = {run_hash(r) for r in study.runs(root)}
    records = Store(root).records()
    assert records, f"the {name} store is empty"
    assert {run_hash(r["run"]) for r in records} <= asked
    assert {r["status"] for r in records} <= {"ok", "diverged"}
    assert max(r["initial_val_acc"] for r in records) <= 0.6  # chance: 1/26 .. 1/2
    for r in records:  # a copied record is byte for byte its source's
        for source in (files.results_root(s) for s in study.spec.reuse):
            if Store(source).has(r["run"]):
                assert files.read_json(Store(source).path(r["run"])) == r


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason="being filled: see its README")) if n in FILLING else n
    for n in SEARCHED])
def test_shipped_searched_results_are_the_complete_study(name):
    """Every setting of the study searched to its end, with its best LR interior, and every
    run of its fixed grid (if it has one) stored."""
    from vitplast.experiments import search

    study = studies.get(name)
    state = search.state(study.spec, study.root())
    assert len(state) == SEARCHED[name]
    assert (state["next"].map(len) == 0).all() and state["bracketed"].all()
    assert all(Store(study.root()).has(r) for r in study.runs())
    assert len(study.load().runs) == SEARCHED[name]  # every task complete: every row chosen
