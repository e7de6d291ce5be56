"""Studies: the named sets of finetuning runs that the notebooks read and the CLI runs.

Paper: section 5 (the main table, Fig. 18) on the embedded default. A study is a preset of
``runs.grid`` arguments; ``runs_of`` turns it into its run configs, and its results store
holds one record per run. The LR-tuning diary of each study is prose in its store's
``README.md``.

- ``MAIN``: notebook 04's main study, stored in ``data/finetune/``.
- ``SMOKE``: a seconds-long variant of ``MAIN`` (the smoke profile).
- ``BUDGET``: the budget-sensitivity check of notebook 04 (every configuration at 4x the
  steps, at its chosen LR of the main study and that LR's two grid neighbours), stored with
  the main study. Its LRs depend on the main study's results: ``budget_runs``.
- ``CONFOUNDS`` (and ``CONFOUNDS_SMOKE``): notebook 05's confound study
  (``confounds.study_runs``).
- ``PAPER``: the paper's own grid (ViT-B/16 in21k, its 11 datasets): ``paper_runs``.

A study declares its primary questions (``primaries``: at most three ``verdicts.Primary``,
each with its direction, the paper's value and its source) before any of its runs exist; the
findings tables test them with Holm over the primaries only, everything else is exploratory
(``primaries(study)``).

``SWEEPS`` names the studies the CLI runs (``vitplast sweep --study NAME``), each with its
default store and how its runs are made: ``sweep_runs(name, root)``.

Used by the CLI (``python -m vitplast sweep``), notebooks 04-05 and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from vitplast import components, models, paper, paper_datasets, runs, suite
from vitplast.search import LR_LADDER
from vitplast.verdicts import MAX_PRIMARIES, Primary

#: Where the main study's records are shipped (one JSON per run).
MAIN_RESULTS = models.results_root("finetune")
#: Where the suite study's records are shipped.
SUITE_RESULTS = models.results_root("suite")


def ladder(low: float, high: float) -> list[float]:
    """The ``LR_LADDER`` values from ``low`` to ``high``, both included."""
    return [lr for lr in LR_LADDER if low <= lr <= high]


#: Notebook 04's study: every embedded downstream task but plain Fashion-MNIST (the
#: pretraining domain) and one of its two geometric shifts, x the paper's configurations plus
#: head-only, x a half-decade SGD grid per configuration (centred on what the first study,
#: which kept the pretrained head, chose, and wide enough that accuracy falls by more than
#: 2 points on both sides of every best LR), x the paper's seeds. Recipe:
#: ``finetune.RECIPES["embedded"]``; every run starts from a new head.
MAIN = dict(
    tasks=["fmnist_contrast", "digits", "fmnist_gaussian_noise", "fmnist_motion_blur",
           "fmnist_snow", "fmnist_speckle_noise", "fmnist_rotate90"],
    lrs={"full": ladder(3e-4, 3.0), "head": ladder(1e-3, 30.0), "LN1": ladder(1e-3, 30.0),
         "MHA": ladder(3e-4, 3.0), "LN2": ladder(1e-3, 30.0), "FC1": ladder(3e-4, 3.0),
         "FC2": ladder(3e-4, 3.0)},
    seeds=[0, 42, 3407])
#: The budget-sensitivity check: two tasks (the hardest shift and the new domain), every
#: configuration at 4x the embedded recipe's steps (warm-up and evaluation period scaled too).
BUDGET = dict(tasks=["fmnist_contrast", "digits"], steps=480, warmup_steps=48, eval_every=80,
              seeds=[0, 42, 3407])

_TYPES = ("MHA", "FC1", "FC2")  # attention and the MLP linears: ~28M each on ViT-B
_NORMS = ("LN1", "LN2")  # the LayerNorms: 18K each
#: Notebook 04's primary questions, named by component type (on the embedded model the
#: measured plasticity order is not the paper's: notebook 02). Declared after the study's runs
#: (the questions it was built to answer; only the searched studies, ``SUITE_STUDY`` and
#: ``GAUGE_STUDY``, declared theirs before any run).
MAIN_PRIMARIES = (
    Primary("attention and MLP linears (MHA, FC1, FC2) - LayerNorms (LN1, LN2), test accuracy",
            a=_TYPES, b=_NORMS, paper=paper.group_gap(_TYPES, _NORMS),
            source="Table 1 average (ViT-B/16)"),
    Primary("MHA - LN1, test accuracy", a=("MHA",), b=("LN1",),
            paper=paper.group_gap(("MHA",), ("LN1",)), source="Table 1 average (ViT-B/16)"),
    Primary("Spearman(plasticity, gain over head-only) over the five components, within a task",
            statistic="spearman(plasticity, gain)", paper=paper.plasticity_gain_spearman(),
            source="Fig. 2 plasticity vs Table 1 averages (ViT-B/16), Takeaway 3",
            unit="rho, per task"))
MAIN["primaries"] = MAIN_PRIMARIES


#: A seconds-long variant of ``MAIN`` for the smoke profile: one task, two LRs, 4 steps.
SMOKE = dict(tasks=["digits"], lrs={c: [0.01, 0.1] for c in MAIN["lrs"]}, seeds=[0],
             fixed=dict(steps=4, warmup_steps=1, eval_every=2), primaries=MAIN_PRIMARIES)
#: Finetuning studies by name (the notebooks' ``study`` parameter, the CLI's ``--study``).
FINETUNING = {"main": MAIN, "smoke": SMOKE}

#: The tasks of the confound study: five of the main study's seven (its two near-ceiling,
#: low-spread shifts, motion blur and speckle noise, left out).
CONFOUND_TASKS = ["fmnist_contrast", "digits", "fmnist_snow", "fmnist_rotate90",
                  "fmnist_gaussian_noise"]
#: Notebook 05's confound study, stored in ``data/confounds/``: parts run in this order, the
#: ones that can decide "plasticity or count?" first. A part trains named variants
#: (``confounds.variant_table``: ablations, single-block configurations, plain configurations;
#: ``lrs`` maps a name, or an fnmatch pattern over names, to its LRs) on ``tasks`` x ``seeds``,
#: with the part's ``fixed`` run settings. Its plain SGD baselines are runs of ``MAIN``. The
#: LayerNorm scales are measured on ``scale_tasks`` (``confounds.study_scales``). The ladders
#: were widened by two half-decade steps past every edge where a first fill chose its LR
#: (widening adds runs and changes none; ``data/confounds/README.md``).
CONFOUNDS = dict(
    seeds=[0, 42, 3407], target="FC1", n_pairs=256, scale_tasks=["fmnist_contrast", "digits"],
    baselines="main",
    # plasticity re-measured after finetuning (``confounds.plasticity_after``)
    after=dict(tasks=CONFOUND_TASKS[:2], seed=0, n_pairs=128,
               configs=list(components.PAPER_CONFIGS)),
    parts=[
        # MHA, FC1, FC2 each with exactly LN1's trainable count (random sparse masks)
        dict(name="matched sparse", tasks=CONFOUND_TASKS, lrs={"* sparse": ladder(0.1, 30.0)}),
        # one block's LN1, MHA or FC1 at a time: count fixed within a component, plasticity not
        dict(name="per layer", tasks=CONFOUND_TASKS[:3],
             lrs={"LN1 block *": ladder(0.03, 3.0), "MHA block *": ladder(0.01, 1.0),
                  "FC1 block *": ladder(0.01, 10.0)}),
        # the same configurations from the random init checkpoint: architecture or pretraining?
        dict(name="from init", tasks=CONFOUND_TASKS[:2], fixed=dict(checkpoint="init"),
             lrs={"full": ladder(3e-4, 0.3), "MHA": ladder(3e-3, 0.3), "FC1": ladder(3e-3, 0.3),
                  "FC2": ladder(3e-3, 0.3), "LN1": ladder(0.03, 3.0), "LN2": ladder(0.03, 3.0),
                  "head": ladder(0.03, 3.0)}),
        # rank-1 LoRA and bias-only, each family masked to one count
        dict(name="matched LoRA", tasks=CONFOUND_TASKS, lrs={"* LoRA r1": ladder(0.01, 1.0)}),
        dict(name="matched bias", tasks=CONFOUND_TASKS,
             lrs={"MHA bias": ladder(0.03, 3.0), "FC1 bias": ladder(0.03, 10.0),
                  "FC2 bias": ladder(0.03, 3.0)}),
        # the paper's optimizer ablation (AdamW at about SGD's LR / 100)
        dict(name="AdamW", tasks=CONFOUND_TASKS, fixed=dict(optimizer="adamw"),
             lrs={"MHA": ladder(1e-4, 0.01), "LN1": ladder(3e-3, 0.3)}),
        # the function-preserving gamma rescale, its raw twin and its lr/c^2 control: with the
        # recipe's gradient clipping, and without it (where rescale and control are one run)
        dict(name="rescale", tasks=CONFOUND_TASKS[:2],
             lrs={"LN? x * (*)": ladder(0.03, 3.0), "LN? lr/c^2 *": ladder(0.03, 3.0)}),
        dict(name="rescale, no clip", tasks=CONFOUND_TASKS[:2], fixed=dict(clip_grad_norm=0.0),
             lrs={"LN1 x * (preserved)": ladder(0.03, 3.0), "LN1 lr/c^2 *": ladder(0.03, 3.0),
                  "LN1": ladder(0.03, 3.0)}),
    ],
    # declared after the study's runs, as the questions it was built to answer: does the gap
    # survive at one count, and does a block's plasticity go with its accuracy once depth is
    # held fixed?
    primaries=(
        Primary("attention and MLP linears at LN1's count (MHA, FC1, FC2 sparse) - LayerNorms "
                "(LN1, LN2), test accuracy", a=tuple(f"{c} sparse" for c in _TYPES), b=_NORMS,
                paper=paper.group_gap(_TYPES, _NORMS),
                source="Table 1 average (ViT-B/16), at full counts"),
        Primary("MHA at LN1's count (sparse) - LN1, test accuracy", a=("MHA sparse",),
                b=("LN1",), paper=paper.group_gap(("MHA",), ("LN1",)),
                source="Table 1 average (ViT-B/16), at full counts"),
        Primary("one block at a time, mean over components: Spearman(plasticity, test "
                "accuracy) over the blocks, partial on the block index",
                statistic="partial spearman(plasticity, accuracy | block)",
                source="Takeaway 3 (high plasticity -> better finetuning): positive",
                unit="partial rho, per task")))
#: A seconds-long variant of ``CONFOUNDS`` (the smoke profile): one task and seed, 4 steps, a
#: few variants; its baselines are runs of ``SMOKE``.
_FEW = dict(tasks=["digits"], fixed=SMOKE["fixed"])
CONFOUNDS_SMOKE = dict(
    CONFOUNDS, seeds=[0], n_pairs=8, scale_tasks=["digits"], baselines="smoke",
    after=dict(tasks=["digits"], configs=["MHA", "LN1"], seed=0, n_pairs=8),
    parts=[dict(_FEW, name="matched sparse", lrs={"MHA sparse": [0.1]}),
           dict(_FEW, name="per layer", lrs={"LN1 block 0": [0.1], "LN1 block 5": [0.1],
                                             "LN1 block 2": [0.1]}),
           dict(_FEW, name="rescale, no clip", lrs={"LN1 x * (preserved)": [0.1]},
                fixed=dict(SMOKE["fixed"], clip_grad_norm=0.0))])
#: Confound studies by name (notebook 05's ``study``, the CLI's ``sweep --study confounds``).
CONFOUND_STUDIES = {"confounds": CONFOUNDS, "smoke": CONFOUNDS_SMOKE}


def primaries(study: dict) -> tuple[Primary, ...]:
    """The declared primary questions of a study preset (``get(name)`` or
    ``CONFOUND_STUDIES[name]``): none for a study without any; more than ``MAX_PRIMARIES``
    fail."""
    declared = tuple(study.get("primaries", ()))
    if len(declared) > MAX_PRIMARIES:
        raise ValueError(f"a study declares {len(declared)} primaries; at most {MAX_PRIMARIES}")
    return declared


def get(name: str) -> dict:
    """A finetuning study preset by name; unknown names fail naming the valid ones."""
    if name not in FINETUNING:
        raise ValueError(f"unknown study {name!r}; valid: {list(FINETUNING)}")
    return FINETUNING[name]


def runs_of(study: dict, **fixed) -> list[dict]:
    """Every run config of a study preset such as ``MAIN``: per configuration its LRs
    (``lrs``: configuration -> LRs), x tasks x seeds, ordered task > config > lr > seed; the
    preset's ``fixed`` keywords (e.g. steps) and ``fixed`` go to every run."""
    fixed = {**study.get("fixed", {}), **fixed}
    return [run for task in study["tasks"] for config, lrs in study["lrs"].items()
            for run in runs.grid([task], [config], lrs, study["seeds"], **fixed)]


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

    The store is ``results_dir`` if given, else the shipped ``MAIN_RESULTS`` for ``main``
    (read only), or ``.cache/finetune-<name>`` when recomputing. Used by notebooks 04-06.
    """
    from vitplast import results, sweep

    study = get(name)
    root = results_dir or (str(models.cache_dir() / f"finetune-{name}") if recompute
                           else str(MAIN_RESULTS))
    expected = runs_of(study)
    if recompute:
        sweep.run_sweep(expected, root)
    stored = results.results(root)
    hashes = {runs.run_hash(c) for c in expected}
    in_study = stored[stored["run"].isin(hashes)] if len(stored) else stored
    budget = stored.iloc[:0]
    if name == "main" and len(in_study):
        budget_hashes = {runs.run_hash(c) for c in budget_runs(stored)}
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


def confound_baselines(study: dict) -> list[dict]:
    """The plain SGD runs a confound study compares with: its finetuning study's
    (``study["baselines"]``) runs on the tasks of its parts."""
    tasks = {t for part in study["parts"] for t in part["tasks"]}
    return [r for r in runs_of(get(study["baselines"])) if r["task"] in tasks]


def load_confounds(name: str = "confounds", results_dir: str = "", main_results_dir: str = "",
                   recompute: bool = False) -> ConfoundResults:
    """Read (or, with ``recompute``, first run or resume) a confound study and its baselines.

    The stores are ``results_dir`` / ``main_results_dir`` if given, else the shipped
    ``data/confounds`` and ``data/finetune`` (read only), or ``.cache/confounds-<name>`` and
    ``.cache/finetune-<baselines>`` when recomputing. Used by notebook 05.
    """
    from vitplast import confounds, results, sweep

    if name not in CONFOUND_STUDIES:
        raise ValueError(f"unknown confound study {name!r}; valid: {list(CONFOUND_STUDIES)}")
    study, cache = CONFOUND_STUDIES[name], models.cache_dir()
    root = results_dir or str(cache / f"confounds-{name}" if recompute
                              else confounds.EMBEDDED_RESULTS)
    main_root = main_results_dir or str(cache / f"finetune-{study['baselines']}" if recompute
                                        else MAIN_RESULTS)
    expected, baselines = confounds.study_runs(study, root), confound_baselines(study)
    if recompute:
        sweep.run_sweep(baselines, main_root)
        sweep.run_sweep(expected, root)
    df = results.results(root, main_root)
    hashes = {runs.run_hash(c) for c in expected + baselines}
    df = confounds.with_variant(df[df["run"].isin(hashes)] if len(df) else df)
    cover = results.coverage(df, expected)
    after = [confounds.plasticity_after(r, root, study["after"]["n_pairs"], compute=recompute)
             for r in confounds.after_runs(df, study, baselines)]  # df holds the baselines
    layer_tasks = [p for p in study["parts"] if p["name"] == "per layer"][0]["tasks"]
    return ConfoundResults(
        confounds.complete_settings(df, expected + baselines), cover, confounds.study_scales(
            root, study["scale_tasks"], target=study["target"], n_pairs=study["n_pairs"]),
        confounds.layer_plasticity(root, layer_tasks, study["n_pairs"]),
        pd.concat(after, ignore_index=True) if after
        else pd.DataFrame(columns=confounds.AFTER_COLUMNS), root, main_root)


def budget_runs(main: pd.DataFrame, study: dict = BUDGET) -> list[dict]:
    """The budget-sensitivity runs, given the main study's ``results`` table ``main``: on each
    task of ``study``, each configuration at the LR chosen on validation in the main study
    and its two neighbours on that configuration's grid (``MAIN["lrs"]``)."""
    from vitplast import results

    in_main = {runs.run_hash(c) for c in runs_of(MAIN)}
    chosen = results.select_lr(main[main["run"].isin(in_main) & main["task"].isin(study["tasks"])])
    fixed = {k: study[k] for k in ("steps", "warmup_steps", "eval_every")}
    out = []
    for row in chosen.itertuples():
        grid = MAIN["lrs"][row.config]
        i = grid.index(row.lr)
        out += runs.grid([row.task], [row.config], grid[max(0, i - 1):i + 2], study["seeds"],
                         **fixed)
    return out


#: The suite study (issue "a task suite that can decide"): every task of the task suite
#: (``vitplast.suite``, 33 tasks in 5 families) x 9 configurations x seed 0 (tasks, not seeds,
#: are the unit: seeds explained about 13% of the between-task spread in the main study), new
#: head in every run, each setting's LR found by ``vitplast.search`` (three LRs around
#: ``configs[name]``, then half-decade steps until the best on validation is interior). The
#: start LRs are the medians of what the main and confound studies chose for each
#: configuration. Identical runs of the main and confound studies are copied, not re-run.
#: Declared before any of its runs existed, with its three primary questions (Holm over these
#: three only; everything else the notebook shows is exploratory):
_SEED0 = "points, per task (seed 0)"
SUITE_STUDY = dict(
    tasks=list(suite.SUITE), seeds=[0],
    configs={"head": 1.0, "MHA": 0.1, "FC1": 0.1, "FC2": 0.1, "LN1": 0.3, "LN2": 0.3,
             "MHA sparse": 1.0, "FC1 sparse": 0.3, "FC2 sparse": 1.0},
    n_pairs=256,  # plasticity before finetuning, per task (P3), both protocols
    reuse=("finetune", "confounds"),  # shipped stores whose identical runs are copied
    precision="fp32",  # one precision in every contrast, on a GPU too (no bf16, no TF32)
    # The three primaries as committed with the study (commit 337ac45, before its runs), in
    # the ``Primary`` form the findings read: the same groups, statistic and directions.
    primaries=(
        Primary("attention and MLP linears at LN1's count (MHA, FC1, FC2 sparse) - LayerNorms "
                "(LN1, LN2), test accuracy", a=tuple(f"{c} sparse" for c in _TYPES), b=_NORMS,
                source="not tested in the paper (its groups differ in count by 1,500x)",
                unit=_SEED0),
        Primary("MHA - LN1 at full counts, test accuracy", a=("MHA",), b=("LN1",),
                paper=paper.group_gap(("MHA",), ("LN1",)), source="Table 1 average (ViT-B/16)",
                unit=_SEED0),
        Primary("Spearman(plasticity, gain over head-only) over the five components, within a "
                "task (plasticity: embedding protocol, before finetuning, mean over blocks)",
                statistic="spearman(plasticity, gain)", paper=paper.plasticity_gain_spearman(),
                source="Takeaway 3; Fig. 2 plasticity vs Table 1 averages (ViT-B/16)",
                unit="rho, per task")))


#: Where the recipe-length check's records go.
LENGTH_RESULTS = models.results_root("suite_length")
#: The suite study's recipe-length check (issue "task suite", item 3), declared before its
#: runs: the configurations of primaries P1 and P2 (MHA, LN1, LN2; MHA, FC1, FC2 sparse at
#: LN1's count) at 2x and 4x the embedded recipe's 120 steps (warm-up scaled alike), LRs
#: searched as in the suite study from its start LRs, on four tasks of four families. The
#: rule: if P1's or P2's mean over these tasks changes sign between 1x (the suite study's
#: runs) and 4x, the suite study is lengthened and the notebook says so.
LENGTH_STUDY = dict(
    tasks=["fmnist_contrast", "digits", "textures", "symmetry"], seeds=[0], precision="fp32",
    configs={f"{name} {k}x": dict(
        {"variant": name} if name.endswith("sparse") else {"config": name},
        steps=120 * k, warmup_steps=12 * k, start=start)
        for k in (2, 4) for name, start in (("MHA", 0.1), ("LN1", 0.3), ("LN2", 0.3),
                                            ("MHA sparse", 1.0), ("FC1 sparse", 0.3),
                                            ("FC2 sparse", 1.0))},
    reuse=("suite",))

#: Where the cross-gauge study's records go.
GAUGE_RESULTS = models.results_root("gauge")
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
GAUGE_STUDY = dict(
    tasks=list(suite.SUITE)[::2], seeds=[0], grid=[1e-3, 3e-3, 0.01, 0.03],
    configs={**_GAUGED, **{f"{c} c=8": dict(config=c, prepare="gauge", ablation=dict(c=_C),
                                            start=lr) for c, lr in _GAUGED.items()}},
    reuse=("suite", "finetune", "confounds"), precision="fp32",
    primaries=(
        Primary("configurations whose trajectory the gauge changes (MHA, FC2, full): c = 8 "
                "- c = 1, test accuracy, each LR tuned", a=("MHA c=8", "FC2 c=8", "full c=8"),
                b=("MHA", "FC2", "full"), unit=_SEED0,
                source="not in the paper; Takeaway 3 read causally predicts + (MHA and FC2 "
                "rise in plasticity at c = 8)"),
        Primary("MHA at c = 8 (most plastic) - MHA at c = 1 (least plastic), test accuracy",
                a=("MHA c=8",), b=("MHA",), unit=_SEED0, source="not in the paper"),
        Primary("FC2 at c = 8 - FC2 at c = 1, test accuracy", a=("FC2 c=8",), b=("FC2",),
                unit=_SEED0, source="not in the paper")))


#: The paper's grid (PAPER.md section 2): its model, finetuning configurations (section 5),
#: LRs (DomainNet has its own) and seeds, with the paper recipe on its 11 datasets.
PAPER = dict(model=paper_datasets.PAPER_MODEL,
             configs=list(components.PAPER_CONFIGS),
             lrs=[1e-3, 3e-3, 1e-2, 3e-2], lrs_domainnet=[3e-3, 1e-2, 3e-2, 6e-2],
             seeds=[0, 42, 3407])


def paper_runs(data_root: str | Path | None = None, weights_file: str | None = None,
               study: dict = PAPER) -> list[dict]:
    """Every run of the paper's grid: its model on each of its datasets (under
    ``data_root``) x configurations x LRs x seeds, with the paper recipe; ``weights_file``:
    local weights of the model (default: the hub)."""
    if not data_root:
        raise ValueError("the paper study needs data_root: the folder of the paper datasets "
                         "(layouts: vitplast.paper_datasets)")
    fixed = dict(recipe="paper", model=study["model"], data_root=str(data_root))
    if weights_file:
        fixed["weights_file"] = weights_file
    out = []
    for task in paper_datasets.PAPER_DATASETS:
        lrs = study["lrs_domainnet"] if task.startswith("domainnet") else study["lrs"]
        out += runs.grid([task], study["configs"], lrs, study["seeds"], **fixed)
    return out


@dataclass(frozen=True)
class Sweep:
    """A study the CLI runs by name: what it is (``about``), its default results ``store``
    (a function, so that the smoke study's cache folder follows ``$VITPLAST_CACHE`` when
    called; the shipped stores are ``MAIN_RESULTS`` and ``confounds.EMBEDDED_RESULTS``, set
    from ``$VITPLAST_DATA`` when their modules are imported) and its ``runs`` given the
    store it goes to (and, for the paper study, ``data_root`` and ``weights_file``);
    ``shipped``: its default store is one of the shipped ones (a checkout's ``data/``), which
    the CLI writes into only where its parent folder exists (never into site-packages);
    ``search``: the study preset whose LRs are searched (``vitplast.search.run_search``):
    its runs are known only as far as the search has gone."""

    about: str
    store: Callable[[], Path]
    runs: Callable[..., list[dict]]
    shipped: bool = False
    search: dict | None = None


def _confound_store() -> Path:
    from vitplast import confounds

    return Path(confounds.EMBEDDED_RESULTS)


def _confound_runs(root) -> list[dict]:
    from vitplast import confounds

    return confounds.study_runs(CONFOUNDS, root)


def _searched(study: dict, root) -> list[dict]:
    from vitplast import search

    return search.search_runs(study, root)


def _budget_runs(root) -> list[dict]:
    from vitplast import results

    return budget_runs(results.results(root))


#: The studies ``vitplast sweep --study NAME`` runs.
SWEEPS = {
    "main": Sweep("notebook 04's main study, into data/finetune",
                  lambda: Path(MAIN_RESULTS), lambda root: runs_of(MAIN), shipped=True),
    "budget": Sweep("notebook 04's 4x-steps check, stored with the main study, which it needs",
                    lambda: Path(MAIN_RESULTS), _budget_runs, shipped=True),
    "smoke": Sweep("a seconds-long main study, into .cache/finetune-smoke",
                   lambda: models.cache_dir() / "finetune-smoke", lambda root: runs_of(SMOKE)),
    "confounds": Sweep("notebook 05's confound study, into data/confounds", _confound_store,
                       _confound_runs, shipped=True),
    "suite": Sweep("the decisive study on the 33-task suite, LRs searched, into data/suite",
                   lambda: Path(SUITE_RESULTS), lambda root: _searched(SUITE_STUDY, root),
                   shipped=True,
                   search=SUITE_STUDY),
    "gauge": Sweep("the cross-gauge study: 5 configurations at c = 1 and c = 8 on 17 suite "
                   "tasks, LRs searched, into data/gauge", lambda: Path(GAUGE_RESULTS),
                   lambda root: _searched(GAUGE_STUDY, root), shipped=True, search=GAUGE_STUDY),
    "length": Sweep("the suite study's recipe-length check: P1 and P2's configurations at 2x "
                    "and 4x the steps on 4 tasks, LRs searched, into data/suite_length",
                    lambda: Path(LENGTH_RESULTS), lambda root: _searched(LENGTH_STUDY, root),
                    shipped=True, search=LENGTH_STUDY),
    "paper": Sweep("ViT-B/16 in21k on the 11 paper datasets under --data-root, the paper's "
                   "grid, into results/paper", lambda: Path("results/paper"),
                   lambda root, **options: paper_runs(**options)),
}


def sweep_of(name: str) -> Sweep:
    """The study ``name`` of ``SWEEPS``; unknown names fail naming the valid ones."""
    if name not in SWEEPS:
        raise ValueError(f"unknown study {name!r}; valid: {list(SWEEPS)}")
    return SWEEPS[name]


def sweep_runs(name: str, root: str | Path | None = None, **options) -> list[dict]:
    """Every run of study ``name`` of ``SWEEPS`` for the store ``root`` (default: the
    study's): the budget check reads the main study's results there, the confound study its
    LayerNorm scales. ``options``: the paper study's ``data_root`` and ``weights_file``."""
    study = sweep_of(name)
    options = {k: v for k, v in options.items() if v is not None}
    if name != "paper" and options:
        raise ValueError(f"{sorted(options)} are settings of the paper study only")
    root = study.store() if root is None else root
    return study.runs(root, **options)
