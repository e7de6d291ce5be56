"""Studies: the named sets of finetuning runs that the notebooks read and the CLI runs.

Paper: section 5 (the main table, Fig. 18) on the embedded default, and the paper's own grid.
A study is a value (``Study``): its name, a one-line purpose, its results store, how its runs
are made from its ``spec`` (a ``runs.grid`` preset, the confound study's parts, or a
searched-LR preset of ``vitplast.search``), the study its runs are compared with, and its
declared primary questions. ``STUDIES`` is the one registry, looked up by ``get(name)`` (the
CLI's ``vitplast sweep --study NAME``, the notebooks' ``study`` parameter); unknown names fail
naming the valid ones. A study with a ``smoke`` setting has a seconds-long version derived
from it, ``smoke(study)``, registered as ``<name>-smoke`` (the smoke profile). The LR-tuning
diary of each study is prose in its store's ``README.md``. The specs and primaries themselves
are values of ``vitplast.study_specs``.

- ``main``: notebook 04's main study, stored in ``data/finetune/`` (``runs_of``).
- ``budget``: the budget-sensitivity check of notebook 04 (every configuration at 4x the
  steps, at its chosen LR of the main study and that LR's two grid neighbours), stored with
  the main study. Its LRs depend on the main study's results: ``budget_runs``.
- ``confounds``: notebook 05's confound study (``confounds.study_runs``).
- ``suite``, ``gauge``, ``length``: the searched-LR studies of notebook 07.
- ``paper``: the paper's own grid (ViT-B/16 in21k, its 11 datasets): ``paper_runs``.

A study declares its primary questions (``primaries``: at most three ``verdicts.Primary``,
each with its direction, the paper's value and its source); the findings tables test them
with Holm over the primaries only, everything else is exploratory.

Used by the CLI (``python -m vitplast sweep``), notebooks 04-07 and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from vitplast import models, paper_datasets, runs
from vitplast import study_specs as specs
from vitplast.experiments.search import LR_LADDER  # noqa: F401 (re-exported)
from vitplast.experiments.study_specs import ladder  # noqa: F401 (re-exported)
from vitplast.report.verdicts import MAX_PRIMARIES, Primary

#: Where a study's store is: ``data`` (shipped: ``models.results_root``), ``cache``
#: (``models.cache_dir``) or ``.`` (relative to the working directory).
PLACES = ("data", "cache", ".")


@dataclass(frozen=True)
class Study:
    """A named study (``STUDIES``): what it is, where it is stored and how its runs are made.

    Attributes:
        name: its name in ``STUDIES`` (``--study``, the notebooks' ``study``).
        purpose: one line: what it is, for the CLI's help.
        store: its results store's folder, under ``place``.
        place: where ``store`` is (``PLACES``); ``data`` stores are shipped (a checkout's
            ``data/``), which the CLI writes into only where their parent folder exists.
        make: how its runs are made: ``make(study, root, **options)``, given the store it goes
            to (the budget check reads the main study's results there, the confound study its
            LayerNorm scales, a searched study how far its search has gone).
        spec: what ``make`` reads: a ``runs_of`` grid, the confound study's parts
            (``confounds.study_runs``) or a ``vitplast.search`` preset.
        baselines: the study whose runs it is compared with or builds on (the confound
            study's plain SGD runs, the budget check's chosen LRs); empty: none.
        primaries: its declared primary questions (at most ``MAX_PRIMARIES``).
        searched: its LRs are searched (``search.run_search`` over ``spec``): its runs are
            known only as far as the search has gone.
        options: keyword settings its runs take (the paper study's ``data_root``).
        smoke: the ``spec`` entries its seconds-long version replaces (``smoke(study)``);
            empty: it has none.
    """

    name: str
    purpose: str
    store: str
    make: Callable[..., list[dict]]
    spec: dict
    place: str = "data"
    baselines: str = ""
    primaries: tuple[Primary, ...] = ()
    searched: bool = False
    options: tuple[str, ...] = ()
    smoke: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.place not in PLACES:
            raise ValueError(f"study {self.name!r}: place {self.place!r}; valid: {list(PLACES)}")
        if len(self.primaries) > MAX_PRIMARIES:
            raise ValueError(f"study {self.name!r} declares {len(self.primaries)} primaries; "
                             f"at most {MAX_PRIMARIES}")

    @property
    def shipped(self) -> bool:
        """Its store is a shipped one (``data/<store>``)."""
        return self.place == "data"

    def root(self, recompute: bool = False) -> Path:
        """Its store (followed from ``$VITPLAST_DATA`` and ``$VITPLAST_CACHE`` when called);
        with ``recompute``, a shipped study's cache copy ``<cache>/<store>-<name>`` instead, so
        that a notebook never writes into a shipped store."""
        if self.place == "cache" or (recompute and self.shipped):
            return models.cache_dir() / (f"{self.store}-{self.name}" if self.shipped
                                         else self.store)
        return models.results_root(self.store) if self.shipped else Path(self.store)

    def describe(self) -> str:
        """One line for the CLI's help: its name, purpose and store."""
        where = {"data": "data/", "cache": ".cache/", ".": ""}[self.place] + self.store
        return f"{self.name}: {self.purpose}, into {where}"


def smoke(study: Study) -> Study:
    """The seconds-long version of ``study`` (the smoke profile): its ``spec`` with the entries
    of ``study.smoke`` replaced, stored in the cache as ``<store>-smoke``, compared with the
    smoke version of its baselines."""
    if not study.smoke:
        raise ValueError(f"study {study.name!r} has no smoke version")
    return replace(study, name=f"{study.name}-smoke", store=f"{study.store}-smoke",
                   purpose=f"a seconds-long {study.name} study (the smoke profile)",
                   place="cache", spec={**study.spec, **study.smoke}, smoke={},
                   baselines=f"{study.baselines}-smoke" if study.baselines else "")


def runs_of(spec: dict, **fixed) -> list[dict]:
    """Every run of a grid ``spec`` (such as the main study's): per configuration its
    LRs (``lrs``: configuration -> LRs), x tasks x seeds, ordered task > config > lr > seed;
    the spec's ``fixed`` keywords (e.g. steps) and ``fixed`` go to every run."""
    fixed = {**spec.get("fixed", {}), **fixed}
    return [run for task in spec["tasks"] for config, lrs in spec["lrs"].items()
            for run in runs.grid([task], [config], lrs, spec["seeds"], **fixed)]


def _grid(study: Study, root) -> list[dict]:
    return runs_of(study.spec)


def _budget(study: Study, root) -> list[dict]:
    from vitplast import results

    return budget_runs(results.records_table(root), study)


def _confound(study: Study, root) -> list[dict]:
    from vitplast import confounds

    return confounds.study_runs(study.spec, root)


def _searched(study: Study, root) -> list[dict]:
    from vitplast import search

    return search.search_runs(study.spec, root)


def _paper(study: Study, root, **options) -> list[dict]:
    return paper_runs(**options, study=study)


def _registry(*full: Study) -> dict[str, Study]:
    """Name -> study: each study, then its smoke version where it has one."""
    return {s.name: s for study in full for s in (study, *([smoke(study)] if study.smoke
                                                           else []))}


#: Every study by name: the CLI's ``--study`` and the notebooks' ``study``.
STUDIES = _registry(
    Study("main", "notebook 04's main study", "finetune", _grid, specs.MAIN,
          primaries=specs.MAIN_PRIMARIES, smoke=specs.MAIN_SMOKE),
    Study("budget", "notebook 04's 4x-steps check of the main study, stored with it (it reads it)",
          "finetune", _budget, specs.BUDGET, baselines="main"),
    Study("confounds", "notebook 05's confound study", "confounds", _confound, specs.CONFOUNDS,
          baselines="main", primaries=specs.CONFOUND_PRIMARIES, smoke=specs.CONFOUNDS_SMOKE),
    Study("suite", "the decisive study on the 33-task suite, LRs searched", "suite", _searched,
          specs.SUITE, primaries=specs.SUITE_PRIMARIES, searched=True),
    Study("gauge", "the cross-gauge study: 5 configurations at c = 1 and c = 8 on 17 suite "
          "tasks, LRs searched", "gauge", _searched, specs.GAUGE, primaries=specs.GAUGE_PRIMARIES,
          searched=True),
    Study("length", "the suite study's recipe-length check: P1 and P2's configurations at 2x "
          "and 4x the steps on 4 tasks, LRs searched", "suite_length", _searched, specs.LENGTH,
          searched=True),
    Study("paper", "ViT-B/16 in21k on the 11 paper datasets under --data-root, the paper's "
          "grid", "results/paper", _paper, specs.PAPER, place=".",
          options=("data_root", "weights_file")))


def get(name: str) -> Study:
    """The study ``name`` of ``STUDIES``; unknown names fail naming the valid ones."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; valid: {list(STUDIES)}")
    return STUDIES[name]


#: Where the shipped stores of the main and suite studies are (one JSON per run); set from
#: ``$VITPLAST_DATA`` at import, like ``confounds.EMBEDDED_RESULTS``.
MAIN_RESULTS = get("main").root()
SUITE_RESULTS = get("suite").root()


def sweep_runs(name: str, root: str | Path | None = None, **options) -> list[dict]:
    """Every run of study ``name`` for the store ``root`` (default: the study's): the budget
    check reads the main study's results there, the confound study its LayerNorm scales.
    ``options``: the settings the study takes (the paper study's ``data_root`` and
    ``weights_file``); ``None`` values are left out."""
    study = get(name)
    options = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(options) - set(study.options))
    if extra:
        takers = [s.name for s in STUDIES.values() if set(extra) <= set(s.options)]
        raise ValueError(f"{extra} are settings of the {' / '.join(takers)} study only")
    return study.make(study, study.root() if root is None else root, **options)


def _of_kind(name: str, make: Callable, kind: str) -> Study:
    """The study ``name``, which must make its runs with ``make``; else fail naming those that
    do."""
    study = get(name)
    if study.make is not make:
        raise ValueError(f"study {name!r} is not a {kind}; these are: "
                         f"{[s.name for s in STUDIES.values() if s.make is make]}")
    return study


@dataclass
class StudyResults:
    """What a finetuning study's store holds: ``runs`` (``results.records_table`` rows of the
    study's runs), ``budget`` (rows of its budget check; empty for studies without one),
    ``coverage`` (expected runs by status) and the store's ``root``."""

    runs: pd.DataFrame
    budget: pd.DataFrame
    coverage: dict
    root: str


def load(name: str = "main", results_dir: str = "", recompute: bool = False) -> StudyResults:
    """Read (or, with ``recompute``, first run or resume) a finetuning study.

    The store is ``results_dir`` if given, else the study's (``Study.root``: the shipped
    ``data/finetune`` for ``main``, read only; its cache copy when recomputing). Used by
    notebooks 04-06.
    """
    from vitplast import results, sweep

    study = _of_kind(name, _grid, "finetuning study")
    root = results_dir or str(study.root(recompute))
    expected = runs_of(study.spec)
    if recompute:
        sweep.run_sweep(expected, root)
    stored = results.records_table(root)
    hashes = {runs.run_hash(c) for c in expected}
    in_study = stored[stored["run"].isin(hashes)] if len(stored) else stored
    budget = stored.iloc[:0]
    checks = [s for s in STUDIES.values() if s.make is _budget and s.baselines == name]
    if checks and len(in_study):
        budget_hashes = {runs.run_hash(c) for c in budget_runs(stored, checks[0])}
        budget = stored[stored["run"].isin(budget_hashes)]
    return StudyResults(in_study, budget, results.coverage(in_study, expected), root)


@dataclass
class ConfoundResults:
    """What a confound study's store holds: ``runs`` (``results.records_table`` rows of the study's
    runs and of its plain SGD baselines, with ``confounds.with_variant``'s ``variant``; only
    the (task, variant) settings whose every run is stored: ``confounds.complete_settings``),
    ``coverage`` (expected runs by status), ``scales`` (``confounds.study_scales``),
    ``layers`` (``confounds.layer_plasticity`` of the per-layer tasks), ``after``
    (``confounds.plasticity_after`` of the runs it measures) and the two stores."""

    runs: pd.DataFrame
    coverage: dict
    scales: dict
    layers: pd.DataFrame
    after: pd.DataFrame
    root: str
    main_root: str


def confound_baselines(study: Study) -> list[dict]:
    """The plain SGD runs a confound study compares with: its baselines study's runs on the
    tasks of its parts."""
    tasks = {t for part in study.spec["parts"] for t in part["tasks"]}
    return [r for r in runs_of(get(study.baselines).spec) if r["task"] in tasks]


def load_confounds(name: str = "confounds", results_dir: str = "", main_results_dir: str = "",
                   recompute: bool = False) -> ConfoundResults:
    """Read (or, with ``recompute``, first run or resume) a confound study and its baselines.

    The stores are ``results_dir`` / ``main_results_dir`` if given, else the study's and its
    baselines' (``Study.root``: the shipped ``data/confounds`` and ``data/finetune``, read
    only; their cache copies when recomputing). Used by notebook 05.
    """
    from vitplast import confounds, results, sweep

    study = _of_kind(name, _confound, "confound study")
    spec = study.spec
    root = results_dir or str(study.root(recompute))
    main_root = main_results_dir or str(get(study.baselines).root(recompute))
    if recompute:  # its runs are listed from its LayerNorm scales: measured first
        confounds.measure_study_scales(spec, root)
    expected, baselines = confounds.study_runs(spec, root), confound_baselines(study)
    if recompute:
        sweep.run_sweep(baselines, main_root)
        sweep.run_sweep(expected, root)
    df = results.records_table(root, main_root)
    hashes = {runs.run_hash(c) for c in expected + baselines}
    df = confounds.with_variant(df[df["run"].isin(hashes)] if len(df) else df)
    cover = results.coverage(df, expected)
    after = [confounds.plasticity_after(r, root, spec["after"]["n_pairs"], compute=recompute)
             for r in confounds.after_runs(df, spec, baselines)]  # df holds the baselines
    layer_tasks = [p for p in spec["parts"] if p["name"] == "per layer"][0]["tasks"]
    return ConfoundResults(
        confounds.complete_settings(df, expected + baselines), cover, confounds.study_scales(
            root, spec["scale_tasks"], target=spec["target"], n_pairs=spec["n_pairs"]),
        confounds.layer_plasticity(root, layer_tasks, spec["n_pairs"]),
        pd.concat(after, ignore_index=True) if after
        else pd.DataFrame(columns=confounds.AFTER_COLUMNS), root, main_root)


def budget_runs(main: pd.DataFrame, study: Study | None = None) -> list[dict]:
    """The budget-sensitivity runs (of ``study``, default ``budget``), given its baselines
    study's ``results`` table ``main``: on each task of ``study``, each configuration at the
    LR chosen on validation in the main study and its two neighbours on that configuration's
    grid."""
    from vitplast import results

    study = study or get("budget")
    grid_spec, spec = get(study.baselines).spec, study.spec
    in_main = {runs.run_hash(c) for c in runs_of(grid_spec)}
    chosen = results.select_lr(main[main["run"].isin(in_main) & main["task"].isin(spec["tasks"])])
    fixed = {k: spec[k] for k in ("steps", "warmup_steps", "eval_every")}
    out = []
    for row in chosen.itertuples():
        grid = grid_spec["lrs"][row.config]
        i = grid.index(row.lr)
        out += runs.grid([row.task], [row.config], grid[max(0, i - 1):i + 2], spec["seeds"],
                         **fixed)
    return out


def paper_runs(data_root: str | Path | None = None, weights_file: str | None = None,
               study: Study | None = None) -> list[dict]:
    """Every run of the paper's grid (``study``, default ``paper``): its model on each of its
    datasets (under ``data_root``) x configurations x LRs x seeds, with the paper recipe;
    ``weights_file``: local weights of the model (default: the hub)."""
    if not data_root:
        raise ValueError("the paper study needs data_root: the folder of the paper datasets "
                         "(layouts: vitplast.paper_datasets)")
    spec = (study or get("paper")).spec
    fixed = dict(recipe="paper", model=spec["model"], data_root=str(data_root))
    if weights_file:
        fixed["weights_file"] = weights_file
    out = []
    for task in paper_datasets.PAPER_DATASETS:
        lrs = spec["lrs_domainnet"] if task.startswith("domainnet") else spec["lrs"]
        out += runs.grid([task], spec["configs"], lrs, spec["seeds"], **fixed)
    return out
