"""Sentences: what a findings row says, in plain words, for the notebooks' Read cells.

A Read cell shows ``read(findings, claim, ...)``: one sentence per row, made from the row's own
numbers and verdict only (``vitplast.stats.verdicts``), so the words change when the data change.
A tested row says its value with sign and unit, its 95% CI, its n, its Holm p within its family,
and what that settles: whether the sign is resolved, whether that agrees with a claim the paper
makes (only where the row cites one), or, when it is not resolved, whether the data could have
decided it (its power). A descriptive row says its value and its verdict.

Example: a primary row with ``measured`` +1.2, ``ci95`` 0.5, ``n`` 33, ``p_holm`` 0.001 and
the verdict "resolved: positive" reads "MHA - LN1, test accuracy: +1.2 points, per task (95% CI
+0.7 to +1.7, n = 33, Holm p = 0.001 among the primary rows). Positive, and resolved (the paper
makes no claim on it)."
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

import pandas as pd


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _value(x) -> str:
    return format(x, "+.3g") if _finite(x) else str(x)


def _sign(x) -> str:
    return "positive" if x > 0 else "negative" if x < 0 else "zero"


def _stats(row: Mapping) -> str:
    parts = []
    if _finite(row.get("ci95")) and _finite(row.get("measured")):
        lo, hi = row["measured"] - row["ci95"], row["measured"] + row["ci95"]
        parts.append(f"95% CI {lo:+.2g} to {hi:+.2g}")
    parts.append(f"n = {row.get('n')}")
    if _finite(row.get("p_holm")):
        parts.append(f"Holm p = {row['p_holm']:.2g} among the {row.get('family')} rows")
    return ", ".join(parts)


def _settles(row: Mapping) -> str:
    """What the row's verdict settles, in words (the verdict words of ``verdicts``)."""
    verdict = str(row.get("verdict", ""))
    measured = row.get("measured")
    sign = _sign(measured).capitalize() if _finite(measured) else "The value"
    if verdict.startswith("not resolved"):
        rest = verdict[len("not resolved"):].lstrip(": ")
        if rest.startswith("underpowered"):
            return (f"{sign}, but not resolved, and these data could not have resolved it: "
                    f"{rest}.")
        return f"{sign}, but not resolved: the difference from zero could be chance."
    if verdict in ("agrees with the paper", "disagrees with the paper"):
        agrees = verdict.split(" ")[0]
        return f"{sign}, resolved, and it {agrees} with the paper ({row.get('paper')})."
    if verdict.startswith("resolved: "):
        sign = verdict[len("resolved: "):].capitalize()
        return f"{sign}, and resolved (the paper makes no claim on it)."
    return f"{verdict[:1].upper()}{verdict[1:]}." if verdict else ""


def sentence(row: Mapping) -> str:
    """One plain sentence from a findings row (a ``verdicts.table`` row, as a dict or a Series):
    the claim, its value with sign and unit, and what its test settles.

    Descriptive rows (no test) give their value and their verdict; tested rows add the 95% CI,
    n, the Holm p within their family and the verdict in words (see the module docstring).
    """
    row = dict(row)
    head = f"{row['claim']}: {_value(row.get('measured'))} {row.get('unit', '')}".rstrip()
    if row.get("family") == "descriptive":
        verdict = str(row.get("verdict", ""))
        return f"{head} (n = {row.get('n')}): {verdict}." if verdict else f"{head}."
    text = f"{head} ({_stats(row)}). {_settles(row)}"
    if row.get("fragile") is True:
        text += " Fragile: another LR choice tied on validation flips this verdict."
    return text


def select(findings: pd.DataFrame, *claims: str) -> pd.DataFrame:
    """The rows of ``findings`` whose claim is each of ``claims`` (exactly, or as the one claim
    containing it), in the order asked; all rows when none is asked.

    Raises:
        ValueError: a claim that matches no row, or more than one, naming the valid claims.
    """
    if not claims:
        return findings
    names = list(findings["claim"])
    picked = []
    for c in claims:
        hits = [i for i, n in enumerate(names) if n == c] or [
            i for i, n in enumerate(names) if c in n]
        if len(hits) != 1:
            close = difflib.get_close_matches(c, names, n=3, cutoff=0.3)
            what = "matches no claim" if not hits else f"matches {len(hits)} claims"
            raise ValueError(f"{c!r} {what}; valid claims: {names}"
                             + (f" (close: {close})" if close else ""))
        picked.append(hits[0])
    return findings.iloc[picked]


def text(findings: pd.DataFrame, *claims: str) -> str:
    """The sentences of the rows ``select`` picks, one Markdown bullet each."""
    return "\n".join(f"- {sentence(r)}" for _, r in select(findings, *claims).iterrows())


def read(findings: pd.DataFrame, *claims: str):
    """What the selected rows say, as Markdown for a notebook's Read cell."""
    from IPython.display import Markdown

    return Markdown(text(findings, *claims))
