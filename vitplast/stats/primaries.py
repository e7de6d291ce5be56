"""Primaries: the questions a study declares, and how they read.

A study preset (``vitplast.experiments.study_specs``) declares at most
``verdicts.MAX_PRIMARIES`` ``Primary`` questions (before any of its runs existed for the
searched studies; the main and confound studies declared theirs after, as the questions they
were built to answer: their presets say so); each becomes one
findings row of family "primary" (``Primary.row``: ``verdicts.mean_test`` over tasks, Holm over
the primaries only). ``primaries_table`` and ``described`` show what was declared, as a table
and in words, before the results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from vitplast import paper as _paper
from vitplast.stats.verdicts import mean_test


@dataclass(frozen=True)
class Primary:
    """A primary question, declared in a study preset (``vitplast.experiments.studies``; when,
    its preset says): at most ``verdicts.MAX_PRIMARIES`` per study, tested at
    ``verdicts.ALPHA`` with Holm over the primaries only.

    Either a difference of configuration groups, per task: the mean accuracy of the
    configurations ``a`` minus that of ``b`` (one name each: a paired difference of two
    configurations); or a per-task ``statistic`` named here and computed by the findings
    builder (``finetuning_findings.STATISTICS``, e.g. a within-task rank correlation).

    There is no default direction: a primary either ``cites`` a claim of the paper
    (``paper.CLAIMS``), whose direction its verdict is read against ("agrees with the paper",
    "disagrees with the paper", "not resolved"), or cites none and reads "resolved: positive",
    "resolved: negative" or "not resolved".

    Args:
        claim: how the row reads; name groups by what they are (component types), never by a
            property that was not measured.
        cites: the key of the paper's claim it tests (``paper.CLAIMS``); "" where the paper
            makes none.
        paper: the paper's value in the row's unit (NaN: it gives none); only with ``cites``.
        note: what the paper says or does instead, for a primary that cites nothing (e.g. "not
            tested in the paper (its groups differ in count by 1,500x)").

    Raises:
        ValueError: an unknown claim (naming the valid ones), or a value without a claim.
    """

    claim: str
    a: tuple[str, ...] = ()
    b: tuple[str, ...] = ()
    statistic: str = ""
    cites: str = ""
    paper: float = math.nan
    note: str = ""
    unit: str = "points, per task (seed-mean)"

    def __post_init__(self):
        if self.cites:
            _paper.claim(self.cites)  # raises on an unknown key
        elif math.isfinite(self.paper):
            raise ValueError(f"{self.claim!r}: a paper value ({self.paper}) needs the claim it "
                             f"comes from (cites, one of {sorted(_paper.CLAIMS)})")

    @property
    def expected(self) -> float:
        """The cited claim's direction (+1, -1, 0), NaN where the primary cites none."""
        return _paper.claim(self.cites).direction if self.cites else math.nan

    @property
    def source(self) -> str:
        """Where the paper makes the cited claim and what it says, or the ``note``."""
        if not self.cites:
            return "no claim in the paper" + (f": {self.note}" if self.note else "")
        c = _paper.claim(self.cites)
        return f"{c.source}: {c.says}"

    def values(self, acc: pd.DataFrame, statistics: dict | None = None) -> pd.Series:
        """One value per task: from ``acc`` (tasks x configurations) or ``statistics``
        (name -> per-task Series). Tasks lacking a configuration are left out; a study
        lacking one gives no values."""
        if self.statistic:
            if self.statistic not in (statistics or {}):
                raise ValueError(f"unknown statistic {self.statistic!r}; valid: "
                                 f"{sorted(statistics or {})}")
            return statistics[self.statistic].dropna()
        if not all(c in acc for c in (*self.a, *self.b)):
            return pd.Series(dtype=float)
        diff = acc[list(self.a)].mean(axis=1, skipna=False) - acc[list(self.b)].mean(
            axis=1, skipna=False)
        return diff.dropna()

    @property
    def sides(self) -> tuple[str, str] | None:
        """What a difference of groups compares, in words ("MHA", "the mean of LN1 and LN2");
        None for a statistic."""
        if self.statistic:
            return None
        return tuple(g[0] if len(g) == 1 else "the mean of " + ", ".join(g[:-1]) + f" and {g[-1]}"
                     for g in (self.a, self.b))

    def under(self, protocol: str, declared: str = "embedding") -> str:
        """The claim with its plasticity measured under ``protocol``: the ``declared`` protocol
        it names replaced by ``protocol``; a claim naming none gets "(plasticity: PROTOCOL
        protocol)" appended, so that each row of a primary under either protocol says which."""
        named = f"{declared} protocol"
        return (self.claim.replace(named, f"{protocol} protocol") if named in self.claim
                else f"{self.claim} (plasticity: {protocol} protocol)")

    def row(self, acc: pd.DataFrame, statistics: dict | None = None) -> dict:
        """The primary's findings row (family "primary"): ``paper`` is the cited claim with
        the paper's value, or "no claim in the paper" and the note. A statistic (a rank
        correlation: ``finetuning_findings.STATISTICS``) has its intervals cut to [-1, 1]."""
        paper = (f"{self.paper:+.2f}, {self.source}" if math.isfinite(self.paper)
                 else self.source)
        r = mean_test(self.claim, self.values(acc, statistics), paper=paper,
                      expected=self.expected, unit=self.unit, effect=self.paper,
                      sides=self.sides, bounded=bool(self.statistic))
        return {**r, "family": "primary"}


def _direction(expected: float) -> str:
    return ("none (no claim)" if math.isnan(expected) else
            {1: "+", -1: "-", 0: "about 0"}[int(expected)])


def primaries_table(primaries) -> pd.DataFrame:
    """The declared primaries as a table: ``claim``, ``tests`` (a - b, or the statistic),
    ``expected`` direction ("none (no claim)" where the primary cites no claim of the paper),
    the ``paper``'s value and its ``source``."""
    return pd.DataFrame([dict(claim=p.claim, tests=p.statistic or
                              f"mean of ({', '.join(p.a)}) - mean of ({', '.join(p.b)}), per task",
                              expected=_direction(p.expected), paper=p.paper,
                              source=p.source) for p in primaries],
                        columns=["claim", "tests", "expected", "paper", "source"])


def described(primaries):
    """The declared primaries in words, as Markdown (``IPython.display.Markdown``): per
    primary, P1, P2, ..., what it compares, in what unit, and the claim of the paper it tests
    (with the paper's value) or that it tests none and reads as a result."""
    from IPython.display import Markdown

    lines = []
    for i, p in enumerate(primaries, 1):
        what = (f"the statistic {p.statistic}" if p.statistic else
                f"the mean of ({', '.join(p.a)}) minus the mean of ({', '.join(p.b)})")
        if p.cites:
            c = _paper.claim(p.cites)
            value = f"; the paper's value {p.paper:+.2f}" if math.isfinite(p.paper) else ""
            tests = (f"It tests the paper's claim that {c.says} ({c.source}{value}): it reads "
                     "\"agrees with the paper\", \"disagrees with the paper\" or \"not "
                     "resolved\".")
        else:
            tests = (f"It tests no claim of the paper ({p.note or 'none made'}): it reads "
                     "\"resolved: positive\", \"resolved: negative\" or \"not resolved\".")
        lines.append(f"- **P{i}: {p.claim}.** Compares {what}, one value per task ({p.unit}). "
                     + tests)
    return Markdown("\n".join(lines))


__all__ = ["Primary", "described", "primaries_table"]
