"""vitplast: a study kit for "Vision Transformer Finetuning Benefits from Non-Smooth Components".

Glossary: one word per thing, in the paper's words where it has one.

==============  ==========================================================================
word            what it is (where it lives)
==============  ==========================================================================
component       one of LN1, MHA, LN2, FC1, FC2 of a block (``components.COMPONENTS``)
plasticity      a component's rate of change, ||f(x) - f(y)|| / ||x - y|| (Definition 1);
                one measured value is a ``rate`` (``plasticity``)
relative        plasticity times s_in / s_out, the RMS norms of the component's inputs and
plasticity      outputs: unchanged by the gauge (``relative``)
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
                (``store``; older stores: ``python -m vitplast.experiments.migrate``)
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

Modules, one concept each, in subpackages along the flow: tasks, then what is measured,
trained, run as studies, reported (each subpackage's docstring lists its modules; within a
module, names without a leading ``_`` are public, and a module's own ``__all__``, where it has
one, lists them). Imports may cross that order (``stream`` finetunes to test an invariance;
``empirical`` caches through the store), never in a cycle (``tests/test_layout.py``):

- ``datasets``: the tasks and their images (``tasks``, ``data``, ``suite``, ``drawn``,
  ``corruptions``, ``paper_datasets``, ``fake_datasets``); beside it ``models`` (loading, the
  embedded checkpoints, folders) and ``hub`` (reaching the Hugging Face hub);
- ``measure``: the paper's objects measured (``components``, ``rates``, ``plasticity``,
  ``pairs``, ``bounds``, ``intervals``, ``definitions``, ``empirical``, ``stream``, ``gauge``,
  ``relative``, ``tokens``);
- ``train``: the one training loop and what runs on it (``finetune``, ``passes``, ``batched``,
  ``probes``, ``ablations``, ``pretrain``, ``recipes``);
- ``experiments``: runs, their store, the studies and their tables (``runs``, ``store``,
  ``claims``, ``migrate``, ``sweep``, ``search``, ``studies``, ``study_specs``, ``provenance``,
  ``results``, ``lr_selection``, ``decide``, ``cross_gauge``, ``confounds``,
  ``confound_variants``, ``confound_plasticity``, ``archive``);
- ``report``: conclusions as rows and what shows them (``findings``, ``definition_findings``,
  ``bound_findings``, ``finetuning_findings``, ``confound_findings``, ``verdicts``, ``power``,
  ``plots``, ``plot_style``, ``sentences``, ``widgets``, ``advise``, ``regret``,
  ``notebooks``, ``reading_copy``);
- shared by all: ``paper`` (the paper's reference values), ``inputs`` (argument checks),
  ``files`` (atomic writes), ``cached`` (load-or-compute), ``schema`` (every stored file kind
  and a run's settings checked against the published JSON Schemas); beside ``models``, ``hub``
  (is the hub reachable) and ``weights`` (does a weights file fit the model); ``__main__`` is
  the CLI, with ``cli_notebooks`` (``vitplast notebooks``) and ``cli_files`` (``vitplast
  data``, ``cache``).

Every module is also reachable by its short name: ``from vitplast import plasticity`` is
``from vitplast.measure import plasticity`` (``__getattr__`` below), so code written against
the flat layout keeps working.

Package data: the embedded checkpoints (``vitplast/checkpoints/``), the notebooks
(``vitplast/notebooks/``) and the schemas (``vitplast/schemas/``).
"""

import importlib

__version__ = "0.1.0"

#: Where each module of a subpackage lives: ``from vitplast import <module>`` finds it here.
SUBPACKAGES = {
    "datasets": ("corruptions", "data", "drawn", "fake_datasets", "paper_datasets", "suite",
                 "tasks"),
    "measure": ("bounds", "components", "definitions", "empirical", "gauge", "intervals",
                "pairs", "plasticity", "rates", "relative", "stream", "tokens"),
    "train": ("ablations", "batched", "finetune", "passes", "pretrain", "probes", "recipes"),
    "experiments": ("archive", "claims", "confound_plasticity", "confound_variants",
                    "confounds", "cross_gauge", "decide", "lr_selection", "migrate",
                    "provenance", "results", "runs", "search", "store", "studies",
                    "study_specs", "sweep"),
    "report": ("advise", "bound_findings", "confound_findings", "definition_findings",
               "findings", "finetuning_findings", "notebooks", "plot_style", "plots", "power",
               "reading_copy", "regret", "sentences", "verdicts", "widgets"),
}
_HOME = {module: package for package, modules in SUBPACKAGES.items() for module in modules}
#: The public modules by their short names. Importing ``vitplast`` loads none of them: import
#: the one you need, e.g. ``from vitplast import tasks``.
__all__ = sorted(["cached", "cli_files", "cli_notebooks", "files", "hub", "inputs", "models",
                  "paper", "schema", "weights", *_HOME])


def __getattr__(name: str):
    """``vitplast.<module>`` for a module of a subpackage (``SUBPACKAGES``), imported on first
    use: ``from vitplast import plasticity`` keeps working."""
    if name in _HOME:
        return importlib.import_module(f"vitplast.{_HOME[name]}.{name}")
    raise AttributeError(f"module 'vitplast' has no attribute {name!r}")
