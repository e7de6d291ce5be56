"""vitplast: a study kit for "Vision Transformer Finetuning Benefits from Non-Smooth Components".

Glossary: one word per thing, in the paper's words where it has one.

==============  ==========================================================================
word            what it is (where it lives)
==============  ==========================================================================
component       one of LN1, MHA, LN2, FC1, FC2 of a block: a row of ``components.TABLE``
plasticity      a component's rate of change, ||f(x) - f(y)|| / ||x - y|| (Definition 1);
                one measured value is a ``rate`` (``plasticity``)
relative        plasticity times s_in / s_out, the RMS norms of the component's inputs and
plasticity      outputs: unchanged by the gauge (``relative``)
bound           an upper bound on a component's plasticity, Propositions 1-4 (``bounds``)
protocol        what a component is fed when measured: ``hidden`` or ``embedding``
pair            two images (x, y) whose outputs a rate compares (``pairs.Pairs``)
task            a downstream dataset with train / val / test splits (``tasks.TASKS``)
suite           the 33 varied offline tasks the decisive study runs on (``suite``)
configuration   what is finetuned: a name of ``configurations.CONFIGS`` (full, head, LN1...)
                or a list of parameter patterns; the key ``config`` of a run
recipe          named training settings: optimizer, schedule, steps (``keys.RECIPES``)
ablation        a model change before training (``ablations``; a run's ``prepare`` names
                it and ``ablation`` holds its arguments)
gauge           the residual stream times c: same function, rates moved (``gauge``)
variant         a named configuration of the confound study, maybe with an ablation; its
                fields say what it trains (``confound_variants.Variant``)
run             one training run's dict (``runs.make_run``); its hash names its record
record          a finished run's outcome, one JSON file holding its run under ``run``
                (``store``; older stores: ``python -m vitplast.experiments.migrate``)
store           a results folder of records, resumable (``store.Store``, ``study_log``)
study           a named set of runs and its store (``studies``); a ``sweep`` runs what
                its store lacks
checkpoint      a stage of the embedded model's pretraining (``models``, ``pretrain``)
profile         how large the notebooks run: smoke, default, paper (``course.notebooks``)
finding         one conclusion as a row: claim, paper, measured, CI, p, power, verdict
                (``*_findings``; the machinery in ``verdicts``, power in ``power``)
primary         a question a study declares in its preset (``primaries.Primary``); the
                other tested findings are exploratory
==============  ==========================================================================

Modules, one concept each, in layers; each imports only from its own layer and the layers
below it (``LAYERS``, held to the real import graph by ``tests/test_layout.py``). Import a module
by its path, e.g. ``from vitplast.measure import plasticity``; each subpackage's docstring lists
its modules. Within a module, names without a leading ``_`` are public (a module's own
``__all__``, where it has one, lists them). Bottom to top:

- base, the top-level modules every layer shares: ``paper`` (the paper's reference values and
  claims), ``inputs`` (argument checks), ``files`` (atomic writes; where the cache and the
  shipped stores live), ``cached`` (load-or-compute, and the companion files kept beside a
  study's records) with ``frames`` (a table as arrays in an ``.npz``), ``schema`` (every stored
  file kind checked against the published JSON Schemas), ``models`` (loading, the embedded
  checkpoints, the weights a measurement depends on) with ``hub`` (is the Hugging Face hub
  reachable), ``weights`` (does a weights file fit the model) and ``attention`` (timm's
  attention on its matmul path), ``fetched``
  (real weights fetched from the package index, verified and converted) with ``onnx_vit``
  (an ONNX DINOv2 read into timm, and the proof), ``provenance`` (what made a result:
  machine, versions, git state);
- ``stats``: a measured value as a row with its test, Holm family, power and verdict;
- ``datasets``: the tasks and their images;
- ``measure``: the paper's objects measured (components, plasticity, bounds, the gauge...);
- ``train``: the one training loop and what runs on it (finetuning, probes, ablations,
  pretraining, other pretraining recipes, the gauge's finetuning invariance);
- ``experiments``: runs, their store, the studies and the tables read from them;
- ``report``: conclusions as rows, in words and figures, the explorers;
- ``course``: the notebooks run (papermill, their kernels, their parameters checked), read
  (the reading copy) and compared (two runs' printed results);
- the command line: ``__main__`` (``vitplast ...``) with ``cli_notebooks`` (``vitplast
  notebooks``), ``cli_files`` (``vitplast data``, ``cache``) and ``cli_weights`` (``vitplast
  weights``).

Package data: the embedded checkpoints (``vitplast/checkpoints/``), the notebooks
(``vitplast/notebooks/``) and the schemas (``vitplast/schemas/``).
"""

__version__ = "0.1.0"

#: The layers, bottom to top: a module imports only from its own layer and those below it.
#: ``base`` is every top-level module but the command line's (``CLI``); the others are the
#: subpackages of those names.
LAYERS = ("base", "stats", "datasets", "measure", "train", "experiments", "report", "course",
          "cli")
#: The command line's modules, the top layer.
CLI = ("__main__", "cli_files", "cli_notebooks", "cli_weights")
