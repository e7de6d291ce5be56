"""Studies: the named sets of finetuning runs that the notebooks read and the CLI runs.

Paper: section 5 (the main table, Fig. 18) on the embedded default, and the paper's own grid.
A study is a value (``Study``): its name, a one-line purpose, its results store, how its runs
are made from its ``spec`` (a ``runs.grid`` preset, the confound study's parts, or a
searched-LR preset of ``vitplast.search``), the study its runs are compared with, and its
declared primary questions. ``STUDIES`` is the one registry, looked up by ``get(name)`` (the
CLI's ``vitplast sweep --study NAME``, the notebooks' ``study`` parameter); unknown names fail
naming the valid ones. A study with a ``smoke`` setting has a seconds-long version derived
from it, ``smoke(study)``, registered as ``<name>-smoke`` (the smoke profile). The LR-tuning
diary of each study is prose in its store's ``README.md``.

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

from vitplast import components, models, paper, paper_datasets, runs, suite
from vitplast.components import LINEARS, NORMS
from vitplast.search import LR_LADDER
from vitplast.verdicts import MAX_PRIMARIES, Primary

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


def ladder(low: float, high: float) -> list[float]:
    """The ``LR_LADDER`` values from ``low`` to ``high``, both included."""
    return [lr for lr in LR_LADDER if low <= lr <= high]


def runs_of(spec: dict, **fixed) -> list[dict]:
    """Every run config of a grid ``spec`` (such as the main study's): per configuration its
    LRs (``lrs``: configuration -> LRs), x tasks x seeds, ordered task > config > lr > seed;
    the spec's ``fixed`` keywords (e.g. steps) and ``fixed`` go to every run."""
    fixed = {**spec.get("fixed", {}), **fixed}
    return [run for task in spec["tasks"] for config, lrs in spec["lrs"].items()
            for run in runs.grid([task], [config], lrs, spec["seeds"], **fixed)]


def _grid(study: Study, root) -> list[dict]:
    return runs_of(study.spec)


def _budget(study: Study, root) -> list[dict]:
    from vitplast import results

    return budget_runs(results.results(root), study)


def _confound(study: Study, root) -> list[dict]:
    from vitplast import confounds

    return confounds.study_runs(study.spec, root)


def _searched(study: Study, root) -> list[dict]:
    from vitplast import search

    return search.search_runs(study.spec, root)


def _paper(study: Study, root, **options) -> list[dict]:
    return paper_runs(**options, study=study)


#: The run settings of every smoke study: 4 steps.
_SMOKE_RUN = dict(steps=4, warmup_steps=1, eval_every=2)
#: Notebook 04's primary questions, named by component type (on the embedded model the
#: measured plasticity order is not the paper's: notebook 02). Declared after the study's runs
#: (the questions it was built to answer; only the searched studies, ``suite`` and ``gauge``,
#: declared theirs before any run).
_MAIN_PRIMARIES = (
    Primary("attention and MLP linears (MHA, FC1, FC2) - LayerNorms (LN1, LN2), test accuracy",
            a=LINEARS, b=NORMS, paper=paper.group_gap(LINEARS, NORMS),
            source="Table 1 average (ViT-B/16)"),
    Primary("MHA - LN1, test accuracy", a=("MHA",), b=("LN1",),
            paper=paper.group_gap(("MHA",), ("LN1",)), source="Table 1 average (ViT-B/16)"),
    Primary("Spearman(plasticity, gain over head-only) over the five components, within a task",
            statistic="spearman(plasticity, gain)", paper=paper.plasticity_gain_spearman(),
            source="Fig. 2 plasticity vs Table 1 averages (ViT-B/16), Takeaway 3",
            unit="rho, per task"))
#: Notebook 04's study: every embedded downstream task but plain Fashion-MNIST (the
#: pretraining domain) and one of its two geometric shifts, x the paper's configurations plus
#: head-only, x a half-decade SGD grid per configuration (centred on what the first study,
#: which kept the pretrained head, chose, and wide enough that accuracy falls by more than
#: 2 points on both sides of every best LR), x the paper's seeds. Recipe:
#: ``finetune.RECIPES["embedded"]``; every run starts from a new head. Its smoke version: one
#: task, two LRs, 4 steps.
_MAIN_LRS = {"full": ladder(3e-4, 3.0), "head": ladder(1e-3, 30.0), "LN1": ladder(1e-3, 30.0),
             "MHA": ladder(3e-4, 3.0), "LN2": ladder(1e-3, 30.0), "FC1": ladder(3e-4, 3.0),
             "FC2": ladder(3e-4, 3.0)}
_MAIN = dict(
    tasks=["fmnist_contrast", "digits", "fmnist_gaussian_noise", "fmnist_motion_blur",
           "fmnist_snow", "fmnist_speckle_noise", "fmnist_rotate90"],
    lrs=_MAIN_LRS, seeds=list(paper.SEEDS))
_MAIN_SMOKE = dict(tasks=["digits"], lrs={c: [0.01, 0.1] for c in _MAIN_LRS}, seeds=[0],
                   fixed=_SMOKE_RUN)
#: The budget-sensitivity check: two tasks (the hardest shift and the new domain), every
#: configuration at 4x the embedded recipe's steps (warm-up and evaluation period scaled too).
_BUDGET = dict(tasks=["fmnist_contrast", "digits"], steps=480, warmup_steps=48, eval_every=80,
               seeds=list(paper.SEEDS))

#: The tasks of the confound study: five of the main study's seven (its two near-ceiling,
#: low-spread shifts, motion blur and speckle noise, left out).
_CONFOUND_TASKS = ["fmnist_contrast", "digits", "fmnist_snow", "fmnist_rotate90",
                   "fmnist_gaussian_noise"]
#: Notebook 05's confound study, stored in ``data/confounds/``: parts run in this order, the
#: ones that can decide "plasticity or count?" first. A part trains named variants
#: (``confounds.variant_table``: ablations, single-block configurations, plain configurations;
#: ``lrs`` maps a name, or an fnmatch pattern over names, to its LRs) on ``tasks`` x ``seeds``,
#: with the part's ``fixed`` run settings. Its plain SGD baselines are runs of the main study.
#: The LayerNorm scales are measured on ``scale_tasks`` (``confounds.study_scales``). The
#: ladders were widened by two half-decade steps past every edge where a first fill chose its
#: LR (widening adds runs and changes none; ``data/confounds/README.md``).
_CONFOUNDS = dict(
    seeds=list(paper.SEEDS), target="FC1", n_pairs=256, scale_tasks=["fmnist_contrast", "digits"],
    # plasticity re-measured after finetuning (``confounds.plasticity_after``)
    after=dict(tasks=_CONFOUND_TASKS[:2], seed=0, n_pairs=128,
               configs=list(components.PAPER_CONFIGS)),
    parts=[
        # MHA, FC1, FC2 each with exactly LN1's trainable count (random sparse masks)
        dict(name="matched sparse", tasks=_CONFOUND_TASKS, lrs={"* sparse": ladder(0.1, 30.0)}),
        # one block's LN1, MHA or FC1 at a time: count fixed within a component, plasticity not
        dict(name="per layer", tasks=_CONFOUND_TASKS[:3],
             lrs={"LN1 block *": ladder(0.03, 3.0), "MHA block *": ladder(0.01, 1.0),
                  "FC1 block *": ladder(0.01, 10.0)}),
        # the same configurations from the random init checkpoint: architecture or pretraining?
        dict(name="from init", tasks=_CONFOUND_TASKS[:2], fixed=dict(checkpoint="init"),
             lrs={"full": ladder(3e-4, 0.3), "MHA": ladder(3e-3, 0.3), "FC1": ladder(3e-3, 0.3),
                  "FC2": ladder(3e-3, 0.3), "LN1": ladder(0.03, 3.0), "LN2": ladder(0.03, 3.0),
                  "head": ladder(0.03, 3.0)}),
        # rank-1 LoRA and bias-only, each family masked to one count
        dict(name="matched LoRA", tasks=_CONFOUND_TASKS, lrs={"* LoRA r1": ladder(0.01, 1.0)}),
        dict(name="matched bias", tasks=_CONFOUND_TASKS,
             lrs={"MHA bias": ladder(0.03, 3.0), "FC1 bias": ladder(0.03, 10.0),
                  "FC2 bias": ladder(0.03, 3.0)}),
        # the paper's optimizer ablation (AdamW at about SGD's LR / 100)
        dict(name="AdamW", tasks=_CONFOUND_TASKS, fixed=dict(optimizer="adamw"),
             lrs={"MHA": ladder(1e-4, 0.01), "LN1": ladder(3e-3, 0.3)}),
        # the function-preserving gamma rescale, its raw twin and its lr/c^2 control: with the
        # recipe's gradient clipping, and without it (where rescale and control are one run)
        dict(name="rescale", tasks=_CONFOUND_TASKS[:2],
             lrs={"LN? x * (*)": ladder(0.03, 3.0), "LN? lr/c^2 *": ladder(0.03, 3.0)}),
        dict(name="rescale, no clip", tasks=_CONFOUND_TASKS[:2], fixed=dict(clip_grad_norm=0.0),
             lrs={"LN1 x * (preserved)": ladder(0.03, 3.0), "LN1 lr/c^2 *": ladder(0.03, 3.0),
                  "LN1": ladder(0.03, 3.0)}),
    ])
#: Its smoke version: one task and seed, 4 steps, a few variants.
_FEW = dict(tasks=["digits"], fixed=_SMOKE_RUN)
_CONFOUNDS_SMOKE = dict(
    seeds=[0], n_pairs=8, scale_tasks=["digits"],
    after=dict(tasks=["digits"], configs=["MHA", "LN1"], seed=0, n_pairs=8),
    parts=[dict(_FEW, name="matched sparse", lrs={"MHA sparse": [0.1]}),
           dict(_FEW, name="per layer", lrs={"LN1 block 0": [0.1], "LN1 block 5": [0.1],
                                             "LN1 block 2": [0.1]}),
           dict(_FEW, name="rescale, no clip", lrs={"LN1 x * (preserved)": [0.1]},
                fixed=dict(_SMOKE_RUN, clip_grad_norm=0.0))])
_SPARSE = tuple(f"{c} sparse" for c in LINEARS)
#: Declared after the study's runs, as the questions it was built to answer: does the gap
#: survive at one count, and does a block's plasticity go with its accuracy once depth is
#: held fixed?
_CONFOUND_PRIMARIES = (
    Primary("attention and MLP linears at LN1's count (MHA, FC1, FC2 sparse) - LayerNorms "
            "(LN1, LN2), test accuracy", a=_SPARSE, b=NORMS,
            paper=paper.group_gap(LINEARS, NORMS),
            source="Table 1 average (ViT-B/16), at full counts"),
    Primary("MHA at LN1's count (sparse) - LN1, test accuracy", a=("MHA sparse",),
            b=("LN1",), paper=paper.group_gap(("MHA",), ("LN1",)),
            source="Table 1 average (ViT-B/16), at full counts"),
    Primary("one block at a time, mean over components: Spearman(plasticity, test "
            "accuracy) over the blocks, partial on the block index",
            statistic="partial spearman(plasticity, accuracy | block)",
            source="Takeaway 3 (high plasticity -> better finetuning): positive",
            unit="partial rho, per task"))

#: The suite study (issue "a task suite that can decide"): every task of the task suite
#: (``vitplast.suite``, 33 tasks in 5 families) x 9 configurations x seed 0 (tasks, not seeds,
#: are the unit: seeds explained about 13% of the between-task spread in the main study), new
#: head in every run, each setting's LR found by ``vitplast.search`` (three LRs around
#: ``configs[name]``, then half-decade steps until the best on validation is interior). The
#: start LRs are the medians of what the main and confound studies chose for each
#: configuration. Identical runs of the main and confound studies are copied, not re-run.
_SUITE = dict(
    tasks=list(suite.SUITE), seeds=[0],
    configs={"head": 1.0, "MHA": 0.1, "FC1": 0.1, "FC2": 0.1, "LN1": 0.3, "LN2": 0.3,
             "MHA sparse": 1.0, "FC1 sparse": 0.3, "FC2 sparse": 1.0},
    n_pairs=256,  # plasticity before finetuning, per task (P3), both protocols
    reuse=("finetune", "confounds"),  # shipped stores whose identical runs are copied
    precision="fp32")  # one precision in every contrast, on a GPU too (no bf16, no TF32)
_SEED0 = "points, per task (seed 0)"
#: Declared before any of its runs existed (Holm over these three only; everything else the
#: notebook shows is exploratory), as committed with the study (commit 337ac45), in the
#: ``Primary`` form the findings read: the same groups, statistic and directions.
_SUITE_PRIMARIES = (
    Primary("attention and MLP linears at LN1's count (MHA, FC1, FC2 sparse) - LayerNorms "
            "(LN1, LN2), test accuracy", a=_SPARSE, b=NORMS,
            source="not tested in the paper (its groups differ in count by 1,500x)",
            unit=_SEED0),
    Primary("MHA - LN1 at full counts, test accuracy", a=("MHA",), b=("LN1",),
            paper=paper.group_gap(("MHA",), ("LN1",)), source="Table 1 average (ViT-B/16)",
            unit=_SEED0),
    Primary("Spearman(plasticity, gain over head-only) over the five components, within a "
            "task (plasticity: embedding protocol, before finetuning, mean over blocks)",
            statistic="spearman(plasticity, gain)", paper=paper.plasticity_gain_spearman(),
            source="Takeaway 3; Fig. 2 plasticity vs Table 1 averages (ViT-B/16)",
            unit="rho, per task"))

#: The suite study's recipe-length check (issue "task suite", item 3), declared before its
#: runs: the configurations of primaries P1 and P2 (MHA, LN1, LN2; MHA, FC1, FC2 sparse at
#: LN1's count) at 2x and 4x the embedded recipe's 120 steps (warm-up scaled alike), LRs
#: searched as in the suite study from its start LRs, on four tasks of four families. The
#: rule: if P1's or P2's mean over these tasks changes sign between 1x (the suite study's
#: runs) and 4x, the suite study is lengthened and the notebook says so.
_LENGTH = dict(
    tasks=["fmnist_contrast", "digits", "textures", "symmetry"], seeds=[0], precision="fp32",
    configs={f"{name} {k}x": dict(
        {"variant": name} if name.endswith("sparse") else {"config": name},
        steps=120 * k, warmup_steps=12 * k, start=start)
        for k in (2, 4) for name, start in (("MHA", 0.1), ("LN1", 0.3), ("LN2", 0.3),
                                            ("MHA sparse", 1.0), ("FC1 sparse", 0.3),
                                            ("FC2 sparse", 1.0))},
    reuse=("suite",))

_C = 8.0  # the gauge: residual stream x 8 (embedding RMS token norm ~3.5 -> ~28; ViT-B: 19.4)
_GAUGED = {"head": 1.0, "LN1": 0.3, "MHA": 0.1, "FC2": 0.1, "full": 0.1}
#: The cross-gauge study (issue "plasticity has a gauge"): the same network under two
#: plasticity rankings. ``vitplast.gauge`` multiplies the residual stream by c = 8: the same
#: function, but the embedding protocol's ranking moves from LN2 > LN1 > FC1 > FC2 > MHA to
#: MHA > FC2 > FC1 > LN2 > LN1 (notebook 02). Configurations at c = 1 (plain; the suite
#: study's runs where they are the same) and c = 8 (``prepare="gauge"``): MHA, FC2 and full,
#: whose trajectories the gauge changes, and LN1 and head-only, which it provably leaves
#: alone (a check: they must come out identical). Every task of the suite at an even place
#: (17 tasks, all five families), seed 0, LRs searched as in the suite study, plus the
#: paper's fixed grid shared by every configuration (its secondary question: choosing from
#: that grid, as the paper's table does). Declared before any of its runs exist.
_GAUGE = dict(
    tasks=list(suite.SUITE)[::2], seeds=[0], grid=list(paper.LRS),
    configs={**_GAUGED, **{f"{c} c=8": dict(config=c, prepare="gauge", ablation=dict(c=_C),
                                            start=lr) for c, lr in _GAUGED.items()}},
    reuse=("suite", "finetune", "confounds"), precision="fp32")
_GAUGE_PRIMARIES = (
    Primary("configurations whose trajectory the gauge changes (MHA, FC2, full): c = 8 "
            "- c = 1, test accuracy, each LR tuned", a=("MHA c=8", "FC2 c=8", "full c=8"),
            b=("MHA", "FC2", "full"), unit=_SEED0,
            source="not in the paper; Takeaway 3 read causally predicts + (MHA and FC2 "
            "rise in plasticity at c = 8)"),
    Primary("MHA at c = 8 (most plastic) - MHA at c = 1 (least plastic), test accuracy",
            a=("MHA c=8",), b=("MHA",), unit=_SEED0, source="not in the paper"),
    Primary("FC2 at c = 8 - FC2 at c = 1, test accuracy", a=("FC2 c=8",), b=("FC2",),
            unit=_SEED0, source="not in the paper"))

#: The paper's grid (PAPER.md section 2): its model, finetuning configurations (section 5),
#: LRs (DomainNet has its own) and seeds, with the paper recipe on its 11 datasets.
_PAPER = dict(model=paper_datasets.PAPER_MODEL, configs=list(components.PAPER_CONFIGS),
              lrs=list(paper.LRS), lrs_domainnet=list(paper.LRS_DOMAINNET),
              seeds=list(paper.SEEDS))


def _registry(*full: Study) -> dict[str, Study]:
    """Name -> study: each study, then its smoke version where it has one."""
    return {s.name: s for study in full for s in (study, *([smoke(study)] if study.smoke
                                                           else []))}


#: Every study by name: the CLI's ``--study`` and the notebooks' ``study``.
STUDIES = _registry(
    Study("main", "notebook 04's main study", "finetune", _grid, _MAIN,
          primaries=_MAIN_PRIMARIES, smoke=_MAIN_SMOKE),
    Study("budget", "notebook 04's 4x-steps check of the main study, stored with it (it reads it)",
          "finetune", _budget, _BUDGET, baselines="main"),
    Study("confounds", "notebook 05's confound study", "confounds", _confound, _CONFOUNDS,
          baselines="main", primaries=_CONFOUND_PRIMARIES, smoke=_CONFOUNDS_SMOKE),
    Study("suite", "the decisive study on the 33-task suite, LRs searched", "suite", _searched,
          _SUITE, primaries=_SUITE_PRIMARIES, searched=True),
    Study("gauge", "the cross-gauge study: 5 configurations at c = 1 and c = 8 on 17 suite "
          "tasks, LRs searched", "gauge", _searched, _GAUGE, primaries=_GAUGE_PRIMARIES,
          searched=True),
    Study("length", "the suite study's recipe-length check: P1 and P2's configurations at 2x "
          "and 4x the steps on 4 tasks, LRs searched", "suite_length", _searched, _LENGTH,
          searched=True),
    Study("paper", "ViT-B/16 in21k on the 11 paper datasets under --data-root, the paper's "
          "grid", "results/paper", _paper, _PAPER, place=".",
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
    """What a finetuning study's store holds: ``runs`` (``results.results`` rows of the
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
    stored = results.results(root)
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
    """What a confound study's store holds: ``runs`` (``results.results`` rows of the study's
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
    expected, baselines = confounds.study_runs(spec, root), confound_baselines(study)
    if recompute:
        sweep.run_sweep(baselines, main_root)
        sweep.run_sweep(expected, root)
    df = results.results(root, main_root)
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
