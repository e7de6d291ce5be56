"""Sweeps: grids of finetuning runs and the executors that run them.

Paper: section 2 (finetuning protocol: configurations x LR grid x seeds per dataset).

A run is a flat JSON-able dict (``vitplast.runs.run_config``, re-exported here with ``grid``);
the hash of its defining keys (``runs.run_hash``) names the record file. ``run_sweep`` runs only
what the store lacks and saves each record the moment it finishes, so a killed sweep resumes
losing nothing; a diverged or failed run is recorded as such. Every run starts from a new,
seeded head (``models.new_head``). Tables over the store: ``vitplast.results``.

Used by notebooks 04-06.
"""

from __future__ import annotations

import functools
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

from vitplast import ablations, components, finetune, models, store, tasks
from vitplast.results import expected_status, runs_table
from vitplast.results import results as stored_runs
from vitplast.runs import TRAIN_KEYS, check_config, grid, run_config, run_hash  # noqa: F401

EXECUTORS = ("serial", "submitit")
#: The paper's grids (PAPER.md section 2); DomainNet uses ``PAPER_LRS_DOMAINNET``.
PAPER_LRS = (1e-3, 3e-3, 1e-2, 3e-2)
PAPER_LRS_DOMAINNET = (3e-3, 1e-2, 3e-2, 6e-2)
PAPER_SEEDS = (0, 42, 3407)
#: Name -> ``prepare(model, config)``, run after loading and before training; ablations
#: register here and a run names one with the config key ``prepare``.
PREPARE: dict[str, Callable] = dict(ablations.PREPARE)


def run_one(config: dict, *, device: str | torch.device | None = None,
            progress: bool = False) -> dict:
    """Run one config; return its record. A failing run is recorded, not raised.

    The model is loaded, its classifier replaced by a new one seeded by the run's seed
    (``models.new_head``; the final norm stays pretrained), the ablation's ``prepare`` applied,
    then ``finetune.train`` trains what the configuration selects.

    Record fields: ``status`` ("ok", "diverged" or "failed"), ``error`` (a failed run's
    exception line) and ``traceback``, ``initial_val_acc`` (validation accuracy before the
    first update: about chance with the new head), ``test_acc``, ``test_loss``,
    ``best_val_acc``, ``best_step``, ``trainable``, ``seconds`` (whole run), ``train_seconds``,
    ``device``,
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
        record.update(status="diverged" if r.diverged else "ok",
                      initial_val_acc=r.initial_val_acc, test_acc=r.test_acc,
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
    task = _task(config)
    finetune.seed_everything(config["seed"])  # a random model's init
    model = models.load_model(config["model"], pretrained=config["pretrained"],
                              checkpoint=config["checkpoint"], num_classes=task.num_classes,
                              weights_file=config.get("weights_file"), device=device,
                              **config.get("model_kwargs") or {})
    models.new_head(model, task.num_classes, seed=config["seed"])
    kwargs = {k: config[k] for k in TRAIN_KEYS if config.get(k) is not None}
    if prepare is not None:
        kwargs.update(PREPARE[prepare](model, config) or {})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    try:
        return finetune.train(model, task.train, task.val, task.test, device=device,
                              progress=progress, **kwargs)
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _task(run: dict) -> tasks.Task:
    """The run's task (``tasks.load``), with the options its keys set. A paper dataset is
    transformed as the paper's model expects, at ``img_size`` (default 224)."""
    options = dict(severity=run["severity"], seed=run["data_seed"])
    if tasks.check(run["task"], run.get("data_root")) == "paper":
        options["img_size"] = run.get("img_size") or 224
    else:
        options.update(train_size=run["train_size"], test_size=run["test_size"])
    return tasks.load(run["task"], run.get("data_root"), **options)


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

    Every run is claimed before it trains (``store.claimed``), so concurrent sweeps over one
    store, sharded or not, never train a run twice: a run claimed by a live process is left
    to it (and reads "missing" here until it is stored). Before running, orphan temp files of
    killed writes are deleted (``store.clean_temp``) and the files that are not complete
    records named in a warning (``store.audit``); one at a run's path is re-run.

    Args:
        configs: run configs (``grid``, ``run_config``); duplicates run once. Each is checked
            (``runs.check_config``) before anything is loaded.
        root: the results folder (``vitplast.store``).
        executor: ``"serial"`` (here, one run after another) or ``"submitit"`` (a job array:
            SLURM when available, else submitit's local executor).
        device: where each run trains; ``None`` picks CUDA when available.
        progress: a progress bar over runs, and (serial executor) one over the steps of the
            run in flight.
        retry_failed: also re-run stored runs whose status is "failed" (once: a failed record
            another sweep re-ran meanwhile is not re-run again).
        **executor_kwargs: submitit's ``folder`` (default ``root/submitit``), ``cluster``
            ("slurm", "local", "debug"; default detected) and ``update_parameters`` keywords
            (``timeout_min``, ``gpus_per_node``, ``slurm_array_parallelism``, ...).

    Returns:
        ``results`` rows of ``configs``, in order; a run without a record (its job died) has
        status "missing" and runs again next time.
    """
    _check_sweep(configs, root, executor, executor_kwargs)
    store.clean_temp(root)
    problems = store.audit(root)
    problems = problems[problems["kind"] != "claim"]
    if len(problems):
        warnings.warn(f"{len(problems)} file(s) under {root} are not complete run records: "
                      f"{problems['file'].tolist()[:5]}; see vitplast.store.audit(root)",
                      stacklevel=2)
    todo = {}  # hash -> (config, the modification time of the failed record to retry)
    for c in configs:
        if not store.exists(root, c):
            todo[run_hash(c)] = (c, None)
        elif retry_failed and _stored(root, c)["status"] == "failed":
            todo[run_hash(c)] = (c, store.run_path(root, c).stat().st_mtime_ns)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"sweep ({len(configs) - len(todo)} stored)",
               disable=not progress)
    if executor == "serial":
        for c, stale in todo.values():
            _run_and_save(c, str(root), device, stale=stale, progress=progress)
            bar.update()
    elif todo:
        _submit(list(todo.values()), root, device, bar, **executor_kwargs)
    bar.close()
    records = {run_hash(c): _stored(root, c) or {"config": c, "status": "missing"}
               for c in configs}
    return runs_table(list(records.values()))


def _check_sweep(configs, root, executor, executor_kwargs) -> None:
    """``run_sweep``'s arguments, before anything is loaded or run."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid: {list(EXECUTORS)}")
    if executor == "serial" and executor_kwargs:
        raise TypeError(f"the serial executor takes no options, got {sorted(executor_kwargs)}")
    if Path(root).exists() and not Path(root).is_dir():
        raise ValueError(f"root={str(root)!r} is a file: a store is a folder; give another path")
    for c in configs:
        check_config(c)
    unknown = {c["prepare"] for c in configs if c.get("prepare") is not None} - set(PREPARE)
    if unknown:
        raise ValueError(f"unknown prepare {sorted(unknown)}; valid: {sorted(PREPARE)}")


def _stored(root, config: dict) -> dict | None:
    return store.read_json(store.run_path(root, config)) if store.exists(root, config) else None


def _wanted(root, config: dict, stale: int | None) -> bool:
    """Whether ``config``'s run still needs running: no complete record, or (``stale``) the
    failed record seen when the sweep began is still there (no other sweep re-ran it)."""
    if not store.exists(root, config):
        return True
    path = store.run_path(root, config)
    return (stale is not None and _stored(root, config)["status"] == "failed"
            and path.stat().st_mtime_ns == stale)


def _run_and_save(config: dict, root: str, device, registry: dict | None = None,
                  stale: int | None = None, progress: bool = False) -> str:
    """The job: claim ``config``'s run, run it and store its record, release the claim;
    return its status, or "skipped" when another process holds the claim or has stored the
    run meanwhile."""
    PREPARE.update(registry or {})  # a fresh job process has only what its pickle brings
    with store.claimed(root, config) as mine:
        if not mine or not _wanted(root, config, stale):
            return "skipped"
        record = run_one(config, device=device, progress=progress)
        store.save_run(root, config, record)
    return record["status"]


def _submit(configs, root, device, bar, folder=None, cluster=None, **parameters) -> None:
    """One submitit job array over (config, stale) pairs; wait for every job, warn about
    those that died."""
    import submitit

    executor = submitit.AutoExecutor(folder=folder or Path(root) / "submitit", cluster=cluster)
    executor.update_parameters(**parameters)
    n = len(configs)
    jobs = executor.map_array(_run_and_save, [c for c, _ in configs], [str(root)] * n,
                              [device] * n, [dict(PREPARE)] * n, [stale for _, stale in configs])
    for job in jobs:
        try:
            job.result()
        except Exception as err:  # killed (time limit, preemption...): no record, re-run later
            warnings.warn(f"job {job.job_id} died without a record: {err}", stacklevel=3)
        bar.update()


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
    row each, for readers without vitplast. Concurrent sessions take turns (``store.locked``),
    so none is lost."""
    path = Path(root) / "study.json"
    session = dict(command=command, **provenance(models.pick_device(device)),
                   wall_seconds=round(seconds, 1),
                   status=summary["status"].value_counts().to_dict())
    with store.locked(path):
        log = store.read_json(path) or {"sessions": []}
        log["sessions"].append(session)
        store.write_text(Path(root) / "runs.csv", summary.sort_values("run").to_csv(index=False))
        return store.write_json(path, log)
