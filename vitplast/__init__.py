"""vitplast: a study kit for "Vision Transformer Finetuning Benefits from Non-Smooth Components".

Glossary: one word per thing, in the paper's words where it has one.

==============  ==========================================================================
word            what it is (where it lives)
==============  ==========================================================================
component       one of LN1, MHA, LN2, FC1, FC2 of a block (``components.COMPONENTS``)
plasticity      a component's rate of change, ||f(x) - f(y)|| / ||x - y|| (Definition 1);
                one measured value is a ``rate`` (``plasticity``)
bound           an upper bound on a component's plasticity, Propositions 1-4 (``bounds``)
protocol        what a component is fed when measured: ``hidden`` or ``embedding``
pair            two images (x, y) whose outputs a rate compares (``pairs.Pairs``)
task            a downstream dataset with train / val / test splits (``tasks.TASKS``)
suite           the 33 varied offline tasks the decisive study runs on (``suite``)
configuration   what is finetuned: a name of ``components.CONFIGS`` (full, head, LN1...) or
                a list of parameter patterns; the key ``config`` of a run
recipe          named training settings: optimizer, schedule, steps (``finetune.RECIPES``)
ablation        a model change before training (``ablations``; a run's ``prepare`` names
                it and ``ablation`` holds its arguments)
gauge           the residual stream times c: same function, rates moved (``gauge``)
variant         a named configuration of the confound study, maybe with an ablation; its
                fields say what it trains (``confound_variants.Variant``)
run             one training run's dict (``runs.make_run``); its hash names its record
record          a finished run's outcome, one JSON file holding its run under ``run``
                (``store``; older stores: ``python -m vitplast.migrate``)
store           a results folder of records, resumable (``store.Store``, ``provenance``)
study           a named set of runs and its store (``studies``); a ``sweep`` runs what
                its store lacks
checkpoint      a stage of the embedded model's pretraining (``models``, ``pretrain``)
profile         how large the notebooks run: smoke, default, paper (``notebooks``)
finding         one conclusion as a row: claim, paper, measured, CI, p, power, verdict
                (``findings``; the machinery in ``verdicts``, power in ``power``)
primary         a question a study declares before its runs (``verdicts.Primary``); the
                other tested findings are exploratory
==============  ==========================================================================

Modules, one concept each (``__all__`` below lists them; within a module, names without a
leading ``_`` are public, and a module's own ``__all__``, where it has one, lists them):

- the paper's objects: ``components``, ``plasticity`` (over ``rates``: one batch's rates) and
  ``pairs`` (Definition 1), ``bounds`` (Propositions 1-4), ``intervals`` (objection 2,
  Takeaway 1), ``definitions`` and
  ``empirical`` (measured plasticity), ``stream`` (what sets the ranking: the residual
  stream's scale), ``paper`` (its reference values);
- conclusions: ``findings`` (one builder per notebook; 03 in ``bound_findings``, 04 in
  ``finetuning_findings``, 05 in ``confound_findings``) over ``verdicts`` (rows, primaries,
  Holm families) and ``power``;
  ``advise`` (which component to finetune, from signals measured before finetuning);
- models and data: ``models`` (loading, the embedded checkpoints, folders; ``hub``: reaching
  the Hugging Face hub), ``pretrain`` (``recipes``: another recipe's ranking), ``tasks`` (the
  registry and ``load``) over ``data``
  (embedded images), ``suite`` (the task suite) and ``drawn`` (its glyphs and pictures),
  ``corruptions`` and ``paper_datasets`` (the paper's datasets from disk; ``fake_datasets``
  writes tiny fakes);
- finetuning: ``finetune`` (the one training loop, over ``passes``: loader, precision,
  evaluation; ``batched`` trains the LRs of one setting as one computation), ``probes`` (the
  linear probe), ``ablations`` (with ``gauge``) and ``confounds`` (with
  ``confound_plasticity``; its variants as values in ``confound_variants``), ``runs`` (the run
  schema), ``studies`` (named studies; their specs in ``study_specs``), ``search`` (LRs
  bracketed on validation), ``decide`` (the suite study's tables), ``sweep`` (running them),
  ``store`` and ``provenance`` (records, sessions, progress; ``migrate``: older record layouts)
  over ``files`` (atomic writes) and ``cached`` (load-or-compute), ``results`` (tables; the LR
  rule in ``lr_selection``);
- presentation: ``plots`` (its look in ``plot_style``), ``widgets``, ``notebooks``
  (papermill), ``__main__`` (the CLI).

Helpers for argument checks: ``inputs``. Package data: the embedded checkpoints
(``vitplast/checkpoints/``) and the notebooks (``vitplast/notebooks/``).
"""

__version__ = "0.1.0"

#: The public modules. Importing ``vitplast`` loads none of them: import the one you need,
#: e.g. ``from vitplast import tasks``.
__all__ = ["ablations", "advise", "batched", "bound_findings", "bounds", "cached", "components",
           "confound_findings", "confound_plasticity", "confound_variants", "confounds",
           "corruptions", "data", "decide", "definitions", "drawn", "empirical", "fake_datasets",
           "files", "findings", "finetune", "finetuning_findings", "gauge", "hub", "inputs",
           "intervals", "lr_selection", "migrate", "models", "notebooks", "pairs", "paper",
           "paper_datasets", "passes", "plasticity", "plot_style", "plots", "power", "pretrain",
           "probes", "provenance", "rates", "recipes", "results", "runs", "search", "store",
           "stream", "studies", "study_specs", "suite", "sweep", "tasks", "verdicts", "widgets"]
