"""Sentences: what a findings row says, in plain words, for the notebooks' Read cells.

A Read cell shows ``read(findings, claim, ...)``: one sentence per row, made from the row's own
numbers and verdict only (``vitplast.stats.verdicts``), so the words change when the data change.

A tested row reads in the order a student needs it (about ten seconds a row): its label, then
the verdict in words (resolved or not; whether that agrees with a claim the paper makes, only
where the row cites one; when it is not resolved, why: Holm stopped before it, Holm's level is
stricter than 95%, the data could not have decided it (the tasks needed, at the row's level, to
detect a named effect with its sign), or chance), then which way most tasks went with the mean
over all of them, then one interval: the one at the level Holm's step tested the row at, that
level named. The 95% interval, p and Holm p stay in the table (``verdicts.render``).
A descriptive row reads as an observation: its label, its verdict, and its value in words;
counts, ratios and taus carry no sign. A row with fewer than ``verdicts.MIN_N`` tasks gets
no interval.

Example: a primary row comparing MHA with LN1 over 33 tasks, 27 of them above, with mean
+3.34, 95% interval +1.9 to +4.8 (one primary, so Holm's level is 0.05) and the verdict
"resolved: positive" reads "MHA - LN1, test accuracy: Resolved (the paper makes no claim on
it). MHA came out above LN1 on 27 of 33 tasks (mean over all 33: +3.34 points); 95% CI +1.9
to +4.8 (level 0.05, Holm's step among the primary rows)."

A notebook's "What this shows" reads at most ``MAX_SHOWN`` rows (``summary``: the declared
primaries first); its appendix reads the rest (``appendix``).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping

import pandas as pd

from vitplast.stats import power as power_
from vitplast.stats import verdicts


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x) -> int:
    return int(x) if _finite(x) else 0


def _word(unit) -> str:
    """A unit's first words ("points, per task (seed-mean)" -> "points")."""
    return str(unit or "").split(",")[0].split(" (")[0].strip()


def _is_correlation(row: Mapping) -> bool:
    return row.get("interval") in verdicts.INTERVALS[1:]


def _left_out(row: Mapping) -> str:
    """A unit's note on the tasks left out ("partial rho, per task (2 of 3 tasks left out:
    ...)" -> "; 2 of 3 tasks left out: ..."), which its first words alone would drop."""
    unit = str(row.get("unit") or "")
    at = unit.find(" (")
    return f"; {unit[at + 2:].removesuffix(')')}" if at >= 0 and "left out" in unit else ""


def opening(row: Mapping) -> str:
    """The plain clause saying which way most tasks went, and the mean over all of them."""
    m, n = row.get("measured"), _count(row.get("n"))
    if not _finite(m):
        return f"no value over {n} tasks"
    above, below, word = _count(row.get("above")), _count(row.get("below")), _word(row["unit"])
    if row.get("interval") == verdicts.INTERVALS[2]:  # one correlation over the tasks
        return (f"{word} = {m:.2f} over {n} tasks" + (
            ": where one was larger, the other tended to be larger too" if m > 0
            else ": where one was larger, the other tended to be smaller" if m < 0
            else ""))
    if _is_correlation(row):  # a correlation per task
        return (f"positive on {above} of {n} tasks and negative on {below} (mean {word} "
                f"{m:+.2f}{_left_out(row)})")
    a, b = row.get("side_a") or "", row.get("side_b") or ""
    mean = f"mean over all {n}: {m:+.3g} {word}".rstrip()
    if a and b:
        if above == below:
            return f"{a} came out above {b} on {above} of {n} tasks and below on {below} ({mean})"
        win, lose, k = (a, b, above) if above > below else (b, a, below)
        return f"{win} came out above {lose} on {k} of {n} tasks ({mean})"
    if below > above:
        return f"below zero on {below} of {n} tasks and above on {above} ({mean})"
    return f"above zero on {above} of {n} tasks and below on {below} ({mean})"


def _ends(lo, hi) -> str:
    return f"{lo:+.2g} to {hi:+.2g}"


def _interval(row: Mapping) -> str:
    """The one interval a sentence gives: at the level Holm's step tested the row at, that
    level named; "" without one (fewer than ``MIN_N`` tasks)."""
    lo, hi = row.get("step_low"), row.get("step_high")
    if not (_finite(lo) and _finite(hi)):
        return ""
    level = row["level_step"]
    ends = [e for e, x in (("-1", lo), ("+1", hi)) if _is_correlation(row) and abs(x) >= 1]
    cut = f", cut at {' and '.join(ends)}, where a correlation ends" if ends else ""
    among = f" among the {row['family']} rows" if row.get("family") else ""
    return (f"{100 * (1 - level):.4g}% CI {_ends(lo, hi)} (level {level:.2g}, Holm's "
            f"step{among}{cut})")


def _settles(row: Mapping) -> str:
    """The verdict in words (the verdict words of ``verdicts``), and why where it is not
    resolved: Holm stopped before it, Holm's level is stricter than 95%, the data could not
    have decided it (the tasks needed at the row's level, to detect a named effect), or
    chance."""
    verdict = str(row.get("verdict", ""))
    if verdict.startswith("not resolved"):
        rest = verdict[len("not resolved"):].lstrip(": ")
        if rest.startswith("Holm stopped"):
            return ("Not resolved, although its own interval excludes 0: Holm's step-down "
                    "stopped at a row of its family with a smaller p, which was not resolved")
        why = ""
        lo, hi = row.get("ci_low"), row.get("ci_high")
        if _finite(lo) and _finite(hi) and (lo > 0 or hi < 0):  # 95% alone would decide
            m = round(verdicts.ALPHA / row["level"]) if _finite(row.get("level")) else 0
            why = (f"its 95% CI excludes 0, but Holm's correction for the {m} "
                   f"{row.get('family')} rows tests it at level {row['level_step']:.2g}, where "
                   "its interval includes 0; and ")
        if rest.startswith("underpowered"):
            power = row.get("power_paper")
            power = power if _finite(power) else row.get("power_observed")
            need = (f"about {row['n_needed']:.0f}" if _finite(row.get("n_needed")) else
                    f"more than {power_.MAX_N}")
            at = verdicts.power_level(row)
            return (f"Not resolved: {why}these data could not have decided it: at level "
                    f"{at:.2g}, detecting {verdicts.effect_named(row)} would take {need} tasks"
                    + (f" (power {power:.2f} with these {row['n']})" if _finite(power) else ""))
        power = row.get("power_paper")
        power = power if _finite(power) else row.get("power_observed")
        said = (f" (power {power:.2f} with these {row['n']} at level "
                f"{verdicts.power_level(row):.2g}, to detect {verdicts.effect_named(row)})"
                if _finite(power) else "")
        return f"Not resolved: {why}the difference from zero could be chance{said}"
    if verdict in ("agrees with the paper", "disagrees with the paper"):
        agrees = verdict.split(" ")[0]
        return f"Resolved, and it {agrees} with the paper ({row.get('paper')})"
    if verdict.startswith("resolved: "):
        return "Resolved (the paper makes no claim on it)"
    return f"{verdict[:1].upper()}{verdict[1:]}" if verdict else ""


def _plain(x) -> str:
    """A descriptive value without a sign on a positive number (counts, ratios, taus)."""
    if _finite(x):
        return format(x, ".3g")
    return str(x)


def _observation(row: Mapping) -> str:
    """A descriptive row as an observation: its verdict, then its value in words."""
    verdict = str(row.get("verdict", "")).strip()
    value, unit = row.get("measured"), str(row.get("unit") or "").strip()
    shown = "" if value is None or (isinstance(value, float) and math.isnan(value)) or str(
        value) in ("", "none", "not run") else _plain(value)
    if unit.startswith("(") and ")" in unit:  # "(orders), over components": drop the brackets
        close = unit.index(")")
        unit = unit[1:close] + unit[close + 1:]
    if "; " in unit:  # "what n counts; what the value is": the sentence gives no n
        counted, value = unit.split("; ", 1)
        unit = counted if value.startswith("n: ") else value
    what = unit
    detail = f" ({what}: {shown})" if shown and what else f" ({shown})" if shown else ""
    return f"{verdict}{detail}" if verdict else shown


def sentence(row: Mapping) -> str:
    """One plain sentence from a findings row (a ``verdicts.table`` row, as a dict or a Series):
    the row's label, what happened in a plain clause, the statistics, what its test settles
    (see the module docstring). Descriptive rows read as observations."""
    row = dict(row)
    label = str(row["claim"])
    if row.get("family") == "descriptive":
        if row.get("test") not in (None, "", "none") and _finite(row.get("measured")) and (
                row.get("side_a") or _is_correlation(row) or _finite(row.get("above"))):
            return f"{label}: {opening(row)}; {row.get('verdict')}."  # too few units to test
        said = _observation(row)
        if label.endswith("?"):  # a question: its answer follows
            return f"{label} {said[:1].upper()}{said[1:]}."
        return f"{label}: {said}."
    said, interval = opening(row), _interval(row)
    text = f"{label}: {_settles(row)}. {said[:1].upper()}{said[1:]}" + (
        f"; {interval}." if interval else ".")
    if row.get("fragile") is True:
        text += " Fragile: another LR choice tied on validation flips this verdict."
    return text


#: A sign before a count, a ratio or a tau ("+17 tasks", "+1 x", "+0 tau").
_SIGNED = re.compile(r"[+-]\d[\d.]*(?:e[+-]?\d+)? (?:tasks?|cases|layers|x\b|tau\b)")
_CI = re.compile(r"(\d+(?:\.\d+)?)% CI ([+-]?[\d.]+(?:e[+-]?\d+)?) to ([+-]?[\d.]+(?:e[+-]?\d+)?)")
_CORRELATION = re.compile(r"\brho\b|\br = |\br, over\b")


def problems(text: str) -> list[str]:
    """What rendered findings text must never say, one message per offending line: "n = 0",
    "(untested)", a sign on a count, ratio or tau, a correlation's interval outside [-1, 1],
    or "not resolved" beside an interval that excludes 0 without saying why (Holm's stricter
    level, or Holm stopping before the row). What the tests read executed notebooks with."""
    found = []
    for line in text.splitlines():
        what = [w for w, bad in (
            ("n = 0", "n = 0" in line), ("(untested)", "(untested)" in line),
            ("a signed count, ratio or tau", bool(_SIGNED.search(line)))) if bad]
        cis = [(float(lo), float(hi)) for _, lo, hi in _CI.findall(line)]
        if _CORRELATION.search(line) and any(abs(e) > 1 for ci in cis for e in ci):
            what.append("a correlation's interval outside [-1, 1]")
        if "not resolved" in line.lower() and any(lo > 0 or hi < 0 for lo, hi in cis) and not (
                "Holm's correction" in line or "Holm's step-down" in line):
            what.append("not resolved beside an interval that excludes 0, without why")
        found += [f"{w}: {line.strip()[:160]}" for w in what]
    return found


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


#: The most rows a notebook's "What this shows" reads; the rest are in its appendix.
MAX_SHOWN = 8


def shown(findings: pd.DataFrame, *claims: str) -> pd.DataFrame:
    """The rows a notebook's "What this shows" reads: the study's declared primaries (family
    "primary") first, then the rows ``claims`` names (``select``), in the table's order
    (primary, secondary, sensitivity, exploratory, descriptive) where none is named; at most
    ``MAX_SHOWN``.

    Raises:
        ValueError: a claim that matches no row or several (``select``), or more than
            ``MAX_SHOWN`` rows asked for.
    """
    primary = findings[findings["family"] == "primary"]
    named = select(findings, *claims) if claims else findings
    picked = pd.concat([primary, named[~named.index.isin(primary.index)]])
    if claims and len(picked) > MAX_SHOWN:
        raise ValueError(f"{len(picked)} rows asked for (primaries included); 'What this shows' "
                         f"reads at most {MAX_SHOWN}: leave the rest to the appendix")
    return picked.iloc[:MAX_SHOWN]


def summary(findings: pd.DataFrame, *claims: str):
    """What a notebook shows, as Markdown: the sentences of ``shown``'s rows (at most
    ``MAX_SHOWN``), for its "What this shows" cell."""
    from IPython.display import Markdown

    rows = shown(findings, *claims)
    return Markdown("\n".join(f"- {sentence(r)}" for _, r in rows.iterrows()))


def appendix(findings: pd.DataFrame, *claims: str):
    """Every row ``summary(findings, *claims)`` leaves out, as Markdown, in the table's order:
    the notebook's appendix, so that summary and appendix together read the whole table."""
    from IPython.display import Markdown

    rest = findings[~findings.index.isin(shown(findings, *claims).index)]
    if rest.empty:
        return Markdown("(none: \"What this shows\" read every row)")
    return Markdown("\n".join(f"- {sentence(r)}" for _, r in rest.iterrows()))
