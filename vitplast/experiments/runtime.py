"""How a study runs: the settings of a sweep that are not the study (``Runtime``, one
``Flag`` each in ``FLAGS``), where its runs execute (``Executor``), and how a shard is named
(``parse_shard``; which runs one process takes: ``vitplast.experiments.store.select``).

Paper: none (the machinery of section 2's grids).

``FLAGS`` is the one declaration of the runtime settings: ``Runtime``'s fields, ``vitplast
sweep``'s arguments (``add_arguments``), the study kinds that honour each
(``Flag.kinds``, read by ``vitplast.experiments.kinds``), the keys a runtime adds to every run
(``Runtime.run_keys``; ``runs.RUNTIME_KEYS``) and their part of the run schema
(``schema_properties``, which ``tests/test_schema.py`` holds equal to
``vitplast/schemas/run.schema.json``) are all read from it. Importing this module imports no
torch.

A *setting* is a run without its LR (``vitplast.experiments.runs.setting``): the unit a shard
takes, a search searches, and ``--batch-lrs`` batches. This module imports no other module
of the experiments (they read it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXECUTORS = ("serial", "submitit")
#: submitit's clusters (``--cluster``): SLURM, its local executor, or in this process.
CLUSTERS = ("slurm", "local", "debug")
#: How ``select`` orders a study's runs: ``seed-first`` (every (task, configuration, lr)
#: once before the next seed, so a partial sweep covers the grid) or ``grid`` (as given).
ORDERS = ("seed-first", "grid")
#: A run's numeric precisions (``passes.PRECISIONS`` are the same).
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Flag:
    """One runtime setting: a field of ``Runtime`` and, with ``cli``, an argument of ``vitplast
    sweep`` (``--name-with-dashes``).

    Attributes:
        name: the ``Runtime`` field (and run key).
        type: ``int``, ``str`` or ``bool`` (a switch: ``store_true``).
        help: the CLI's help.
        default: its value when not given (``None``, False, or ``progress``'s True).
        choices: its valid values (checked by ``Runtime`` and the CLI); empty: any.
        minimum: the least integer it takes (``Runtime``, the CLI and the run schema).
        kinds: the study kinds (``Study.KIND``) that honour it; empty: every kind.
        run: what it is to a run: ``""`` nothing; ``"key"`` a runtime key every run carries
            (stored, not hashed); ``"hashed"`` a run key in its hash; ``"allowed"`` a runtime
            key a run may hold, which the runtime passes otherwise (``device``).
        about: its description in the run schema.
        cli: an argument of ``vitplast sweep``.
        metavar: its CLI metavar.
    """

    name: str
    type: type
    help: str
    default: object = None
    choices: tuple = ()
    minimum: int | None = None
    kinds: tuple[str, ...] = ()
    run: str = ""
    about: str = ""
    cli: bool = True
    metavar: str | None = None

    @property
    def option(self) -> str:
        """Its CLI option, ``--name-with-dashes``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value):
        """``value``, refused (``ValueError``, naming what is valid) outside its choices or
        below its minimum; ``None`` passes."""
        if value is None:
            return value
        if self.choices and value not in self.choices:
            raise ValueError(f"unknown {self.name} {value!r}; valid: {list(self.choices)}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{self.name} takes N >= {self.minimum}, got {value}")
        return value

    def schema(self) -> dict:
        """Its property in the run schema (a run may leave it out, but a hashed key)."""
        nullable = self.run != "hashed"
        if self.choices:
            out = {"enum": [*self.choices, *([None] if nullable else [])]}
        else:
            kind = {int: "integer", str: "string"}[self.type]
            out = {"type": [kind, "null"] if nullable else kind}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        return {**out, **({"description": self.about} if self.about else {})}


_RUNTIME = "a runtime setting, not in run hashes"
#: The runtime settings, declared once (module docstring).
FLAGS = (
    Flag("device", str, "cpu, cuda, ... (default: cuda if available)", run="allowed"),
    Flag("workers", int, "DataLoader worker processes per run (default 0; in a SLURM job, its "
         f"cpus-per-task - 1); {_RUNTIME}", minimum=0, run="key", about="data loader workers"),
    Flag("precision", str, "auto | fp32 | bf16 | fp16: autocast on CUDA (default auto: bf16 "
         "where supported, else fp16 with a gradient scaler); a runtime setting, not in run "
         "hashes; a study whose spec declares one keeps it", choices=PRECISIONS, run="key"),
    Flag("accum_steps", int, "split each batch into N equal micro-batches (same gradient, less "
         f"memory); {_RUNTIME}", minimum=1, run="key",
         about="micro-batches per step; divides batch_size"),
    Flag("eval_every", int, "validate every N steps instead of the study's period. It chooses "
         "the kept checkpoint, so it IS in run hashes: runs with another period are other "
         "runs, stored beside the study's (whose hashes stay as they are)", minimum=1,
         run="hashed", about="steps between evaluations"),
    Flag("data_root", str, "folder of the paper datasets (layouts: "
         "vitplast.datasets.paper_datasets)", kinds=("paper",), run="key"),
    Flag("weights_file", str, "local weights of ViT-B/16 in21k (default: the hub)",
         kinds=("paper",), run="key"),
    Flag("order", str, "seed-first (default): every (task, config, lr) once before the next "
         "seed, so a partial sweep covers the grid | grid", choices=ORDERS,
         kinds=("grid", "budget", "paper", "confound")),
    Flag("limit", int, "train at most N missing runs", minimum=1),
    Flag("shard", str, "every study kind: take only every N-th setting (a run without its LR: "
         "task, configuration, seed...) from the I-th (0-based), so N processes or machines "
         "share one store; a setting's LRs, and a searched setting's whole search, stay in one "
         "process", metavar="I/N"),
    Flag("batch_lrs", bool, "train the runs that differ only in their LR as one batched "
         "computation (vitplast.train.batched): many runs per device-minute on a GPU; the "
         "same results as one by one", default=False),
    Flag("retry_failed", bool, "also re-run the stored runs whose status is failed (once per "
         "call; without it a searched setting waits at a failed run)", default=False),
    Flag("progress", bool, "progress bars", default=True, cli=False))


def add_arguments(parser) -> None:
    """``FLAGS``' arguments of ``vitplast sweep`` on argparse ``parser``; the help of a flag
    that some kinds only honour names them."""
    for f in (f for f in FLAGS if f.cli):
        only = f" ({', '.join(f.kinds)} studies only)" if f.kinds else ""
        if f.type is bool:
            parser.add_argument(f.option, action="store_true", help=f.help + only)
            continue
        parser.add_argument(f.option, default=None, help=f.help + only,
                            choices=f.choices or None, metavar=f.metavar,
                            type=f.type if f.minimum is None else at_least(f.minimum))


def at_least(low: int):
    """An argparse type: an integer N >= ``low``."""
    import argparse

    def parse(text: str) -> int:
        if int(text) < low:
            raise argparse.ArgumentTypeError(f"takes N >= {low}, got {int(text)}")
        return int(text)
    return parse


def schema_properties() -> dict:
    """The run schema's properties of the flags that are run keys (``Flag.schema``)."""
    return {f.name: f.schema() for f in FLAGS if f.run}


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
            f.check(getattr(self, f.name))
        if self.shard is not None:
            object.__setattr__(self, "shard", parse_shard(self.shard))

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
