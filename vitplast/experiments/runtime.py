"""How a study runs: the settings of a sweep that are not the study (``Runtime``), where its
runs execute (``Executor``), and which of its runs one process takes (``select``).

Paper: none (the machinery of section 2's grids).

Importing this module imports no torch: the CLI builds ``vitplast sweep``'s choices from
``ORDERS``, ``EXECUTORS``, ``CLUSTERS`` and ``PRECISIONS`` here (the last read from the
published run schema), and every study kind (``vitplast.experiments.kinds``) checks a
``Runtime`` against the settings it honours (``Study.check``) before anything runs.

A *setting* is a run without its LR (``setting``): the unit a shard takes, a search
searches, and ``--batch-lrs`` batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from vitplast import schema
from vitplast.experiments.runs import defining

EXECUTORS = ("serial", "submitit")
#: submitit's clusters (``--cluster``): SLURM, its local executor, or in this process.
CLUSTERS = ("slurm", "local", "debug")
#: How ``select`` orders a study's runs: ``seed-first`` (every (task, configuration, lr)
#: once before the next seed, so a partial sweep covers the grid) or ``grid`` (as given).
ORDERS = ("seed-first", "grid")
#: A run's numeric precisions: the run schema's (``passes.PRECISIONS`` are the same).
PRECISIONS = tuple(p for p in schema.document("run")["properties"]["precision"]["enum"] if p)


@dataclass(frozen=True)
class Runtime:
    """Everything of a sweep that is not its study: which of its runs this process takes
    (``order``, ``shard``, ``limit``, ``retry_failed``) and how they execute. ``None`` (or
    False) leaves a setting out; a study kind refuses a setting it does not honour
    (``Study.check``, naming the kinds that do).

    Attributes:
        device: where runs train (``None``: CUDA when available).
        precision, workers, accum_steps: run keys that change how a run executes, never
            what it computes (``runs.RUNTIME_KEYS``: not in run hashes).
        eval_every: the validation period. It chooses the kept checkpoint, so it IS in run
            hashes: runs with another period are other runs, stored beside the study's.
        data_root, weights_file: where the paper study's datasets and weights lie.
        order: ``ORDERS`` (``None``: seed-first).
        shard: ``(i, n)``: every n-th setting (a run without its LR) from the i-th.
        limit: at most this many runs trained by this call.
        retry_failed: also re-run stored runs whose status is "failed" (once per call).
        batch_lrs: train a setting's LRs as one batched computation (``vitplast.train.batched``).
        progress: progress bars.
    """

    device: str | None = None
    precision: str | None = None
    workers: int | None = None
    accum_steps: int | None = None
    eval_every: int | None = None
    data_root: str | None = None
    weights_file: str | None = None
    order: str | None = None
    shard: tuple[int, int] | None = None
    limit: int | None = None
    retry_failed: bool = False
    batch_lrs: bool = False
    progress: bool = True

    def __post_init__(self):
        if self.order is not None and self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}; valid: {list(ORDERS)}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; valid: {list(PRECISIONS)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit takes N >= 1 (run at most N missing runs), got {self.limit}")
        if self.shard is not None:
            object.__setattr__(self, "shard", parse_shard(self.shard))

    def given(self) -> list[str]:
        """The settings given (not ``None`` or False), ``device`` and ``progress`` aside
        (every kind honours those)."""
        return [f.name for f in fields(self) if f.name not in ("device", "progress")
                and getattr(self, f.name) not in (None, False)]

    def run_keys(self) -> dict:
        """The keys this runtime adds to every run: precision, workers, accum_steps,
        eval_every, data_root, weights_file (those given)."""
        keys = ("precision", "workers", "accum_steps", "eval_every", "data_root", "weights_file")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


@dataclass(frozen=True)
class Executor:
    """Where runs execute: ``name`` (``EXECUTORS``: ``serial``, here one after another, or
    ``submitit``, a job array) and its ``options`` (submitit's ``folder``, ``cluster`` and
    ``update_parameters`` keywords, and ``runs_per_job``: ``vitplast.experiments.jobs``;
    the serial executor takes none)."""

    name: str = "serial"
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.name not in EXECUTORS:
            raise ValueError(f"unknown executor {self.name!r}; valid: {list(EXECUTORS)}")
        if self.name == "serial" and self.options:
            raise TypeError(f"the serial executor takes no options, got {sorted(self.options)}")
        per_job = self.options.get("runs_per_job")
        if per_job is not None and (not isinstance(per_job, int) or per_job < 1):
            raise ValueError(f"runs_per_job takes N >= 1 (runs per job), got {per_job!r}")
        if self.options.get("cluster") not in (None, *CLUSTERS):
            raise ValueError(f"unknown cluster {self.options['cluster']!r}; valid: "
                             f"{list(CLUSTERS)}")


def setting(run: dict) -> str:
    """A run's setting, as a key: its defining keys (``runs.defining``) but its ``lr``."""
    return json.dumps({k: v for k, v in defining(run).items() if k != "lr"}, sort_keys=True,
                      default=str)


def select(runs: list[dict], root: str | Path | None = None, *, order: str | None = None,
           shard: str | tuple[int, int] | None = None, limit: int | None = None) -> list[dict]:
    """The runs a sweep should take, in its order: ``order`` (``ORDERS``, default seed-first;
    seed-first keeps each seed's runs in their given order, seeds in order of first
    appearance), then every ``n``-th setting (``setting``: a run without its LR, in order of
    first appearance) from the ``i``-th of ``shard`` = ``(i, n)`` or ``"i/n"``
    (``parse_shard``; a setting's LRs stay in one process), then at most ``limit`` runs the
    store under ``root`` lacks.

    Raises:
        ValueError: unknown order, a shard not ``"i/n"`` or ``(i, n)`` with ``0 <= i < n``,
            a limit below 1 or without ``root``.
    """
    from vitplast.experiments.store import Store

    order = order or "seed-first"
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; valid: {list(ORDERS)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit takes N >= 1 (run at most N missing runs), got {limit}")
    if limit is not None and root is None:
        raise ValueError("limit needs root: the store whose missing runs it counts")
    runs = list(runs)
    if order == "seed-first":
        seeds = list(dict.fromkeys(r["seed"] for r in runs))
        runs.sort(key=lambda r: seeds.index(r["seed"]))
    if shard is not None:
        i, n = parse_shard(shard)
        mine = set(list(dict.fromkeys(map(setting, runs)))[i::n])
        runs = [r for r in runs if setting(r) in mine]
    if limit is not None:
        runs = [r for r in runs if not Store(root).has(r)][:limit]
    return runs


def parse_shard(shard: str | tuple[int, int]) -> tuple[int, int]:
    """``"1/4"`` or ``(1, 4)`` -> (1, 4); ``ValueError`` naming the valid forms for anything
    else, or unless ``0 <= i < n``."""
    try:
        i, n = (int(v) for v in (shard.split("/") if isinstance(shard, str) else shard))
    except (ValueError, TypeError):
        i, n = -1, 0
    if not 0 <= i < n:
        raise ValueError(f"shard takes 'I/N' or (I, N) with 0 <= I < N, e.g. '0/2'; "
                         f"got {shard!r}")
    return i, n
