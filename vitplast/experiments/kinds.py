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

Each has ``runs(root, runtime)`` (its runs known now, with the runtime's run keys: the one list
both ``run`` and ``load`` read, so that a hashed flag set on the command line is read back),
``run(root, runtime, executor)`` (run or resume what its store lacks) and ``load(root, runtime,
recompute=...)`` (read it back: a ``Loaded``, whatever the kind). ``load`` is defined once, on
``Study``; a kind overrides only the hooks it calls (``_runs``, ``prepare``, ``_recompute``,
``_load``). Every ``Runtime`` setting is honoured by every kind or refused by ``check``, naming
the kinds it applies to (``runtime.Flag.kinds``). Which kind takes which spec type is its
``SPEC``, read by ``studies.KINDS``, the one registry of kinds.
Importing this module imports no torch (the CLI builds its help from the registry,
``vitplast.experiments.studies``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from vitplast import files
from vitplast.experiments import runs
from vitplast.experiments.runs import run_hash
from vitplast.experiments.runtime import FLAG, Executor, Runtime
from vitplast.experiments.spec_types import Budget, Grid, PaperGrid, Spec
from vitplast.experiments.store import Store, select

#: Where a study's store is: ``data`` (shipped: ``files.results_root``), ``cache``
#: (``files.cache_dir``) or ``.`` (relative to the working directory).
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
        if self.place == "cache" or (recompute and self.shipped):
            return files.cache_dir() / (f"{self.folder}-{self.name}" if self.shipped
                                         else self.folder)
        return files.results_root(self.folder) if self.shipped else Path(self.folder)

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
        todo = select(self.runs(root, runtime), root, order=runtime.order,
                      shard=runtime.shard, limit=runtime.limit)
        return sweep.run_as(todo, root, runtime, executor)

    def load(self, root=None, runtime: Runtime | None = None, *,
             recompute: bool = False) -> Loaded:
        """Read the study back from its store: the one way to read a study, whatever its
        kind (used by notebooks 02b, 02c, 04, 04b, 05 and 07).

        Args:
            root: its store; default its own (``root(recompute)``: a shipped store is read
                only, its cache copy recomputed).
            runtime: the runtime it was swept with (``vitplast sweep``'s flags): its run keys
                go into the runs expected, so that runs swept with a hashed flag (``eval_every``)
                are the ones read back; default the runtime's defaults, without progress bars.
            recompute: first run or resume what the store lacks (``_recompute``), waiting for
                the runs another process is training meanwhile.

        Returns:
            A ``Loaded``: its rows, its coverage, its store and what its kind adds.
        """
        runtime = runtime or Runtime(progress=False)
        self.check(runtime)
        root = Path(root) if root else self.root(recompute)
        if recompute:
            self._recompute(root, runtime)
        return self._load(root, runtime, recompute)

    def _recompute(self, root: Path, runtime: Runtime) -> None:
        """Run or resume its runs into ``root``, then wait for those another process was
        training meanwhile (``Store.wait_for``)."""
        self.run(root, runtime)
        Store(root).wait_for(self.runs(root, runtime))

    def _load(self, root: Path, runtime: Runtime, recompute: bool) -> Loaded:
        """Its runs' rows in ``root``, its runs listed from ``runtime`` (``runs``), with its
        budget check's (``_budget``)."""
        from vitplast.experiments import results

        stored = results.records_table(str(root))
        expected = self.runs(root, runtime)
        mine = _rows(stored, expected)
        return Loaded(mine, results.coverage(mine, expected), str(root),
                      self._budget(stored, mine, runtime))

    def _budget(self, stored, mine, runtime: Runtime):
        """The rows of ``stored`` (its store's ``results`` table) that are its budget check's
        runs, given its own rows ``mine``: none but for a grid study with one."""
        return stored.iloc[:0]

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
    """What ``Study.load`` reads back from a study's store, whatever its kind.

    Attributes:
        runs: the study's rows: ``results.records_table`` rows of its runs (a confound study's
            with its baselines', each with its ``variant``, only settings stored whole); a
            searched study's chosen run per complete task and configuration
            (``SearchedStudy._load``).
        coverage: its expected runs by status (empty for a searched study: its runs are
            known only as far as its search has gone).
        root: its store.
        budget: rows of its budget check (empty for a grid study without one); ``None`` for
            kinds that have none.
        extras: what its kind reads beside its runs, by name (empty for most): a confound
            study's ``scales`` (``confounds.study_scales``), ``layers`` (per-layer plasticity,
            ``confound_plasticity.layer_plasticity``), ``after`` (plasticity after
            finetuning, ``confound_plasticity.plasticity_after``) and ``baselines_root`` (its
            baselines' store); a searched study with a fixed grid of LRs, ``grid``: its
            ``runs`` with each LR chosen on validation from that grid instead.
    """

    runs: object
    coverage: dict
    root: str
    budget: object = None
    extras: dict = field(default_factory=dict)


def _rows(table, expected: list[dict]):
    """The rows of ``results`` table ``table`` that are runs of ``expected``."""
    return table[table["run"].isin({run_hash(r) for r in expected})] if len(table) else table


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
        return runs.task_options(self.spec.fixed)

    def _budget(self, stored, mine, runtime: Runtime):
        """The rows of its budget check (``budget_runs`` of its ``budget`` spec, with the
        runtime's run keys) where it has one and its store holds runs of its own."""
        if not (self.budget and len(mine)):
            return stored.iloc[:0]
        keys = runtime.run_keys()
        return _rows(stored, [{**r, **keys} for r in budget_runs(stored, self, named(self.budget))])


def grid_runs(spec) -> list[dict]:
    """Every run of a ``Grid`` spec: per configuration its LRs x tasks x seeds, ordered
    task > config > lr > seed, with the spec's ``fixed`` keywords."""
    return [run for task in spec.tasks for config, lrs in spec.lrs.items()
            for run in runs.grid([task], [config], lrs, spec.seeds, **spec.fixed)]


def budget_runs(main, grid: GridStudy, spec) -> list[dict]:
    """The budget-sensitivity runs of ``spec`` (a ``spec_types.Budget``) given the
    ``results`` table ``main`` of the ``grid`` study's store: on each task of ``spec``, each
    configuration at the LR chosen on validation in ``grid`` and its two neighbours on that
    configuration's grid."""
    from vitplast.experiments import lr_selection

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
        _need_data_root(runtime)

    def _runs(self, root, runtime) -> list[dict]:
        _need_data_root(runtime)
        spec, out = self.spec, []
        fixed = dict(recipe="paper", model=spec.model, data_root=str(runtime.data_root))
        for task in spec.tasks:
            lrs = spec.lrs_domainnet if task.startswith("domainnet") else spec.lrs
            out += runs.grid([task], spec.configs, lrs, spec.seeds, **fixed)
        return out


def _need_data_root(runtime: Runtime) -> None:
    """Refuse a runtime without ``data_root``: the paper study's runs are listed from it."""
    if not runtime.data_root:
        raise ValueError("the paper study needs data_root (--data-root): the folder of the "
                         "paper datasets (layouts: vitplast.datasets.paper_datasets)")
