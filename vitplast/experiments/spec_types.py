"""Study specs as values: what each kind of study (``vitplast.experiments.kinds``) reads to
make its runs, one frozen dataclass per kind.

Paper: section 2 (finetuning protocol) and section 5 (the configurations compared).

- ``Grid``: a fixed grid, per configuration its LRs, x tasks x seeds (the main study);
- ``Budget``: tasks and seeds at the baseline study's chosen LRs and their grid neighbours,
  with other training settings (the budget check);
- ``Confound``: the confound study's ``Part`` s, its LayerNorm scales' settings and the runs
  measured again after finetuning (``After``);
- ``Search``: settings whose LR is searched (``vitplast.experiments.search``), from a start
  LR per configuration (the suite, cross-gauge and length studies);
- ``PaperGrid``: the paper's grid on its datasets.

The values are in ``vitplast.experiments.study_specs``. A spec declares its primary questions
(``primaries``: at most ``verdicts.MAX_PRIMARIES`` ``primaries.Primary``). Importing this
module imports no torch. Sequences are tuples; a run's hash is of its run dict
(``runs.run_hash``), so a list or tuple makes the same run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union


@dataclass(frozen=True)
class _Spec:
    """What every spec has: its declared primary questions."""

    def __post_init__(self):
        from vitplast.stats.verdicts import MAX_PRIMARIES

        if len(self.primaries) > MAX_PRIMARIES:
            raise ValueError(f"a spec declares {len(self.primaries)} primaries; at most "
                             f"{MAX_PRIMARIES}")


@dataclass(frozen=True)
class Grid(_Spec):
    """Per configuration its ``lrs`` (configuration -> LRs), x ``tasks`` x ``seeds``, ordered
    task > configuration > LR > seed; ``fixed``: ``runs.make_run`` keywords of every run."""

    tasks: tuple[str, ...]
    lrs: Mapping[str, tuple[float, ...]]
    seeds: tuple[int, ...]
    fixed: Mapping = field(default_factory=dict)
    primaries: tuple = ()


@dataclass(frozen=True)
class Budget(_Spec):
    """On each of ``tasks`` x ``seeds``, each configuration of the baseline study at its
    chosen LR and that LR's two grid neighbours, with the training settings ``fixed``."""

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    fixed: Mapping = field(default_factory=dict)
    primaries: tuple = ()


@dataclass(frozen=True)
class Part:
    """A part of a confound study: named variants (``lrs`` maps a variant name, or an fnmatch
    pattern over names, to its LRs) on ``tasks``, with the run settings ``fixed``."""

    name: str
    tasks: tuple[str, ...]
    lrs: Mapping[str, tuple[float, ...]]
    fixed: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class After:
    """The runs a confound study trains again to measure plasticity after finetuning: per
    task and configuration, its baseline at the chosen LR, with ``seed``; ``n_pairs``
    pairs."""

    tasks: tuple[str, ...]
    seed: int
    n_pairs: int
    configs: tuple[str, ...]


@dataclass(frozen=True)
class Confound(_Spec):
    """A confound study: its ``parts``, run in order on ``seeds``; its LayerNorm scales
    measured on ``scale_tasks`` (matching ``target``'s plasticity, ``n_pairs`` per task);
    ``after``: what it measures again after finetuning."""

    seeds: tuple[int, ...]
    target: str
    n_pairs: int
    scale_tasks: tuple[str, ...]
    after: After
    parts: tuple[Part, ...]
    primaries: tuple = ()


@dataclass(frozen=True)
class Search(_Spec):
    """Settings (task x configuration x seed) whose LR is searched
    (``vitplast.experiments.search``).

    Attributes:
        configs: a name -> its start LR (a configuration of ``configurations.CONFIGS`` or a named
            confound variant), or -> a dict of run keywords with ``start`` (and ``variant``:
            start from that named variant's keywords).
        reuse: shipped stores whose identical runs are copied, not re-run.
        precision: the one precision of every run (``None``: the runtime's).
        grid: a fixed grid of LRs run for every setting too (its outcomes join the search).
        n_pairs: plasticity pairs per task, measured before finetuning (``None``: none).
        fixed: run keywords of every run.
    """

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    configs: Mapping[str, float | Mapping]
    reuse: tuple[str, ...] = ()
    precision: str | None = None
    grid: tuple[float, ...] = ()
    n_pairs: int | None = None
    fixed: Mapping = field(default_factory=dict)
    primaries: tuple = ()


@dataclass(frozen=True)
class PaperGrid(_Spec):
    """The paper's grid: ``model`` on ``tasks`` (its datasets) x ``configs`` x ``lrs``
    (DomainNet's: ``lrs_domainnet``) x ``seeds``, with the paper recipe."""

    model: str
    tasks: tuple[str, ...]
    configs: tuple[str, ...]
    lrs: tuple[float, ...]
    lrs_domainnet: tuple[float, ...]
    seeds: tuple[int, ...]
    primaries: tuple = ()


#: A study's spec: one of the types above (``studies.KINDS`` maps each to its study kind).
Spec = Union[Grid, Budget, Confound, Search, PaperGrid]
