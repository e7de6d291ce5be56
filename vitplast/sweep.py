"""Sweeps: grids of finetuning runs and the executors that run them.

Paper: section 2 (finetuning protocol: configurations x LR grid x seeds per dataset).

A run is a flat JSON-able dict (``run_config``) of every setting that affects its result; its
``store.config_hash`` names the record file. ``run_sweep`` runs only what the store lacks and
saves each record the moment it finishes, so a killed sweep resumes losing nothing; a
diverged or failed run is recorded as such. Tables over the store: ``vitplast.results``.

Used by notebooks 04-06.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import platform
import subprocess
import time
import traceback
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from vitplast import ablations, components, data, finetune, models, paper_datasets, store
from vitplast.results import expected_status, runs_table
from vitplast.results import results as stored_runs

KIND = "finetune"
EXECUTORS = ("serial", "submitit")
#: The paper's grids (PAPER.md section 2); DomainNet uses ``PAPER_LRS_DOMAINNET``.
PAPER_LRS = (1e-3, 3e-3, 1e-2, 3e-2)
PAPER_LRS_DOMAINNET = (3e-3, 1e-2, 3e-2, 6e-2)
PAPER_SEEDS = (0, 42, 3407)
#: Name -> ``prepare(model, config)``, run after loading and before training; ablations
#: register here and a run names one with the config key ``prepare``.
PREPARE: dict[str, Callable] = dict(ablations.PREPARE)

# Not part of a run's config (runtime objects, or fixed for finetuning). A new keyword of
# ``finetune.train`` enters every config, changing every hash: list it here unless sweeps vary
# it (tests/test_sweep.py checks the shipped results still match the study).
_RUNTIME = ("val_set", "test_set", "augment", "device", "on_eval", "progress", "keep_best")
_TRAIN_DEFAULTS = {k: p.default for k, p in inspect.signature(finetune.train).parameters.items()
                   if p.default is not inspect.Parameter.empty and k not in _RUNTIME}

def run_config(task: str, config: str | list[str] = "full", *, lr: float, seed: int = 0,
               recipe: str = "embedded", model: str = models.EMBEDDED_NAME,
               checkpoint: str = "final", pretrained: bool = True, severity: int = 5,
               train_size: int = 5000, test_size: int = 2000, data_seed: int = 0,
               **settings) -> dict:
    """One run's config: ``finetune.train``'s defaults, overridden by the recipe
    ``finetune.RECIPES[recipe]`` (``"paper"`` also takes ``paper_datasets.PAPER_STEPS``), then
    by ``settings``.

    Args:
        task: a name of ``data.EMBEDDED_TASKS``, or with ``data_root`` of ``PAPER_DATASETS``.
        config: a configuration of ``components.CONFIGS`` or a list of parameter patterns.
        lr, seed: peak learning rate; training seed (data order, the new head's init).
        model, checkpoint, pretrained: what ``models.load_model`` loads.
        severity, train_size, test_size, data_seed: task options (``data.load_task``); one
            ``data_seed`` fixes the splits for every training seed.
        **settings: ``finetune.train`` keywords (steps, batch_size, optimizer, clip_grad_norm,
            ...) and extra keys, stored only when given: ``data_root``, ``img_size`` (paper
            datasets), ``model_kwargs``, ``weights_file`` (``load_model``), ``prepare`` (a
            ``PREPARE`` name), ``ablation`` (free-form).

    Raises:
        ValueError: unknown recipe, task, configuration or optimizer (naming the valid ones).
    """
    if recipe not in finetune.RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; valid: {list(finetune.RECIPES)}")
    tasks = list(paper_datasets.PAPER_DATASETS if settings.get("data_root")
                 else data.EMBEDDED_TASKS)
    if task not in tasks:
        raise ValueError(f"unknown task {task!r}; valid: {tasks} (paper datasets need data_root)")
    if isinstance(config, str) and config not in components.CONFIGS:
        raise ValueError(f"unknown configuration {config!r}; valid: {list(components.CONFIGS)} "
                         "or a list of parameter-name patterns")
    out = {"kind": KIND, "model": model, "checkpoint": checkpoint, "pretrained": pretrained,
           "task": task, "severity": severity, "train_size": train_size, "test_size": test_size,
           "data_seed": data_seed, **_TRAIN_DEFAULTS, **finetune.RECIPES[recipe]}
    if recipe == "paper" and task in paper_datasets.PAPER_STEPS:
        out["steps"] = paper_datasets.PAPER_STEPS[task]
    out.update(config=config, lr=lr, seed=seed, **settings)
    if out["optimizer"] not in finetune.OPTIMIZERS:
        raise ValueError(f"unknown optimizer {out['optimizer']!r}; valid: {finetune.OPTIMIZERS}")
    return json.loads(json.dumps(out))  # exactly what the store holds (tuples become lists)


def grid(tasks, configs, lrs, seeds, **fixed) -> list[dict]:
    """Run configs of the cartesian product, ordered task > config > lr > seed (seed fastest).

    Args:
        tasks, configs, lrs, seeds: lists. A configuration is a name of
            ``components.CONFIGS``, a list of patterns, or a dict of ``run_config`` keywords
            (with ``config``), as ``vitplast.ablations.variants`` makes.
        **fixed: ``run_config`` keywords shared by every run (recipe, steps, model...).
    """
    def one(t, c, lr, s):
        if isinstance(c, dict):
            return run_config(t, lr=lr, seed=s, **{**fixed, **c})
        return run_config(t, c, lr=lr, seed=s, **fixed)

    return [one(t, c, lr, s) for t in tasks for c in configs for lr in lrs for s in seeds]


def run_one(config: dict, *, device: str | torch.device | None = None,
            progress: bool = False) -> dict:
    """Run one config; return its record. A failing run is recorded, not raised.

    Record fields: ``status`` ("ok", "diverged" or "failed"), ``error`` (a failed run's
    exception line) and ``traceback``, ``test_acc``, ``test_loss``, ``best_val_acc``,
    ``best_step``, ``trainable``, ``seconds`` (whole run), ``train_seconds``, ``device``,
    ``history`` (``TrainResult.history``, see ``vitplast.finetune``), and provenance:
    ``machine`` (e.g. "x86_64, 2 cores"), ``vitplast``, ``torch``, ``timm``, ``python``,
    ``git_commit``, ``git_dirty``, ``date`` (UTC). Non-finite numbers become ``None``.

    Args:
        config: from ``run_config``.
        device: where to train; ``None`` picks CUDA when available.
        progress: show the training loop's progress bar.
    """
    start = time.perf_counter()
    device = models.pick_device(device)
    record = dict(status="failed", error=None, traceback=None, history=[])
    try:
        r = _train(config, device, progress)
        record.update(status="diverged" if r.diverged else "ok", test_acc=r.test_acc,
                      test_loss=r.test_loss, best_val_acc=r.best_val_acc, best_step=r.best_step,
                      trainable=r.trainable, train_seconds=r.seconds, history=r.history)
    except Exception as err:  # recorded; a KeyboardInterrupt still stops the sweep
        record["error"] = "".join(traceback.format_exception_only(type(err), err)).strip()
        record["traceback"] = traceback.format_exc()
    record.update(seconds=time.perf_counter() - start, device=str(device), **provenance(device))
    return _finite(record)


def _train(config: dict, device: torch.device, progress: bool) -> finetune.TrainResult:
    """Load the config's task and model, prepare the model, train it."""
    prepare = config.get("prepare")
    if prepare is not None and prepare not in PREPARE:
        raise ValueError(f"unknown prepare {prepare!r}; valid: {sorted(PREPARE)}")
    if config.get("data_root"):
        task = paper_datasets.load_paper_task(
            config["task"], config["data_root"], severity=config["severity"],
            img_size=config.get("img_size", 224), seed=config["data_seed"])
    else:
        task = data.load_task(config["task"], train_size=config["train_size"],
                              test_size=config["test_size"], severity=config["severity"],
                              seed=config["data_seed"])
    finetune.seed_everything(config["seed"])  # the new head's (and a random model's) init
    model = models.load_model(config["model"], pretrained=config["pretrained"],
                              checkpoint=config["checkpoint"], num_classes=task.num_classes,
                              weights_file=config.get("weights_file"), device=device,
                              **config.get("model_kwargs", {}))
    kwargs = {k: config[k] for k in _TRAIN_DEFAULTS if k in config}
    if prepare is not None:
        kwargs.update(PREPARE[prepare](model, config) or {})
    kwargs["betas"] = tuple(kwargs.get("betas", _TRAIN_DEFAULTS["betas"]))
    try:
        return finetune.train(model, task.train, task.val, task.test, device=device,
                              progress=progress, **kwargs)
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _finite(obj):
    """``obj`` with NaN and infinities replaced by ``None`` (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


@functools.lru_cache(maxsize=1)
def _git() -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes?) of the vitplast checkout, or (None, None)."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():  # an installed copy: no enclosing repo's commit
        return None, None

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout
    try:
        # results written into data/ while a sweep runs do not make the code dirty
        return git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain", "-uno", "--",
                                                          ".", ":(exclude)data"))
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        return None, None


def provenance(device: torch.device) -> dict:
    """Where and with what a result was made: machine, versions, git commit, UTC date."""
    import timm

    import vitplast

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = f"{platform.machine()}, {cores} cores"
    if device.type == "cuda":
        machine += f", {torch.cuda.get_device_name(device)}"
    commit, dirty = _git()
    return dict(machine=machine, vitplast=vitplast.__version__, torch=torch.__version__,
                timm=timm.__version__, python=platform.python_version(), git_commit=commit,
                git_dirty=dirty, date=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def run_sweep(configs: list[dict], root: str | Path, *, executor: str = "serial",
              device: str | torch.device | None = None, progress: bool = True,
              retry_failed: bool = False, **executor_kwargs) -> pd.DataFrame:
    """Run the configs the store under ``root`` lacks; each record is saved atomically by
    whoever ran it (this process or the cluster job) as soon as it finishes.

    Args:
        configs: run configs (``grid``, ``run_config``); duplicates run once.
        root: the results folder (``vitplast.store``).
        executor: ``"serial"`` (here, one run after another) or ``"submitit"`` (a job array:
            SLURM when available, else submitit's local executor).
        device: where each run trains; ``None`` picks CUDA when available.
        progress: a progress bar over runs.
        retry_failed: also re-run stored runs whose status is "failed".
        **executor_kwargs: submitit's ``folder`` (default ``root/submitit``), ``cluster``
            ("slurm", "local", "debug"; default detected) and ``update_parameters`` keywords
            (``timeout_min``, ``gpus_per_node``, ``slurm_array_parallelism``, ...).

    Returns:
        ``results`` rows of ``configs``, in order; a run without a record (its job died) has
        status "missing" and runs again next time.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid: {list(EXECUTORS)}")
    if executor == "serial" and executor_kwargs:
        raise TypeError(f"the serial executor takes no options, got {sorted(executor_kwargs)}")
    unknown = {c["prepare"] for c in configs if c.get("prepare") is not None} - set(PREPARE)
    if unknown:
        raise ValueError(f"unknown prepare {sorted(unknown)}; valid: {sorted(PREPARE)}")
    todo = {store.config_hash(c): c for c in configs if not store.exists(root, c)
            or (retry_failed and _stored(root, c)["status"] == "failed")}
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"sweep ({len(configs) - len(todo)} stored)",
               disable=not progress)
    if executor == "serial":
        for c in todo.values():
            _run_and_save(c, str(root), device)
            bar.update()
    elif todo:
        _submit(list(todo.values()), root, device, bar, **executor_kwargs)
    bar.close()
    records = {store.config_hash(c): _stored(root, c) or {"config": c, "status": "missing"}
               for c in configs}
    return runs_table(list(records.values()))


def _stored(root, config: dict) -> dict | None:
    return store.read_json(store.run_path(root, config)) if store.exists(root, config) else None


def _run_and_save(config: dict, root: str, device, registry: dict | None = None) -> str:
    """The job: run ``config`` and store its record; return its status."""
    PREPARE.update(registry or {})  # a fresh job process has only what its pickle brings
    record = run_one(config, device=device)
    store.save_run(root, config, record)
    return record["status"]


def _submit(configs, root, device, bar, folder=None, cluster=None, **parameters) -> None:
    """One submitit job array; wait for every job, warn about those that died."""
    import submitit

    executor = submitit.AutoExecutor(folder=folder or Path(root) / "submitit", cluster=cluster)
    executor.update_parameters(**parameters)
    n = len(configs)
    jobs = executor.map_array(_run_and_save, configs, [str(root)] * n, [device] * n,
                              [dict(PREPARE)] * n)
    for job in jobs:
        try:
            job.result()
        except Exception as err:  # killed (time limit, preemption...): no record, re-run later
            warnings.warn(f"job {job.job_id} died without a record: {err}", stacklevel=3)
        bar.update()


#: Where the embedded study's results are shipped (one JSON per run).
EMBEDDED_RESULTS = models.DATA_DIR / "finetune"
#: The embedded study (notebook 04's defaults): every embedded downstream task but plain
#: Fashion-MNIST (the pretraining domain) and one of its two geometric shifts, x the paper's
#: configurations plus head-only, x an SGD grid wide enough for every best LR to be interior,
#: x the paper's seeds. Recipe: ``finetune.RECIPES["embedded"]``. (A first grid, 3e-3..1, had
#: head-only's best at its top and no best at 3e-3 (fmnist_contrast, seed 0): shifted up.)
EMBEDDED_STUDY = dict(
    # the confound study's two tasks first: its baselines come from here
    tasks=["fmnist_contrast", "digits", "fmnist_gaussian_noise", "fmnist_motion_blur",
           "fmnist_snow", "fmnist_speckle_noise", "fmnist_rotate90"],
    configs=["full", "head", "LN1", "MHA", "LN2", "FC1", "FC2"],
    lrs=[0.01, 0.03, 0.1, 0.3, 1.0, 3.0],
    seeds=list(PAPER_SEEDS),
    # head-only (a linear head on frozen features) still peaked at 3 (fmnist_contrast, seed 0);
    # full and FC2 peaked at 0.01 (fmnist_motion_blur, seed 0), MHA and FC1 at 0.03. With
    # those, head still peaked at 10 (digits), full and MHA at 0.003 (fmnist_gaussian_noise,
    # fmnist_speckle_noise; seed 0): one more LR each.
    extra_lrs={"head": [10.0, 30.0], "full": [0.001, 0.003], "MHA": [0.001, 0.003],
               "FC1": [0.003], "FC2": [0.003]})


def study(tasks, configs, lrs, seeds, extra_lrs=None, **fixed) -> list[dict]:
    """A study's runs: ``grid(tasks, configs, lrs, seeds)``, plus each configuration of
    ``extra_lrs`` (a dict: configuration -> LRs) that is among ``configs`` at its extra LRs,
    so that its best LR can be interior too."""
    runs = grid(tasks, configs, lrs, seeds, **fixed)
    for config, more in (extra_lrs or {}).items():
        if config in configs:
            runs += grid(tasks, [config], more, seeds, **fixed)
    return runs


def trainable_table(model: torch.nn.Module, configs, *, train_head: bool = True) -> pd.DataFrame:
    """Exact trainable-parameter counts per configuration (``trainable``), and their share of
    the model (``percent``)."""
    total = sum(p.numel() for p in model.parameters())
    rows = []
    for config in configs:
        names = set(components.trainable_names(model, config, train_head=train_head))
        n = sum(p.numel() for name, p in model.named_parameters() if name in names)
        rows.append(dict(config=config if isinstance(config, str) else json.dumps(config),
                         trainable=n, percent=100 * n / total))
    return pd.DataFrame(rows)


def progress(configs: list[dict], root: str | Path) -> pd.DataFrame:
    """How far a study has got, per task and seed: runs ``expected``, by status (``ok``,
    ``diverged``, ``failed``, ``missing``), and ``hours_left``, the CPU time the missing runs
    should take at the mean time of the stored ok runs of the same configuration (of every
    stored ok run where that configuration has none). A last row, ``all``, sums them."""
    stored = stored_runs(root)
    ok = stored[stored["status"] == "ok"] if len(stored) else stored
    seconds = ok.groupby("config")["seconds"].mean() if len(ok) else pd.Series(dtype=float)
    fallback = ok["seconds"].mean() if len(ok) else math.nan
    key = [c["config"] if isinstance(c["config"], str) else json.dumps(c["config"])
           for c in configs]
    runs = pd.DataFrame(dict(task=[c["task"] for c in configs], seed=[c["seed"] for c in configs],
                             status=expected_status(stored, configs).to_numpy(),
                             hours=pd.Series(key).map(seconds).fillna(fallback) / 3600))
    runs.loc[runs["status"] != "missing", "hours"] = 0.0
    table = pd.crosstab([runs["task"], runs["seed"]], runs["status"])
    table = table.reindex(columns=["ok", "diverged", "failed", "missing"], fill_value=0)
    table.insert(0, "expected", table.sum(axis=1))
    table["hours_left"] = runs.groupby(["task", "seed"])["hours"].sum().round(2)
    table = table.reset_index()
    total = {"task": "all", "seed": "", **{c: table[c].sum() for c in table.columns[2:]}}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True).round({"hours_left": 2})


def log_session(root: str | Path, command: str, summary: pd.DataFrame, seconds: float,
                device: str | torch.device | None = None) -> Path:
    """Append one sweep session (command, provenance, wall time, and the status counts of
    the store after it) to ``root/study.json``, the study's provenance across sessions, and
    write ``summary`` (``results.results(root)``) to ``root/runs.csv``: every stored run, one
    row each, for readers without vitplast."""
    path = Path(root) / "study.json"
    log = store.read_json(path) or {"sessions": []}
    log["sessions"].append(dict(command=command, **provenance(models.pick_device(device)),
                                wall_seconds=round(seconds, 1),
                                status=summary["status"].value_counts().to_dict()))
    store.write_text(Path(root) / "runs.csv", summary.sort_values("run").to_csv(index=False))
    return store.write_json(path, log)
