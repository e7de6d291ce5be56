"""Runs: the keys of a finetuning run, its hash, its checks, and grids of runs.

Paper: section 2 (finetuning protocol: configurations x LR grid x seeds per dataset).

A run is a flat JSON-able dict (``make_run``). Its keys are declared once, each with its
type, default, range and description, in ``vitplast.train.keys.KEYS``; they are of two kinds:

- ``RUN_KEYS`` define what a run computes (task, model, configuration, LR, seed, recipe,
  ablation...). Its hash (``run_hash``) is over these keys only, and names its record file.
- ``RUNTIME_KEYS`` change how a run executes, not what it computes (device, data loader
  workers, logging period, numeric precision, where the data and weights lie). They are stored
  with the record but never hashed: raising ``workers`` on a GPU keeps every stored run.

What each key holds (type and range) is the published run schema,
``vitplast/schemas/run.schema.json``, generated from the same table (``check_run``); what
depends on the task, a batch no larger than its training split, is ``check_batches``'s.

A key whose value is ``None`` is left out of the hash, so a new defining key added later with a
``None`` default re-hashes nothing. A keyword of ``finetune.train`` that is no key of the table
changes no hash either.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import TYPE_CHECKING

from vitplast import fetched, schema
from vitplast.train import configurations
from vitplast.train.keys import KEY, KEYS, RECIPES

if TYPE_CHECKING:  # weights imports torch, which listing a study never needs
    from vitplast.weights import ModelSpec

#: The keys that define a run (and its hash), in the table's order (``keys.KEYS``, where each
#: is declared: type, default, range, description). See ``make_run`` for each one's meaning.
RUN_KEYS = tuple(k.name for k in KEYS if k.hashed)
#: Keys that change how a run executes, never what it computes: stored, not hashed. The
#: runtime's flags that runs carry (``runtime.FLAGS``: device, workers, precision, accum_steps,
#: data_root, weights_file), and ``log_every``, the training log's period.
RUNTIME_KEYS = tuple(k.name for k in KEYS if not k.hashed)
#: ``finetune.train`` keywords a run passes on (the rest of its keys choose task and model).
TRAIN_KEYS = tuple(k.name for k in KEYS if k.train)
KIND = KEY["kind"].default
#: The training settings of a run before its recipe overrides them (the recipe keys'
#: defaults, as JSON: ``betas`` a list).
TRAIN_DEFAULTS = json.loads(json.dumps({k.name: k.default for k in KEYS if k.recipe}))


def defining(run: dict) -> dict:
    """The part of a run that defines it: its ``RUN_KEYS`` that are not ``None``."""
    return {k: run[k] for k in RUN_KEYS if run.get(k) is not None}


def run_hash(run: dict) -> str:
    """A short stable hash of a run: of its ``defining`` keys only (key order does not
    matter; runtime keys do not count)."""
    text = json.dumps(defining(run), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def setting(run: dict) -> str:
    """A run's setting, as a key: its defining keys (``defining``) but its ``lr``."""
    return json.dumps({k: v for k, v in defining(run).items() if k != "lr"}, sort_keys=True,
                      default=str)


_D = {k.name: k.default for k in KEYS}  # each key's default, for make_run's signature


def make_run(task: str, config: str | list[str] = _D["config"], *, lr: float,
             seed: int = _D["seed"], recipe: str = "embedded",
             model: str | ModelSpec | None = None,
             checkpoint: str = _D["checkpoint"], pretrained: bool = _D["pretrained"],
             severity: int = _D["severity"], train_size: int = _D["train_size"],
             test_size: int = _D["test_size"], data_seed: int = _D["data_seed"],
             check_batch: bool = True, **settings) -> dict:
    """One run (a dict of its settings): ``TRAIN_DEFAULTS``, overridden by the recipe
    ``keys.RECIPES[recipe]`` (``"paper"`` also takes ``paper_datasets.PAPER_STEPS``), then
    by ``settings``.

    Args:
        task: a name of ``tasks.TASKS`` (a paper dataset needs the runtime key ``data_root``).
        config: a configuration of ``configurations.CONFIGS`` or a list of parameter patterns.
        lr, seed: peak learning rate; training seed (data order, the new head's init).
        model, checkpoint, pretrained: what ``models.load_model`` loads (default: the embedded
            model); a ``weights.ModelSpec`` also sets ``weights_file`` and ``model_kwargs``.
        severity, train_size, test_size, data_seed: task options (``tasks.load``); one
            ``data_seed`` fixes the splits for every training seed.
        check_batch: refuse here a batch larger than an embedded task's training split
            (``check_batches``: the task is loaded once per process, 1-2 s). ``grid`` and a
            study's listing pass False: what trains their runs (``runner.run_one``,
            ``sweep.run_sweep``) checks them, so listing a study loads no task.
        **settings: any other key of ``RUN_KEYS`` (``finetune.train`` keywords such as steps,
            batch_size, optimizer, clip_grad_norm (``None`` or 0: no clipping, stored as 0.0),
            lr_scales; ``img_size`` of paper datasets;
            ``model_kwargs`` of ``load_model``; ``prepare``, an ``ablations.PREPARE`` name, and
            ``ablation``, its arguments) or of ``RUNTIME_KEYS`` (``data_root``,
            ``weights_file``, ``workers``, ``log_every``, ``precision``, ``accum_steps``).

    Raises:
        ValueError: unknown recipe, task or configuration (naming the valid ones); a setting
            that fails the run schema: an unknown key, or a value of the wrong type or out of
            its range (``check_run``, naming the key, its value and what is valid); a batch
            larger than an embedded task's training split (``check_batches``; a paper
            dataset's is checked where its data is read: ``runner.run_one``, a sweep). The
            messages are those ``runner.run_one`` and ``sweep.run_sweep`` give.
    """
    from vitplast import models, weights
    from vitplast.datasets import paper_datasets, tasks

    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; valid: {list(RECIPES)}")
    if isinstance(config, str) and config not in configurations.CONFIGS:
        raise ValueError(f"unknown configuration {config!r}; valid: {list(configurations.CONFIGS)} "
                         "or a list of parameter-name patterns")
    model = model or models.EMBEDDED_NAME
    out = {"kind": KIND, "model": weights.name_of(model), "checkpoint": checkpoint,
           "pretrained": pretrained, "task": task, "severity": severity,
           "train_size": train_size, "test_size": test_size, "data_seed": data_seed,
           **TRAIN_DEFAULTS, **RECIPES[recipe]}
    if recipe == "paper" and task in paper_datasets.PAPER_STEPS:
        out["steps"] = paper_datasets.PAPER_STEPS[task]
    own = weights.own(model)  # a ModelSpec's weights and architecture: run keys of their own
    out.update({k: v for k, v in (("weights_file", str(own["weights_file"] or "")),
                                  ("model_kwargs", own["model_args"])) if v})
    out.update(config=config, lr=lr, seed=seed, **settings)
    if out["clip_grad_norm"] is None:  # no clipping, spelled as the stores spell it (0.0)
        out["clip_grad_norm"] = 0.0
    run = check_run(json.loads(json.dumps(out)))  # what the store holds (tuples: lists)
    if check_batch and tasks.source(task, run.get("data_root")) == "embedded":
        check_batches([run])  # a paper dataset's: where its data is read
    return run


def check_run(run: dict) -> dict:
    """``run`` if it passes the published run schema (``vitplast/schemas/run.schema.json``,
    read by ``vitplast.schema``) and its task is a task (``tasks.source``: a name of
    ``tasks.TASKS``, a paper dataset with ``data_root``). The schema: every key declared
    (``RUN_KEYS``, ``RUNTIME_KEYS``), each of its type and range (``lr`` > 0,
    ``clip_grad_norm`` >= 0 or null, ``momentum`` and ``label_smoothing`` in [0, 1),
    ``weight_decay`` >= 0, ``steps`` and ``batch_size`` >= 1, ...). Cheap: a sweep checks
    every run before it loads anything; what depends on the task's data (the training split)
    is ``check_batches``'s.

    Raises:
        ValueError: naming each key that fails, its value and what is valid; or an unknown
            task, naming the valid ones.
    """
    from vitplast.datasets import tasks

    checked = schema.check("run", run, "a run's settings")
    tasks.source(run["task"], run.get("data_root"))
    return checked


def check_ready(runs: list[dict]) -> None:
    """Refuse, before any run trains, what would fail every run here: a batch that does not
    fit its task (``check_batches``), a fetched model whose weights are not here
    (``FileNotFoundError`` in one line saying how to get them: ``fetched.path``; a sweep
    without them would store every run as failed). Checked by ``runner.run_one`` and a sweep."""
    check_batches(runs)
    for name in {c["model"] for c in runs} & set(fetched.FETCHED):
        fetched.path(name)


def check_batches(runs: list[dict]) -> None:
    """Refuse (``ValueError``, before any run trains) a run whose micro-batch
    (``batch_size / accum_steps``) is larger than its task's training split, or whose
    ``batch_size`` ``accum_steps`` does not divide: ``preflight.check_batch``'s message (the
    one ``finetune.train`` gives), after the run in a few words (``describe``). The split
    depends on the task and its options, so each distinct task is loaded once per process
    (``tasks.load``, about 1-2 s for an embedded task; its size is kept for the runs and
    sweeps that follow). Checked by ``make_run`` (embedded tasks), ``runner.run_one`` and
    ``sweep.run_sweep``."""
    from vitplast.train import preflight

    for c in runs:
        split = _train_split(json.dumps({k: c.get(k) for k in _TASK_KEYS}, sort_keys=True,
                                        default=str))
        try:
            preflight.check_batch(c["batch_size"], c.get("accum_steps") or 1, split,
                                  of=f" of task {c['task']!r}")
        except ValueError as err:
            raise ValueError(f"{describe(c)}: {err}") from None


#: The keys of a run that choose its task's splits (``task_of``).
_TASK_KEYS = ("task", "severity", "data_seed", "train_size", "test_size", "img_size",
              "data_root")


@functools.lru_cache(maxsize=None)
def _train_split(task_keys: str) -> int:
    """The size of the training split of the task a run's ``_TASK_KEYS`` (as JSON) choose."""
    return len(task_of(json.loads(task_keys)).train)


def describe(run: dict) -> str:
    """A run in a few words, for messages: task, configuration, lr, seed."""
    return (f"task {run.get('task')!r}, config {run.get('config')!r}, lr {run.get('lr')!r}, "
            f"seed {run.get('seed')!r}")


#: Run key -> the ``tasks.load`` option of an embedded task it sets.
_EMBEDDED_OPTIONS = {"severity": "severity", "data_seed": "seed", "train_size": "train_size",
                     "test_size": "test_size"}


def task_options(settings: dict) -> dict:
    """The ``tasks.load`` options of an embedded task that run ``settings`` set (those of its
    keys ``severity``, ``data_seed``, ``train_size``, ``test_size`` it holds)."""
    return {_EMBEDDED_OPTIONS[k]: v for k, v in settings.items() if k in _EMBEDDED_OPTIONS}


def task_of(run: dict):
    """The run's task (``tasks.load``), with the options its keys set. A paper dataset is
    transformed as the paper's model expects, at ``img_size`` (default 224)."""
    from vitplast.datasets import tasks

    options = task_options(run)  # an embedded task's
    if tasks.source(run["task"], run.get("data_root")) == "paper":
        options = dict(severity=run["severity"], seed=run["data_seed"],
                       img_size=run.get("img_size") or 224)
    return tasks.load(run["task"], run.get("data_root"), **options)


def grid(tasks, configs, lrs, seeds, **fixed) -> list[dict]:
    """Runs of the cartesian product, ordered task > config > lr > seed (seed fastest).

    Args:
        tasks, configs, lrs, seeds: lists. A configuration is a name of
            ``configurations.CONFIGS``, a list of patterns, or a dict of ``make_run`` keywords
            (with ``config``), as ``vitplast.experiments.confound_variants.variants`` makes.
        **fixed: ``make_run`` keywords shared by every run (recipe, steps, model...).

    Each run passes ``make_run``'s checks but the batch against its task's training split,
    which what trains them checks (``runner.run_one``, ``sweep.run_sweep``): a grid loads no
    task.
    """
    def one(t, c, lr, s):
        if isinstance(c, dict):
            return make_run(t, lr=lr, seed=s, check_batch=False, **{**fixed, **c})
        return make_run(t, c, lr=lr, seed=s, check_batch=False, **fixed)

    return [one(t, c, lr, s) for t in tasks for c in configs for lr in lrs for s in seeds]
