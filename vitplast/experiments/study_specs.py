"""Study specs: what each named study of ``vitplast.experiments.studies`` runs, and what it
asks.

Each study's spec is a value here, of its kind's type (``spec_types``: a ``Grid``, the
confound study's ``Confound``, a ``Search``...), with its smoke version (a seconds-long spec of
the same type) and its declared primary questions (``primaries.Primary``), written before (or,
where said, after) its runs. ``studies.STUDIES`` names them by the names of this module (it is
imported on a study's first use: it imports torch, the registry does not); a run's hash comes
from these values, so changing one re-runs the study.
"""

from __future__ import annotations

from dataclasses import replace

from vitplast import paper
from vitplast.datasets import paper_datasets, suite
from vitplast.experiments.search import LR_LADDER
from vitplast.experiments.spec_types import After, Budget, Confound, Grid, PaperGrid, Part, Search
from vitplast.measure import components
from vitplast.stats.primaries import Primary
from vitplast.train import configurations

#: The component groups the studies' questions compare: the table's linears and LayerNorms that
#: the paper's Table 1 has (a row added to the component table asks no new question of the
#: studies declared before it).
_LINEARS, _NORMS = (tuple(c for c in group if c in paper.TABLE1_CONFIGS)
                    for group in (components.LINEARS, components.NORMS))


def ladder(low: float, high: float) -> list[float]:
    """The ``LR_LADDER`` values from ``low`` to ``high``, both included."""
    return [lr for lr in LR_LADDER if low <= lr <= high]


#: The task pair every study runs first: the hardest shift of the pretraining domain, and the
#: new domain.
PAIR = ("fmnist_contrast", "digits")
#: The run settings of every smoke study: 4 steps of 16 images, validated before the first and
#: after the last, on a task of 160 images (128 to train, 32 to validate) and 64 to test
#: (digits' splits hold hundreds of images to evaluate), so that every path of a run is
#: exercised in moments.
SMOKE_RUN = dict(steps=4, warmup_steps=1, eval_every=4, batch_size=16, train_size=160,
                 test_size=64)
#: The task of every smoke study: a Fashion-MNIST shift (``train_size`` and ``test_size`` set
#: its splits; scikit-learn's digits keep theirs).
SMOKE_TASKS = PAIR[:1]
#: Notebook 04's primary questions, named by component type (on the embedded model the
#: measured plasticity order is not the paper's: notebook 02). Declared after the study's runs
#: (the questions it was built to answer; only the searched studies, ``suite`` and ``gauge``,
#: declared theirs before any run).
MAIN_PRIMARIES = (
    Primary("attention and MLP linears (MHA, FC1, FC2) - LayerNorms (LN1, LN2), test accuracy",
            a=_LINEARS, b=_NORMS, cites="linears over LayerNorms",
            paper=paper.group_gap(_LINEARS, _NORMS)),
    Primary("MHA - LN1, test accuracy", a=("MHA",), b=("LN1",), cites="MHA over LN1",
            paper=paper.group_gap(("MHA",), ("LN1",))),
    Primary("Spearman(plasticity, gain over head-only) over the five components, within a task",
            statistic="spearman(plasticity, gain)", cites="plasticity goes with gain",
            paper=paper.plasticity_gain_spearman(), unit="rho, per task"))
#: Notebook 04's study: every embedded downstream task but plain Fashion-MNIST (the
#: pretraining domain) and one of its two geometric shifts, x the paper's configurations plus
#: head-only, x a half-decade SGD grid per configuration (centred on what the first study,
#: which kept the pretrained head, chose, and wide enough that accuracy falls by more than
#: 2 points on both sides of every best LR), x the paper's seeds. Recipe:
#: ``keys.RECIPES["embedded"]``; every run starts from a new head. Its smoke version: one
#: task, two LRs, 4 steps.
MAIN_LRS = {"full": ladder(3e-4, 3.0), "head": ladder(1e-3, 30.0), "LN1": ladder(1e-3, 30.0),
             "MHA": ladder(3e-4, 3.0), "LN2": ladder(1e-3, 30.0), "FC1": ladder(3e-4, 3.0),
             "FC2": ladder(3e-4, 3.0)}
MAIN = Grid(
    tasks=(*PAIR, "fmnist_gaussian_noise", "fmnist_motion_blur", "fmnist_snow",
           "fmnist_speckle_noise", "fmnist_rotate90"),
    lrs=MAIN_LRS, seeds=tuple(paper.SEEDS), primaries=MAIN_PRIMARIES)
MAIN_SMOKE = replace(MAIN, tasks=SMOKE_TASKS, lrs={c: (0.01, 0.1) for c in MAIN_LRS},
                     seeds=(0,), fixed=SMOKE_RUN)
#: The budget-sensitivity check: two tasks (the hardest shift and the new domain), every
#: configuration at 4x the embedded recipe's steps (warm-up and evaluation period scaled too).
BUDGET = Budget(tasks=PAIR, seeds=tuple(paper.SEEDS),
                fixed=dict(steps=480, warmup_steps=48, eval_every=80))

#: The tasks of the confound study: five of the main study's seven (its two near-ceiling,
#: low-spread shifts, motion blur and speckle noise, left out).
CONFOUND_TASKS = (*PAIR, "fmnist_snow", "fmnist_rotate90", "fmnist_gaussian_noise")
_SPARSE = tuple(f"{c} sparse" for c in _LINEARS)
#: Declared after the study's runs, as the questions it was built to answer: does the gap
#: survive at one count, and does a block's plasticity go with its accuracy once depth is
#: held fixed?
CONFOUND_PRIMARIES = (
    Primary("attention and MLP linears at LN1's count (MHA, FC1, FC2 sparse) - LayerNorms "
            "(LN1, LN2), test accuracy", a=_SPARSE, b=_NORMS,
            note="Table 1 compares full counts only (MHA, FC1, FC2 - LN1, LN2: "
            f"{paper.group_gap(_LINEARS, _NORMS):+.2f} points)"),
    Primary("MHA at LN1's count (sparse) - LN1, test accuracy", a=("MHA sparse",),
            b=("LN1",), note="Table 1 compares full counts only (MHA - LN1: "
            f"{paper.group_gap(('MHA',), ('LN1',)):+.2f} points)"),
    Primary("one block at a time, mean over components: Spearman(plasticity, test "
            "accuracy) over the blocks, partial on the block index",
            statistic="partial spearman(plasticity, accuracy | block)",
            note="the paper compares components, never blocks (Takeaway 3 read per block "
            "would predict a positive rho)", unit="partial rho, per task"))

#: Notebook 05's confound study, stored in ``data/confounds/``: parts run in this order, the
#: ones that can decide "plasticity or count?" first. A part trains named variants
#: (``confound_variants.all_variants``: ablations, single-block configurations, plain
#: configurations; ``lrs`` maps a name, or an fnmatch pattern over names, to its LRs) on
#: ``tasks`` x ``seeds``,
#: with the part's ``fixed`` run settings. Its plain SGD baselines are runs of the main study.
#: The LayerNorm scales are measured on ``scale_tasks`` (``confounds.measure_scales``). The
#: ladders were widened by two half-decade steps past every edge where a first fill chose its
#: LR (widening adds runs and changes none; ``data/confounds/README.md``).
CONFOUNDS = Confound(
    seeds=tuple(paper.SEEDS), target="FC1", n_pairs=256, scale_tasks=PAIR,
    # plasticity re-measured after finetuning (``confound_plasticity.plasticity_after``)
    after=After(tasks=CONFOUND_TASKS[:2], seed=0, n_pairs=128,
                configs=tuple(configurations.PAPER_CONFIGS)),
    primaries=CONFOUND_PRIMARIES,
    parts=(
        # MHA, FC1, FC2 each with exactly LN1's trainable count (random sparse masks)
        Part(name="matched sparse", tasks=CONFOUND_TASKS, lrs={"* sparse": ladder(0.1, 30.0)}),
        # one block's LN1, MHA or FC1 at a time: count fixed within a component, plasticity not
        Part(name="per layer", tasks=CONFOUND_TASKS[:3],
             lrs={"LN1 block *": ladder(0.03, 3.0), "MHA block *": ladder(0.01, 1.0),
                  "FC1 block *": ladder(0.01, 10.0)}),
        # the same configurations from the random init checkpoint: architecture or pretraining?
        Part(name="from init", tasks=CONFOUND_TASKS[:2], fixed=dict(checkpoint="init"),
             lrs={"full": ladder(3e-4, 0.3), "MHA": ladder(3e-3, 0.3), "FC1": ladder(3e-3, 0.3),
                  "FC2": ladder(3e-3, 0.3), "LN1": ladder(0.03, 3.0), "LN2": ladder(0.03, 3.0),
                  "head": ladder(0.03, 3.0)}),
        # rank-1 LoRA and bias-only, each family masked to one count
        Part(name="matched LoRA", tasks=CONFOUND_TASKS, lrs={"* LoRA r1": ladder(0.01, 1.0)}),
        Part(name="matched bias", tasks=CONFOUND_TASKS,
             lrs={"MHA bias": ladder(0.03, 3.0), "FC1 bias": ladder(0.03, 10.0),
                  "FC2 bias": ladder(0.03, 3.0)}),
        # the paper's optimizer ablation (AdamW at about SGD's LR / 100)
        Part(name="AdamW", tasks=CONFOUND_TASKS, fixed=dict(optimizer="adamw"),
             lrs={"MHA": ladder(1e-4, 0.01), "LN1": ladder(3e-3, 0.3)}),
        # the function-preserving gamma rescale, its raw twin and its lr/c^2 control: with the
        # recipe's gradient clipping, and without it (where rescale and control are one run)
        Part(name="rescale", tasks=CONFOUND_TASKS[:2],
             lrs={"LN? x * (*)": ladder(0.03, 3.0), "LN? lr/c^2 *": ladder(0.03, 3.0)}),
        Part(name="rescale, no clip", tasks=CONFOUND_TASKS[:2], fixed=dict(clip_grad_norm=0.0),
             lrs={"LN1 x * (preserved)": ladder(0.03, 3.0), "LN1 lr/c^2 *": ladder(0.03, 3.0),
                  "LN1": ladder(0.03, 3.0)}),
    ))
#: Its smoke version: one task and seed, 4 steps, a few variants.
CONFOUNDS_SMOKE = replace(
    CONFOUNDS, seeds=(0,), n_pairs=8, scale_tasks=SMOKE_TASKS,
    after=After(tasks=SMOKE_TASKS, configs=("MHA", "LN1"), seed=0, n_pairs=8),
    parts=(Part("matched sparse", SMOKE_TASKS, {"MHA sparse": [0.1]}, SMOKE_RUN),
           Part("per layer", SMOKE_TASKS, {"LN1 block 0": [0.1], "LN1 block 5": [0.1],
                                           "LN1 block 2": [0.1]}, SMOKE_RUN),
           Part("rescale, no clip", SMOKE_TASKS, {"LN1 x * (preserved)": [0.1]},
                dict(SMOKE_RUN, clip_grad_norm=0.0))))
_SEED0 = "points, per task (seed 0)"
#: Declared before any of its runs existed (Holm over these three only; everything else the
#: notebook shows is exploratory), as committed with the study (commit 337ac45), in the
#: ``Primary`` form the findings read: the same groups, statistic and directions.
SUITE_PRIMARIES = (
    Primary("attention and MLP linears at LN1's count (MHA, FC1, FC2 sparse) - LayerNorms "
            "(LN1, LN2), test accuracy", a=_SPARSE, b=_NORMS,
            note="Table 1 compares them only at counts 1,500x apart",
            unit=_SEED0),
    Primary("MHA - LN1 at full counts, test accuracy", a=("MHA",), b=("LN1",),
            cites="MHA over LN1", paper=paper.group_gap(("MHA",), ("LN1",)), unit=_SEED0),
    Primary("Spearman(plasticity, gain over head-only) over the five components, within a "
            "task (plasticity: embedding protocol, before finetuning, mean over blocks)",
            statistic="spearman(plasticity, gain)", cites="plasticity goes with gain",
            paper=paper.plasticity_gain_spearman(), unit="rho, per task"))

#: The suite study (issue "a task suite that can decide"): every task of the task suite
#: (``vitplast.datasets.suite``, 33 tasks in 5 families) x 9 configurations x seed 0 (tasks, not
#: seeds, are the unit: seeds explained about 13% of the between-task spread in the main study), new
#: head in every run, each setting's LR found by ``vitplast.experiments.search`` (three LRs around
#: ``configs[name]``, then half-decade steps until the best on validation is interior). The
#: start LRs are the medians of what the main and confound studies chose for each
#: configuration. Identical runs of the main and confound studies are copied, not re-run.
#: Each configuration's start LR: the median of what the main and confound studies chose for
#: it (the suite study's; the length and cross-gauge studies start from these too).
STARTS = {"head": 1.0, "MHA": 0.1, "FC1": 0.1, "FC2": 0.1, "LN1": 0.3, "LN2": 0.3,
          "MHA sparse": 1.0, "FC1 sparse": 0.3, "FC2 sparse": 1.0, "full": 0.1}
SUITE = Search(
    tasks=tuple(suite.SUITE), seeds=(0,),
    configs={c: STARTS[c] for c in ("head", "MHA", "FC1", "FC2", "LN1", "LN2", "MHA sparse",
                                    "FC1 sparse", "FC2 sparse")},
    n_pairs=256,  # plasticity before finetuning, per task (P3), both protocols
    reuse=("finetune", "confounds"),  # shipped stores whose identical runs are copied
    primaries=SUITE_PRIMARIES,
    precision="fp32")  # one precision in every contrast, on a GPU too (no bf16, no TF32)
#: The suite study's recipe-length check (issue "task suite", item 3), declared before its
#: runs: the configurations of primaries P1 and P2 (MHA, LN1, LN2; MHA, FC1, FC2 sparse at
#: LN1's count) at 2x and 4x the embedded recipe's 120 steps (warm-up scaled alike), LRs
#: searched as in the suite study from its start LRs, on four tasks of four families. The
#: rule: if P1's or P2's mean over these tasks changes sign between 1x (the suite study's
#: runs) and 4x, the suite study is lengthened and the notebook says so.
LENGTH = Search(
    tasks=(*PAIR, "textures", "symmetry"), seeds=(0,), precision="fp32",
    configs={f"{name} {k}x": dict(
        {"config": name} if name in configurations.CONFIGS else {"variant": name},
        steps=120 * k, warmup_steps=12 * k, start=STARTS[name])
        for k in (2, 4) for name in ("MHA", "LN1", "LN2", "MHA sparse", "FC1 sparse",
                                     "FC2 sparse")},
    reuse=("suite",))

_C = 8.0  # the gauge: residual stream x 8 (embedding RMS token norm ~3.5 -> ~28; ViT-B: 19.4)
_GAUGED = {c: STARTS[c] for c in ("head", "LN1", "MHA", "FC2", "full")}
#: The cross-gauge study (issue "plasticity has a gauge"): the same network under two
#: plasticity rankings. ``vitplast.measure.gauge`` multiplies the residual stream by c = 8: the same
#: function, but the embedding protocol's ranking moves from LN2 > LN1 > FC1 > FC2 > MHA to
#: MHA > FC2 > FC1 > LN2 > LN1 (notebook 02). Configurations at c = 1 (plain; the suite
#: study's runs where they are the same) and c = 8 (``prepare="gauge"``): MHA, FC2 and full,
#: whose trajectories the gauge changes, and LN1 and head-only, which it provably leaves
#: alone (a check: they must come out identical). Every task of the suite at an even place
#: (17 tasks, all five families), seed 0, LRs searched as in the suite study, plus the
#: paper's fixed grid shared by every configuration (its secondary question: choosing from
#: that grid, as the paper's table does). Declared before any of its runs exist. What its
#: primaries measure: one LR shared by the head and the component on a reparametrized network.
#: At c = 8 and LR eta, MHA-only or FC2-only IS the c = 1 run with attn.proj or fc2 at eta / 64
#: and the rest at eta (without clipping; ``invariance.finetuning_equivalence``), which no shared LR
#: at c = 1 reaches: a recipe under a reparametrization, not a causal test of plasticity (the
#: primaries cite no claim of the paper; they were first worded as one, issue 38).
_SHARED_LR = ("it measures a recipe, not plasticity: with one LR shared by the head and the "
              "component, the gauge changes the trained branch's effective LR "
              f"(invariance.finetuning_equivalence: at c = {_C:g}, LR / {_C * _C:g} on attn.proj "
              "or fc2)")
GAUGE_PRIMARIES = (
    Primary("one LR shared by head and component, same network reparametrized by the gauge: "
            "MHA, FC2 and full finetuning at c = 8 - at c = 1, test accuracy, each LR tuned",
            a=("MHA c=8", "FC2 c=8", "full c=8"), b=("MHA", "FC2", "full"), unit=_SEED0,
            note=_SHARED_LR),
    Primary("one shared LR, gauge c = 8 - c = 1: MHA alone, test accuracy",
            a=("MHA c=8",), b=("MHA",), unit=_SEED0, note=_SHARED_LR),
    Primary("one shared LR, gauge c = 8 - c = 1: FC2 alone, test accuracy", a=("FC2 c=8",),
            b=("FC2",), unit=_SEED0, note=_SHARED_LR))
GAUGE = Search(
    tasks=tuple(suite.SUITE)[::2], seeds=(0,), grid=tuple(paper.LRS),
    configs={**_GAUGED, **{f"{c} c=8": dict(config=c, prepare="gauge", ablation=dict(c=_C),
                                            start=lr) for c, lr in _GAUGED.items()}},
    reuse=("suite", "finetune", "confounds"), precision="fp32", primaries=GAUGE_PRIMARIES)
#: The paper's grid (PAPER.md section 2): its model, finetuning configurations (section 5),
#: LRs (DomainNet has its own) and seeds, with the paper recipe on its 11 datasets.
PAPER = PaperGrid(model=paper_datasets.PAPER_MODEL, tasks=tuple(paper_datasets.PAPER_DATASETS),
                  configs=tuple(configurations.PAPER_CONFIGS), lrs=tuple(paper.LRS),
                  lrs_domainnet=tuple(paper.LRS_DOMAINNET), seeds=tuple(paper.SEEDS))

#: The real model: DINOv2 ViT-S/14's architecture, weights of unknown pretraining, fetched by
#: ``vitplast weights get dinov2-small`` (``vitplast.fetched`` says what is known of them). Its
#: study is sized to a 2-core CPU by ``benchmarks/real_vit_sizing.py``:
#: 56 px inputs (4 x 4 patches + CLS: the position embedding resampled from 224 px, said in
#: every record's ``model_kwargs``), 60 SGD steps of 32 images (2 epochs), 1,200 images per
#: Fashion-MNIST task (960 to train, 240 to validate), 600 to test (digits keep their splits).
REAL_MODEL = "dinov2-small"
REAL_RUN = dict(model=REAL_MODEL, model_kwargs={"img_size": 56}, steps=60, warmup_steps=6,
                batch_size=32, eval_every=20, train_size=1200, test_size=600)
#: Declared before any of its runs, Holm over these three only: does the gain order follow
#: plasticity's order, measured absolute (embedding protocol, as the paper's Fig. 2) and
#: relative (gauge-invariant under the hidden protocol only; its rows name their protocol:
#: ``Primary.under``), and MHA against LN1, the paper's most and least
#: plastic components (Fig. 2). The third was first labelled "most - least plastic on the real
#: model", before the real model was measured; the measurement found MHA its LEAST plastic
#: component (notebook 02c), so the label now names the components only, and the measured most -
#: least plastic contrast is an exploratory row (``real_findings.study_rows``).
REAL_PRIMARIES = (
    Primary("Spearman(plasticity, gain over head-only) over the five components, within a "
            "task (plasticity: embedding protocol, before finetuning, mean over blocks)",
            statistic="spearman(plasticity, gain)", cites="plasticity goes with gain",
            paper=paper.plasticity_gain_spearman(), unit="rho, per task"),
    Primary("Spearman(relative plasticity, gain over head-only) over the five components, "
            "within a task (gauge-invariant: rate over the input's relative change)",
            statistic="spearman(relative plasticity, gain)", unit="rho, per task",
            note="the paper measures absolute plasticity only"),
    Primary("MHA - LN1 on the real model (Fig. 2's most - least plastic), test accuracy",
            a=("MHA",), b=("LN1",), cites="MHA over LN1",
            paper=paper.group_gap(("MHA",), ("LN1",)), unit="points, per task (seed 0)"))
#: The real-model study: the real model (``REAL_MODEL``) finetuned on 4 tasks of 4 families
#: (the hardest shift of Fashion-MNIST, digits, textures, symmetry), each component alone, full
#: finetuning and the linear probe (head-only), new head in every run, seed 0 (tasks are the
#: unit), each setting's LR searched on validation (three LRs around its start, then
#: half-decade steps until the best is interior). Stored in ``data/real_vit/``.
REAL = Search(
    tasks=(*PAIR, "textures", "symmetry"), seeds=(0,), precision="fp32", n_pairs=128,
    configs={"head": 0.3, "LN1": 0.1, "LN2": 0.1, "MHA": 0.03, "FC1": 0.03, "FC2": 0.03,
             "full": 0.01},
    fixed=REAL_RUN, primaries=REAL_PRIMARIES)
#: Its GPU version (one prepared command: ``vitplast sweep --study real-paper --device cuda``):
#: the model at its own 224 px, 8 tasks, 3 seeds, the paper's step count per run scaled to the
#: tasks' size (2,000 steps of 64).
REAL_PAPER = replace(
    REAL, tasks=(*PAIR, "textures", "symmetry", "fmnist_gaussian_noise", "fmnist_snow",
                 "fmnist_rotate90", "fmnist_motion_blur"), seeds=tuple(paper.SEEDS),
    precision=None, fixed=dict(REAL_RUN, model_kwargs={}, steps=2000, warmup_steps=200,
                               batch_size=64, eval_every=250, train_size=5000, test_size=2000))
