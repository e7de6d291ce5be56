"""How a study runs: the settings of a sweep that are not the study (``Runtime``, one
``Flag`` each in ``FLAGS``), where its runs execute (``Executor``), how a shard is named
(``parse_shard``; which runs one process takes: ``vitplast.experiments.store.select``), and
the cores a Slurm job has and the data loader workers of a run (``slurm_cpus``, ``workers``).

Paper: none (the machinery of section 2's grids).

``FLAGS`` is the one declaration of the runtime settings: ``Runtime``'s fields, ``vitplast
sweep``'s arguments (``add_arguments``), the study kinds that honour each
(``Flag.kinds``, read by ``vitplast.experiments.kinds``) and the keys a runtime adds to every run
(``Runtime.run_keys``) are all read from it. A flag that is a run key (``Flag.run``) takes its
type, range and choices from the key's row of ``vitplast.train.keys.KEYS`` (``key_flag``),
where its description and run schema property are declared too. Importing this module imports
no torch.

A *setting* is a run without its LR (``vitplast.experiments.runs.setting``): the unit a shard
takes, a search searches, and ``--batch-lrs`` batches. This module imports no other module
of the experiments (they read it).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from vitplast.train.keys import KEY

EXECUTORS = ("serial", "submitit")
#: submitit's clusters (``--cluster``): SLURM, its local executor, or in this process.
CLUSTERS = ("slurm", "local", "debug")
#: How ``select`` orders a study's runs: ``seed-first`` (every (task, configuration, lr)
#: once before the next seed, so a partial sweep covers the grid) or ``grid`` (as given).
ORDERS = ("seed-first", "grid")
#: A run's numeric precisions (``--precision``: the run key's choices, ``keys.KEY``).
PRECISIONS = KEY["precision"].choices
#: The Python types a flag takes (``Flag.type``).
TYPES = (int, float, str, bool)


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


@dataclass(frozen=True)
class Flag:
    """One runtime setting: a field of ``Runtime`` and, with ``cli``, an argument of ``vitplast
    sweep`` (``--name-with-dashes``).

    Attributes:
        name: the ``Runtime`` field (and run key).
        type: ``int``, ``float``, ``str`` or ``bool`` (a switch: ``store_true``).
        help: the CLI's help.
        default: its value when not given (``None``, False, or ``progress``'s True).
        choices: its valid values (checked by ``Runtime`` and the CLI); empty: any.
        minimum: the least number it takes (checked by ``Runtime`` and the CLI).
        kinds: the study kinds (``Study.KIND``) that honour it; empty: every kind.
        run: what it is to a run: ``""`` nothing; ``"key"`` a runtime key every run carries
            (stored, not hashed); ``"hashed"`` a run key in its hash; ``"allowed"`` a runtime
            key a run may hold, which the runtime passes otherwise (``device``). A flag that
            is a run key is made by ``key_flag``, from its key.
        cli: an argument of ``vitplast sweep``.
        metavar: its CLI metavar.
        parse: reads a given value into the one stored, refusing what it cannot read, in
            place of the type check (``shard``: ``parse_shard``, so ``"I/N"`` and ``(I, N)``
            are both taken and ``(I, N)`` is stored); ``None``: the value as given.
    """

    name: str
    type: type
    help: str
    default: object = None
    choices: tuple = ()
    minimum: int | float | None = None
    kinds: tuple[str, ...] = ()
    run: str = ""
    cli: bool = True
    metavar: str | None = None
    parse: Callable | None = None

    def __post_init__(self):
        if self.type not in TYPES:
            raise TypeError(f"flag {self.name}: type takes one of "
                            f"{[t.__name__ for t in TYPES]}, got {self.type!r}")

    @property
    def option(self) -> str:
        """Its CLI option, ``--name-with-dashes``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value):
        """``value`` (read by ``parse`` when the flag has one), refused (``ValueError``, naming
        what is valid) when not of its type (a ``float`` flag takes an int too; a number is
        finite), outside its choices or below its minimum; ``None`` passes."""
        if value is None:
            return value
        if self.parse is not None:
            return self.parse(value)
        if not _of_type(value, self.type):
            raise ValueError(f"{self.name} takes {_WORDS[self.type]}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"unknown {self.name} {value!r}; valid: {list(self.choices)}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{self.name} takes N >= {self.minimum}, got {value}")
        return value


_WORDS = {int: "an integer", float: "a finite number", str: "a string", bool: "True or False"}


def _of_type(value, kind: type) -> bool:
    """Whether ``value`` is a value of a flag of type ``kind`` (a bool is no number)."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, kind)


def key_flag(name: str, help: str, *, run: str = "key", **options) -> Flag:
    """The flag of run key ``name`` (``keys.KEY``): its type, choices and minimum are the
    key's, and so is whether it is hashed (``run="hashed"``; else ``run``)."""
    key = KEY[name]
    return Flag(name, key.type, help, choices=key.choices, minimum=key.minimum,
                run="hashed" if key.hashed else run, **options)


_RUNTIME = "a runtime setting, not in run hashes"
#: The runtime settings, declared once (module docstring).
FLAGS = (
    key_flag("device", "cpu, cuda, ... (default: cuda if available)", run="allowed"),
    key_flag("workers", "DataLoader worker processes per run (default 0; in a SLURM job, its "
             f"cpus-per-task - 1); {_RUNTIME}"),
    key_flag("precision", "auto | fp32 | bf16 | fp16: autocast on CUDA (default auto: bf16 "
             "where supported, else fp16 with a gradient scaler); a runtime setting, not in run "
             "hashes; a study whose spec declares one keeps it"),
    key_flag("accum_steps", "split each batch into N equal micro-batches (same gradient, less "
             f"memory); {_RUNTIME}"),
    key_flag("eval_every", "validate every N steps instead of the study's period. It chooses "
             "the kept checkpoint, so it IS in run hashes: runs with another period are other "
             "runs, stored beside the study's (whose hashes stay as they are)"),
    key_flag("data_root", "folder of the paper datasets (layouts: "
             "vitplast.datasets.paper_datasets)", kinds=("paper",)),
    key_flag("weights_file", "local weights of ViT-B/16 in21k (default: the hub)",
             kinds=("paper",)),
    Flag("order", str, "seed-first (default): every (task, config, lr) once before the next "
         "seed, so a partial sweep covers the grid | grid", choices=ORDERS,
         kinds=("grid", "budget", "paper", "confound")),
    Flag("limit", int, "train at most N missing runs", minimum=1),
    Flag("shard", str, "every study kind: take only every N-th setting (a run without its LR: "
         "task, configuration, seed...) from the I-th (0-based), so N processes or machines "
         "share one store; a setting's LRs, and a searched setting's whole search, stay in one "
         "process", metavar="I/N", parse=parse_shard),
    Flag("batch_lrs", bool, "train the runs that differ only in their LR as one batched "
         "computation (vitplast.train.batched): many runs per device-minute on a GPU; the "
         "same results as one by one", default=False),
    Flag("retry_failed", bool, "also re-run the stored runs whose status is failed (once per "
         "call; without it a searched setting waits at a failed run)", default=False),
    Flag("progress", bool, "progress bars", default=True, cli=False))


def add_arguments(parser, flags: tuple[Flag, ...] = FLAGS) -> None:
    """The arguments of ``flags`` (default ``FLAGS``: ``vitplast sweep``'s) on argparse
    ``parser``; the help of a flag that some kinds only honour names them."""
    for f in (f for f in flags if f.cli):
        only = f" ({', '.join(f.kinds)} studies only)" if f.kinds else ""
        if f.type is bool:
            parser.add_argument(f.option, action="store_true", help=f.help + only)
            continue
        parser.add_argument(f.option, default=None, help=f.help + only,
                            choices=f.choices or None, metavar=f.metavar,
                            type=_parse(f.type, f.minimum))


def _parse(kind: type, low: int | float | None):
    """An argparse type: ``kind`` (``str``; ``int``; ``float``, finite) and, for a number,
    N >= ``low`` when given."""
    return kind if kind is str else at_least(low, kind)


def at_least(low: int | float | None, kind: type = int):
    """An argparse type: a number of ``kind`` (``int`` or ``float``, finite) N >= ``low``
    (``None``: any)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes {_WORDS[kind]}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"takes {_WORDS[kind]}, got {text!r}")
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"takes N >= {low}, got {value}")
        return value
    return parse


#: Each flag by its name.
FLAG = {f.name: f for f in FLAGS}


def _fields(cls):
    """``cls`` made a frozen dataclass with a field per flag of ``FLAGS`` (its default)."""
    cls.__annotations__ = {f.name: f"{f.type.__name__} | None" for f in FLAGS}
    for f in FLAGS:
        setattr(cls, f.name, f.default)
    return dataclass(frozen=True)(cls)


@_fields
class Runtime:
    """Everything of a sweep that is not its study: one field per ``FLAGS`` entry (each
    flag's help says what it does): which of its runs this process takes (``order``,
    ``shard``, ``limit``, ``retry_failed``) and how they execute. ``None`` (or False) leaves a
    setting out; a study kind refuses a setting it does not honour (``Study.check``, naming
    the kinds that do). ``shard`` is ``(i, n)`` (``parse_shard``; ``"i/n"`` is read as that).
    """

    def __post_init__(self):
        for f in FLAGS:
            object.__setattr__(self, f.name, f.check(getattr(self, f.name)))

    def given(self) -> list[str]:
        """The settings given (other than their defaults)."""
        return [f.name for f in FLAGS if getattr(self, f.name) != f.default]

    def run_keys(self) -> dict:
        """The keys this runtime adds to every run: its given flags that are run keys
        (``Flag.run``: precision, workers, accum_steps, eval_every, data_root, weights_file)."""
        return {f.name: getattr(self, f.name) for f in FLAGS
                if f.run in ("key", "hashed") and getattr(self, f.name) is not None}


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


def slurm_cpus() -> int | None:
    """The cores of the Slurm job this process runs in (``SLURM_CPUS_PER_TASK``, the one place
    it is read), else None (no Slurm job)."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(cpus) if cpus.isdigit() else None


def workers(given: int | None = None, cpus: int | None = None) -> int | None:
    """The data loader workers of a run: ``given``, else one fewer than ``cpus`` (a Slurm job's
    cores, ``slurm_cpus``: the training process keeps one), else None (this process reads the
    batches: ``finetune.train``'s default, 0).

    Read by ``vitplast sweep`` (``--workers``, else a submitit array's ``--cpus-per-task``) and
    by ``runner.build`` for a run that names none (the cores of the job training it)."""
    if given is not None:
        return given
    return max(cpus - 1, 0) if cpus else None
