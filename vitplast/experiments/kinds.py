"""Study kinds: how a study's runs are known, run and read back, one type per way.

Paper: section 2 (the finetuning protocol) and section 5 (the main table, Fig. 18).

The cut is by what a study's runs depend on, since that decides how they are listed, run and
read:

- ``GridStudy``: its spec alone (a ``spec_types.Grid``): the main study;
- ``BudgetStudy``: its baseline study's results in its store (the chosen LRs and their grid
  neighbours): the budget check;
- ``PaperStudy``: its spec and where the paper's datasets lie (``Runtime.data_root``);
- ``ConfoundStudy`` (``adaptive``): its spec and its LayerNorm scales, measured once before
  its runs are listed (``prepare``);
- ``SearchedStudy`` (``adaptive``): the outcomes stored so far: its runs are known only as far
  as its LR search has gone (``vitplast.experiments.search``).

Each has ``runs(root)`` (its runs known now), ``run(root, runtime, executor)`` (run or resume
what its store lacks: every study runs through ``Study.run``) and ``load(root)`` (read it back:
a ``Loaded``, whatever the kind). Every ``Runtime`` setting is honoured by every kind or
refused by ``check``, naming the kinds it applies to (``runtime.Flag.kinds``). Which kind
takes which spec type is its ``SPEC``, read by ``studies.KINDS``, the one registry of kinds.
Importing this module imports no torch (the CLI builds its help from the registry,
``vitplast.experiments.studies``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from vitplast.experiments.runtime import FLAG, Executor, Runtime
from vitplast.experiments.spec_types import Budget, Grid, PaperGrid, Spec
from vitplast.experiments.store import select

#: Where a study's store is: ``data`` (shipped: ``models.results_root``), ``cache``
#: (``models.cache_dir``) or ``.`` (relative to the working directory).
PLACES = ("data", "cache", ".")


@dataclass(frozen=True)
class Study:
    """A named study: what it is, where it is stored, what its spec is.

    Attributes:
        name: its name in ``studies.STUDIES`` (``--study``, the notebooks' ``study``).
        purpose: one line: what it is, for the CLI's help.
        folder: its results store's folder, under ``place``.
        definition: its spec (a ``spec_types.Spec`` of its kind's type, ``studies.KINDS``),
            or the name of one in ``study_specs``, read on first use (``spec``) so that the
            registry imports no torch.
        place: where ``folder`` is (``PLACES``); ``data`` stores are shipped (a checkout's
            ``data/``), which the CLI writes into only where their parent folder exists.
        baselines: the study whose runs it is compared with or builds on (the confound
            study's plain SGD runs, the budget check's chosen LRs); ``None``: none.
        smoke: the spec (or its name) of its seconds-long version (``studies.smoke``); empty:
            it has none.
    """

    name: str
    purpose: str
    folder: str
    definition: Spec | str
    place: str = "data"
    baselines: Study | None = None
    smoke: Spec | str = ""

    #: Its kind's name: what ``runtime.Flag.kinds`` name.
    KIND: ClassVar[str] = ""
    #: The spec type it takes (``spec_types``): what registers it (``studies.KINDS``).
    SPEC: ClassVar[type] = type(None)
    #: Its runs are made from what its store holds: the store must exist to list them.
    READS_STORE: ClassVar[bool] = False

    def __post_init__(self):
        if self.place not in PLACES:
            raise ValueError(f"study {self.name!r}: place {self.place!r}; valid: {list(PLACES)}")

    @property
    def spec(self) -> Spec:
        """Its spec (``definition``, read from ``study_specs`` when named); ``TypeError``
        unless its type is its kind's (``SPEC``)."""
        spec = named(self.definition)
        if type(spec) is not self.SPEC:
            raise TypeError(f"study {self.name!r} is a {self.KIND} study, which takes a "
                            f"{self.SPEC.__name__} spec; got a {type(spec).__name__}")
        return spec

    @property
    def primaries(self) -> tuple:
        """Its declared primary questions (its spec's)."""
        return self.spec.primaries

    @property
    def shipped(self) -> bool:
        """Its store is a shipped one (``data/<folder>``)."""
        return self.place == "data"

    def root(self, recompute: bool = False) -> Path:
        """Its store (followed from ``$VITPLAST_DATA`` and ``$VITPLAST_CACHE`` when called);
        with ``recompute``, a shipped study's cache copy ``<cache>/<folder>-<name>`` instead, so
        that a notebook never writes into a shipped store."""
        from vitplast import models

        if self.place == "cache" or (recompute and self.shipped):
            return models.cache_dir() / (f"{self.folder}-{self.name}" if self.shipped
                                         else self.folder)
        return models.results_root(self.folder) if self.shipped else Path(self.folder)

    def describe(self) -> str:
        """One line for the CLI's help: its name, purpose and store."""
        where = {"data": "data/", "cache": ".cache/", ".": ""}[self.place] + self.folder
        return f"{self.name}: {self.purpose}, into {where}"

    def check(self, runtime: Runtime) -> None:
        """Refuse (``ValueError``) a ``runtime`` setting this kind does not honour, naming the
        kinds it applies to, and a precision other than the one its spec declares."""
        for name in runtime.given():
            flag = FLAG[name]
            if flag.kinds and self.KIND not in flag.kinds:
                raise ValueError(f"{name} ({flag.option}) applies to {', '.join(flag.kinds)} "
                                 f"studies only; study {self.name!r} is a {self.KIND} "
                                 f"study{self._why(name)}")
        declared = getattr(self.spec, "precision", None)
        if runtime.precision not in (None, declared or runtime.precision):
            raise ValueError(f"precision {runtime.precision}: study {self.name!r} declares "
                             f"precision {declared!r} (one precision in every contrast)")

    def _why(self, name: str) -> str:
        return ""

    def _root(self, root) -> Path:
        return Path(root) if root else self.root()

    def runs(self, root=None, runtime: Runtime = Runtime()) -> list[dict]:
        """Every run of the study known now, with ``runtime.run_keys()``; ``root``: its store
        (default: its own)."""
        keys = runtime.run_keys()
        return [{**r, **keys} for r in self._runs(self._root(root), runtime)]

    def _runs(self, root: Path, runtime: Runtime) -> list[dict]:
        raise NotImplementedError

    def prepare(self, root=None) -> None:
        """What must happen before its runs can be listed (nothing but for confound studies)."""

    def run(self, root=None, runtime: Runtime = Runtime(),
            executor: Executor = Executor()):
        """Run (or resume) the runs its store lacks, as ``runtime`` selects them
        (``store.select``: order, shard, limit), on ``executor``; every record is stored as
        it finishes (``sweep.run_sweep``). Return the sweep's ``sweep.Outcome`` (complete
        when every run selected is stored ok or diverged)."""
        from vitplast.experiments import sweep

        self.check(runtime)
        root = self._root(root)
        self.prepare(root)
        runs = select(self.runs(root, runtime), root, order=runtime.order,
                      shard=runtime.shard, limit=runtime.limit)
        return sweep.run_as(runs, root, runtime, executor)

    def _read(self, root, runtime: Runtime = Runtime()) -> Loaded:
        """Its runs' rows in its store (``root``, default its own), its runs listed as
        ``runtime`` says; ``budget`` empty."""
        from vitplast.experiments import results

        root = str(self._root(root))
        stored = results.records_table(root)
        expected = self._runs(Path(root), runtime)
        mine = _rows(stored, expected)
        return Loaded(mine, results.coverage(mine, expected), root, stored.iloc[:0])

    def progress(self, root=None, runtime: Runtime = Runtime()):
        """How much of the study its store holds, per task and seed
        (``study_log.study_progress``); runs nothing."""
        from vitplast.experiments import study_log

        self.check(runtime)
        root = self._root(root)
        self.prepare(root)
        return study_log.study_progress(self.runs(root, runtime), root)


def named(spec: Spec | str) -> Spec:
    """``spec``, or the spec of ``study_specs`` it names (imported on first use: torch)."""
    if isinstance(spec, str):
        return getattr(import_module("vitplast.experiments.study_specs"), spec)
    return spec


@dataclass(frozen=True)
class Loaded:
    """What every kind's ``load`` reads back from a study's store.

    Attributes:
        runs: the study's rows: ``results.records_table`` rows of its runs (a confound study's
            with its baselines', each with its ``variant``, only settings stored whole); a
            searched study's chosen run per complete task and configuration
            (``SearchedStudy.load``).
        coverage: its expected runs by status (empty for a searched study: its runs are
            known only as far as its search has gone).
        root: its store.
        budget: rows of its budget check (empty for a grid study without one); ``None`` for
            kinds that have none.
        scales, layers, after: a confound study's LayerNorm scales
            (``confounds.study_scales``), per-layer plasticity
            (``confound_plasticity.layer_plasticity``) and plasticity after finetuning
            (``confound_plasticity.plasticity_after``); ``None`` for other kinds.
        main_root: a confound study's baselines' store; empty for other kinds.
    """

    runs: object
    coverage: dict
    root: str
    budget: object = None
    scales: dict | None = None
    layers: object = None
    after: object = None
    main_root: str = ""


def _rows(table, runs: list[dict]):
    """The rows of ``results`` table ``table`` that are runs of ``runs``."""
    from vitplast.experiments.runs import run_hash

    return table[table["run"].isin({run_hash(r) for r in runs})] if len(table) else table


@dataclass(frozen=True)
class GridStudy(Study):
    """Runs fixed by its spec (a ``spec_types.Grid``): per configuration its LRs x tasks x
    seeds. ``budget``: the spec (or its name) of its budget check, loaded with it."""

    budget: Budget | str = ""
    KIND: ClassVar[str] = "grid"
    SPEC: ClassVar[type] = Grid

    def _runs(self, root, runtime) -> list[dict]:
        return grid_runs(self.spec)

    @property
    def task_options(self) -> dict:
        """The ``tasks.load`` options its spec fixes for every run (``runs.task_options``: the
        smoke study's small splits); empty where its runs keep the defaults."""
        from vitplast.experiments import runs

        return runs.task_options(self.spec.fixed)

    def load(self, root=None, *, recompute: bool = False) -> Loaded:
        """Read (or, with ``recompute``, first run or resume) the study: its store is
        ``root`` if given, else its own (``root(recompute)``: a shipped store is read only,
        its cache copy recomputed)."""
        from vitplast.experiments import results
        from vitplast.experiments.store import Store

        root = str(root or self.root(recompute))
        expected = grid_runs(self.spec)
        if recompute:
            self.run(root, Runtime(progress=False))
            Store(root).wait_for(expected)  # runs another process was training meanwhile
        stored = results.records_table(root)
        mine, budget = _rows(stored, expected), stored.iloc[:0]
        if self.budget and len(mine):
            budget = _rows(stored, budget_runs(stored, self, named(self.budget)))
        return Loaded(mine, results.coverage(mine, expected), root, budget)


def grid_runs(spec) -> list[dict]:
    """Every run of a ``Grid`` spec: per configuration its LRs x tasks x seeds, ordered
    task > config > lr > seed, with the spec's ``fixed`` keywords."""
    from vitplast.experiments import runs

    return [run for task in spec.tasks for config, lrs in spec.lrs.items()
            for run in runs.grid([task], [config], lrs, spec.seeds, **spec.fixed)]


def budget_runs(main, grid: GridStudy, spec) -> list[dict]:
    """The budget-sensitivity runs of ``spec`` (a ``spec_types.Budget``) given the
    ``results`` table ``main`` of the ``grid`` study's store: on each task of ``spec``, each
    configuration at the LR chosen on validation in ``grid`` and its two neighbours on that
    configuration's grid."""
    from vitplast.experiments import lr_selection, runs

    chosen = lr_selection.select_lr(_rows(main, grid_runs(grid.spec)).pipe(
        lambda t: t[t["task"].isin(spec.tasks)]))
    out = []
    for row in chosen.itertuples():
        lrs = list(grid.spec.lrs[row.config])
        i = lrs.index(row.lr)
        out += runs.grid([row.task], [row.config], lrs[max(0, i - 1):i + 2], spec.seeds,
                         **spec.fixed)
    return out


@dataclass(frozen=True)
class BudgetStudy(Study):
    """Runs made from its ``baselines`` study's results in its store (a ``spec_types.Budget``:
    each configuration at the chosen LR and its two grid neighbours, other training
    settings)."""

    KIND: ClassVar[str] = "budget"
    SPEC: ClassVar[type] = Budget
    READS_STORE: ClassVar[bool] = True

    def _runs(self, root, runtime) -> list[dict]:
        from vitplast.experiments import results

        return budget_runs(results.records_table(root), self.baselines, self.spec)

    def load(self, root=None) -> Loaded:
        """Its runs' rows in its store (``root``, default its own); ``budget`` empty."""
        return self._read(root)


@dataclass(frozen=True)
class PaperStudy(GridStudy):
    """The paper's grid (a ``spec_types.PaperGrid``): its model on each of its datasets
    (under ``Runtime.data_root``, required) x configurations x LRs x seeds, with the paper
    recipe; ``Runtime.weights_file``: local weights of the model (default: the hub)."""

    KIND: ClassVar[str] = "paper"
    SPEC: ClassVar[type] = PaperGrid

    def check(self, runtime: Runtime) -> None:
        """``Study.check``, and ``runtime.data_root`` is required."""
        super().check(runtime)
        if not runtime.data_root:
            raise ValueError("the paper study needs data_root (--data-root): the folder of the "
                             "paper datasets (layouts: vitplast.datasets.paper_datasets)")

    def _runs(self, root, runtime) -> list[dict]:
        from vitplast.experiments import runs

        if not runtime.data_root:
            raise ValueError("the paper study needs data_root (--data-root): the folder of the "
                             "paper datasets (layouts: vitplast.datasets.paper_datasets)")
        spec, out = self.spec, []
        fixed = dict(recipe="paper", model=spec.model, data_root=str(runtime.data_root))
        for task in spec.tasks:
            lrs = spec.lrs_domainnet if task.startswith("domainnet") else spec.lrs
            out += runs.grid([task], spec.configs, lrs, spec.seeds, **fixed)
        return out

    def load(self, root=None, *, data_root: str = "") -> Loaded:
        """Its runs' rows in its store (``root``, default its own); its runs are listed from
        the datasets under ``data_root``."""
        return self._read(root, Runtime(data_root=data_root))
