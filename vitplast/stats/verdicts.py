"""Verdicts: findings rows, their tests, Holm families, power, and the one renderer.

A finding is a row: ``claim``; ``paper``, the paper's value or statement with its source
(``vitplast.paper``); ``measured``; ``ci95``, the half-width of its 95% t interval (NaN below
``MIN_N`` units); ``p``, two-sided, and ``p_holm``, Holm-corrected within the row's ``family``;
``n`` and its ``unit`` (the independent unit: tasks, never seeds of one task); ``verdict``.
Extra columns:

- ``family``: "primary" (a question the study declared in its preset:
  ``vitplast.stats.primaries``),
  "secondary" (the primaries asked again another declared way, e.g. with the paper's fixed LR
  grid), "sensitivity" (a declared row recomputed another way, e.g. under the other
  plasticity protocol), "exploratory" (every other tested row) or "descriptive" (no test, or
  n < 3). Holm runs within each family (``FAMILIES``), so adding an exploratory row never
  moves a primary's verdict.
- ``expected`` (the paper's sign for ``measured``: +1, -1, 0 where it reports about no
  difference, NaN where it states nothing); ``effect_paper`` (the paper's value in the row's
  unit, NaN where it gives none); ``sd`` (of the per-unit values).
- ``level``: alpha / m, m the number of tested rows of the family (Holm's first step);
  ``power_paper`` and ``power_observed`` (``vitplast.stats.power`` at the paper's effect and at
  the observed mean, given the observed SD and n) and ``n_needed`` (tasks for power 0.8 at the
  paper's effect, else the observed one), all three at the level the row states: the one its
  Holm step tested it at (``level_step`` below; ``power_level``).
- ``p_wilcoxon`` (signed-rank test on the same values), ``test``, ``counts`` (the trainable
  counts a matched comparison compares), ``fragile`` (another tied LR choice flips the
  verdict: ``finetuning_findings.with_ties``).
- ``side_a``, ``side_b``: what a difference a - b compares, in words ("" where the values are
  not a difference); ``above``, ``below``: how many units are above and below zero (what
  the sentence's opening clause counts).
- ``interval``: how the row's intervals are made (``INTERVALS``): "t" (the mean's t
  interval), "t, within [-1, 1]" (a mean of correlations: the t interval intersected with
  [-1, 1], where the mean lies, so its coverage and its agreement with the t test are
  unchanged) or "Fisher z" (one correlation over units: tanh of z +- its normal quantile /
  sqrt(n - 3), the same z as its p). ``ci_low``, ``ci_high``: the 95% interval;
  ``level_step``: the level Holm's step tested the row at (alpha / (m - k) for the row with
  the k-th smallest p of its family's m, k from 0); ``step_low``, ``step_high``: the interval
  at that level, which excludes 0 exactly where the row's own step rejects. No interval below
  ``MIN_N`` units (``MIN_N_CORRELATION`` for one correlation).

Verdicts, after Holm at ``alpha``, tied to claims: a row that cites a claim of the paper (its
``paper`` column names the table, figure or section, and ``expected`` is that claim's sign)
reads "agrees with the paper" / "disagrees with the paper" when the mean is significant and its
sign is / is not the paper's; where the paper reports no difference (``expected`` 0) a
significant one disagrees. A row that cites none (``expected`` NaN: there is no default
direction) reads "resolved: positive" / "resolved: negative" when significant. Otherwise
"not resolved", and "not resolved: underpowered (about N tasks needed to detect the paper's
0.37 points)" where the power (at the paper's effect, else the observed one: ``effect_named``)
is below ``UNDERPOWERED``; "not resolved: Holm stopped at a row with a smaller p" where the
row's own step would reject but Holm's step-down stopped before it. Descriptive rows carry
their own verdict; a row demoted for too few units reads "too few tasks to test". Prose is
made from rows by ``render`` (every column, for a table's reader) and ``report.sentences``
(the Read cells' words) only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from vitplast.stats import power as _power

COLUMNS = ["claim", "paper", "measured", "ci95", "p", "p_holm", "n", "unit", "verdict"]
EXTRA = ["family", "expected", "effect_paper", "sd", "level", "power_paper", "power_observed",
         "n_needed", "p_wilcoxon", "test", "counts", "fragile", "side_a", "side_b", "above",
         "below", "interval", "ci_low", "ci_high", "level_step", "step_low", "step_high"]
ALPHA = 0.05
#: A "not resolved" row with power below this reads "underpowered".
UNDERPOWERED = 0.5
#: The tested families, in the order a table lists them; Holm runs within each.
FAMILIES = ("primary", "secondary", "sensitivity", "exploratory")
#: Fewer units than this: the row is descriptive, never in a test family, and has no interval.
MIN_N = 3
#: One correlation over units (``correlation_test``) needs this many: Fisher's z has n - 3.
MIN_N_CORRELATION = 4
#: How a row's intervals are made (the ``interval`` column): see the module docstring.
INTERVALS = ("t", "t, within [-1, 1]", "Fisher z")
# The thresholds of the descriptive rows' verdicts (``plasticity_findings``,
# ``finetuning_findings``), in one place: every verdict word is computed from one of these
# named numbers.
#: A 95% CI half-width at most this fraction of its estimate reads "precise" (notebook 01).
PRECISE = 0.05
#: A mean Kendall tau at or above this reads "order held" (notebook 02, along pretraining).
ORDER_HELD_TAU = 0.7
#: |log(ratio)| below this reads "scale-invariant" (notebook 02, MHA at two input scales).
SCALE_INVARIANT = 0.1
#: A bound within this factor of plasticity reads "tight" (notebook 06), and an interval around
#: Lip(f) whose ends are within this factor reads "known" (notebook 03b).
TIGHT = 2.0
#: Prop. 1 assumes tokens share sigma: read as holding while the per-token cv of sigma is below
#: this in every layer (notebook 03).
SHARED_SIGMA_CV = 0.05
#: Largest difference of two training-loss histories that reads "the same trajectory"
#: (notebook 07, the gauge pairs): rounding differences of fp32 runs, far below a step's change.
SAME_TRAJECTORY = 1e-3
#: A measured ratio within this relative deviation of its derived factor reads "as derived":
#: notebook 02b, plasticity's ratio under the gauge (a median over layers of measured rates)
#: against the factor derived for it (LN / c, FC1 x 1, FC2 x c); and notebook 07's recipe and
#: gauge factors, the largest deviation over tasks of per-task means (``scale_findings``).
AS_DERIVED = 0.02
#: A mean rank at or below this (1 = highest of the five components) reads "highest"
#: (notebook 04, where MHA sits).
TOP_RANK = 1.5
_NAN_COLUMNS = ("expected", "effect_paper", "sd", "level", "power_paper", "power_observed",
                "n_needed", "p_wilcoxon", "above", "below", "ci_low", "ci_high", "level_step",
                "step_low", "step_high")


MAX_PRIMARIES = 3


def same(ok: bool) -> str:
    """The verdict of a comparison with the paper that is not a test (no units to test over):
    "same as" / "differs from", never a test's "agrees" / "disagrees"."""
    return "same as the paper" if ok else "differs from the paper"


def exact(ok: bool) -> str:
    """The verdict of an exact computation (no sampling of units: nothing to test)."""
    return "same as the paper (exact check)" if ok else "differs from the paper (exact check)"


def checked(ok: bool) -> str:
    """The verdict of an exact check that tests no claim of the paper (an objection's check, a
    derivation of the kit's): it reads as a result, never as agreement with the paper."""
    return "holds (exact check)" if ok else "fails (exact check)"


def _t_interval(values: np.ndarray) -> tuple[float, float]:
    """(half-width of the 95% t interval of the mean, two-sided one-sample t p)."""
    n = len(values)
    if n < MIN_N:
        return math.nan, math.nan
    sd = values.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    if sd == 0:
        return 0.0, (1.0 if values.mean() == 0 else 0.0)
    return float(half), float(stats.ttest_1samp(values, 0.0).pvalue)


def mean_test(claim: str, values, *, paper: str, expected: int, unit: str,
              effect: float = math.nan, sides: tuple[str, str] | None = None,
              bounded: bool = False) -> dict:
    """A finding on the mean of per-unit values (e.g. per-task differences a - b, or per-task
    correlations): one-sample t test and Wilcoxon signed-rank test of mean 0, over the units.

    Args:
        values: one number per independent unit (NaN dropped).
        expected: the paper's sign for the mean (+1, -1; 0: about no difference; NaN: the
            paper states nothing).
        effect: the paper's value in the same unit (NaN: none), for the power at it.
        sides: (a, b) in words where the values are differences a - b (the sentence then
            says which came out above, on how many units).
        bounded: the values are correlations (in [-1, 1]): the intervals are cut to [-1, 1].
    """
    v = pd.Series(values, dtype=float).dropna().to_numpy()
    ci, p = _t_interval(v)
    w = (float(stats.wilcoxon(v).pvalue) if len(v) > 1 and (v != 0).any() else math.nan)
    a, b = sides or ("", "")
    return dict(claim=claim, paper=paper, measured=float(v.mean()) if len(v) else math.nan,
                ci95=ci, p=p, n=len(v), unit=unit, expected=expected, p_wilcoxon=w,
                test="t (Wilcoxon beside)", effect_paper=effect,
                sd=float(v.std(ddof=1)) if len(v) > 1 else math.nan, family="exploratory",
                side_a=a, side_b=b, above=int((v > 0).sum()), below=int((v < 0).sum()),
                interval=INTERVALS[1] if bounded else INTERVALS[0])


def correlation_test(claim: str, x, y, *, paper: str, expected: float, unit: str) -> dict:
    """A finding on Pearson's r between two per-unit values (one pair per independent unit,
    NaN pairs dropped): ``measured`` r; ``p`` of Fisher's z (atanh r) * sqrt(n - 3) against
    the normal, the statistic its interval inverts, so the two always agree; ``ci95`` half
    the width of the Fisher-z 95% interval (the interval itself, asymmetric, in ``ci_low`` and
    ``ci_high`` of the table, and in ``test``). Fewer than ``MIN_N_CORRELATION`` pairs: no
    test, no interval (a descriptive row saying so)."""
    both = pd.concat([pd.Series(x, dtype=float).rename("x"),
                      pd.Series(y, dtype=float).rename("y")], axis=1).dropna()
    n, r, p, ci, test = len(both), math.nan, math.nan, math.nan, "Pearson r"
    if n >= 2 and both["x"].std() > 0 and both["y"].std() > 0:
        r = float(stats.pearsonr(both["x"], both["y"]).statistic)
    row = dict(claim=claim, paper=paper, measured=r, ci95=ci, p=p, n=n, unit=unit,
               expected=expected, test=test, family="exploratory", interval=INTERVALS[2])
    if n < MIN_N_CORRELATION:
        return {**row, "family": "descriptive", "test": "none",
                "verdict": f"too few tasks to test a correlation ({n}; it needs "
                           f"{MIN_N_CORRELATION})"}
    if math.isfinite(r):
        z = math.atanh(min(max(r, -1.0), 1.0))
        p = float(2 * stats.norm.sf(abs(z) * math.sqrt(n - 3)))
        lo, hi = _fisher(r, n, ALPHA)
        ci, test = (hi - lo) / 2, f"Pearson r, Fisher-z 95% CI [{lo:+.2f}, {hi:+.2f}]"
    return {**row, "p": p, "ci95": ci, "test": test}


def _fisher(r: float, n: int, level: float) -> tuple[float, float]:
    """Fisher's z interval of a correlation ``r`` over ``n`` units at ``level``: inside
    [-1, 1]; NaN below ``MIN_N_CORRELATION``."""
    if n < MIN_N_CORRELATION or not math.isfinite(r):
        return math.nan, math.nan
    z, half = math.atanh(min(max(r, -1.0), 1.0)), stats.norm.ppf(1 - level / 2) / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def interval(row, level: float) -> tuple[float, float]:
    """The (low, high) interval of a tested row at ``level`` (0.05: the 95% interval), made
    the row's way (its ``interval``: ``INTERVALS``); NaN for a descriptive row and below
    ``MIN_N`` units."""
    measured, n, kind = row["measured"], row["n"], row.get("interval") or INTERVALS[0]
    if (row.get("family") == "descriptive" or not isinstance(measured, (int, float))
            or not math.isfinite(measured) or not n >= MIN_N):
        return math.nan, math.nan
    if kind == INTERVALS[2]:
        return _fisher(measured, int(n), level)
    sd = row.get("sd", math.nan)
    if not math.isfinite(sd):
        return math.nan, math.nan
    half = float(stats.t.ppf(1 - level / 2, n - 1)) * sd / math.sqrt(n)
    lo, hi = measured - half, measured + half
    return (max(lo, -1.0), min(hi, 1.0)) if kind == INTERVALS[1] else (lo, hi)


def paired_test(claim: str, a: pd.Series, b: pd.Series, *, paper: str, expected: int,
                unit: str, effect: float = math.nan, sides: tuple[str, str] | None = None
                ) -> dict:
    """``mean_test`` of a - b, paired on their common index (the units); ``sides`` names a and
    b in words."""
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    return mean_test(claim, both["a"] - both["b"], paper=paper, expected=expected, unit=unit,
                     effect=effect, sides=sides)


def descriptive(claim: str, measured, *, paper: str, verdict: str, n: int, unit: str) -> dict:
    """A finding with no test, its ``verdict`` given (e.g. "same as the paper")."""
    return dict(claim=claim, paper=paper, measured=measured, ci95=math.nan, p=math.nan, n=n,
                unit=unit, expected=math.nan, p_wilcoxon=math.nan, test="none", verdict=verdict,
                family="descriptive")


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted)."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def too_few(n: int) -> str:
    """The verdict of a row with fewer than ``MIN_N`` units (no test, no interval)."""
    return ("nothing measured yet (no task)" if not n else
            f"too few tasks to test ({n}; a test needs {MIN_N})")


def effect_named(row) -> str:
    """The effect a row's power is computed at, in words, with its sign: "the paper's -0.10
    points" (MHA - full: full finetuning beats MHA in Table 1), else "the observed +2.1 points"
    (the unit's first word or words: "points", "rho", "decades"). The test is two-sided, so
    the power does not depend on the sign; the reader's sense of the claim does."""
    paper_ = isinstance(row["effect_paper"], float) and math.isfinite(row["effect_paper"])
    effect = row["effect_paper"] if paper_ else row["measured"]
    word = str(row["unit"]).split(",")[0].split(" (")[0].strip()
    whose = "the paper's" if paper_ else "the observed"
    shown = format(effect, "+.2f") if 0.01 <= abs(effect) < 100 else format(effect, "+.2g")
    if word in ("rho", "partial rho", "r", "tau"):
        return f"{whose} {word} of {shown}"
    return f"{whose} {shown} {word}".rstrip()


def _verdict(row, alpha: float) -> str:
    if row["family"] == "descriptive":
        return row["verdict"] or too_few(row["n"])
    if math.isnan(row["p_holm"]) or row["p_holm"] >= alpha:
        if row["p"] < row["level_step"]:  # its own step rejects; an earlier one did not
            return "not resolved: Holm stopped at a row with a smaller p"
        power = row["power_paper"] if math.isfinite(row["power_paper"]) else row["power_observed"]
        if math.isfinite(power) and power < UNDERPOWERED:
            need = (f"about {row['n_needed']:.0f}" if math.isfinite(row["n_needed"])
                    else f"more than {_power.MAX_N}")
            return f"not resolved: underpowered ({need} tasks needed to detect " \
                   f"{effect_named(row)})"
        return "not resolved"
    if math.isnan(row["expected"]):  # the paper states nothing on it
        return "resolved: " + ("positive" if row["measured"] > 0 else "negative")
    if row["expected"] == 0:  # the paper reports about no difference
        return "disagrees with the paper"
    same = np.sign(row["measured"]) == row["expected"]
    return "agrees with the paper" if same else "disagrees with the paper"


def _power_columns(df: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """``level``, ``power_paper``, ``power_observed`` and ``n_needed`` of the tested rows."""
    tested = df["family"] != "descriptive"
    m = df[tested].groupby("family")["p"].transform(lambda p: p.notna().sum())
    df.loc[tested, "level"] = alpha / m.clip(lower=1)
    rank = df[tested & df["p"].notna()].groupby("family")["p"].rank(method="first") - 1
    df.loc[rank.index, "level_step"] = alpha / (m[rank.index] - rank)
    for i, r in df[tested].iterrows():
        at = power_level(r)  # the level the row states: its Holm step's
        df.at[i, "power_paper"] = _power.power(r["effect_paper"], r["sd"], r["n"], at)
        df.at[i, "power_observed"] = _power.power(r["measured"], r["sd"], r["n"], at)
        effect = r["effect_paper"] if math.isfinite(r["effect_paper"]) else r["measured"]
        df.at[i, "n_needed"] = _power.n_needed(effect, r["sd"], at)
    return df


def power_level(row) -> float:
    """The level a tested row's power and tasks-needed are computed at: the one its Holm step
    tested it at (``level_step``, the level its sentence states), else (no p: nothing to
    rank) Holm's first step, ``level``."""
    step = row.get("level_step", math.nan)
    return step if isinstance(step, float) and math.isfinite(step) else row["level"]


def table(rows: list[dict], alpha: float = ALPHA) -> pd.DataFrame:
    """A findings table: rows with n < ``MIN_N`` made descriptive, Holm within each family
    (``FAMILIES``), power at the level of each row's Holm step (``power_level``), then verdicts.

    Raises:
        ValueError: more than ``MAX_PRIMARIES`` primary rows.
    """
    df = pd.DataFrame(rows)
    for col in [*COLUMNS, *EXTRA]:
        if col not in df:
            df[col] = (math.nan if col in (*_NAN_COLUMNS, "p", "ci95", "p_holm") else
                       False if col == "fragile" else "" if col != "family" else "exploratory")
    for col in ("verdict", "side_a", "side_b", "interval"):
        df[col] = df[col].fillna("")
    df["fragile"] = df["fragile"].astype("boolean").fillna(False).astype(bool)
    df["family"] = df["family"].fillna("exploratory")
    if (df["family"] == "primary").sum() > MAX_PRIMARIES:
        raise ValueError(f"at most {MAX_PRIMARIES} primary questions per study")
    few = (df["family"] != "descriptive") & ~(df["n"] >= MIN_N)
    df.loc[few, ["family", "p"]] = ["descriptive", math.nan]
    df.loc[~(df["n"] >= MIN_N), "ci95"] = math.nan  # no interval below MIN_N units
    df["p_holm"] = math.nan
    for family in FAMILIES:
        mask = df["family"] == family
        df.loc[mask, "p_holm"] = holm(df.loc[mask, "p"])
    df = _power_columns(df, alpha)
    for i, r in df.iterrows():
        df.loc[i, ["ci_low", "ci_high"]] = interval(r, ALPHA)
        df.loc[i, ["step_low", "step_high"]] = interval(r, r["level_step"]) if math.isfinite(
            r["level_step"]) else (math.nan, math.nan)
    df["verdict"] = [_verdict(r, alpha) for _, r in df.iterrows()]
    order = {f: i for i, f in enumerate((*FAMILIES, "descriptive"))}
    df = df.sort_values("family", key=lambda f: f.map(order), kind="stable")
    return df[[*COLUMNS, *EXTRA]].reset_index(drop=True)


def _num(x, fmt: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _power_text(r) -> str:
    if r.family == "descriptive":
        return ""
    at = (f"power {_num(r.power_paper, '.2f')} at the paper's effect, "
          if math.isfinite(r.power_paper) else "power ")
    return (f"; {at}{_num(r.power_observed, '.2f')} at the observed one (level "
            f"{_num(power_level(r._asdict()), '.2g')}), n for power 0.8: "
            f"{_num(r.n_needed, '.0f')}")


def render(findings: pd.DataFrame) -> str:
    """The findings as text, one line per row, primaries first: the only prose the kit makes
    of results."""
    lines = []
    for r in findings.itertuples():
        sign = "+" if r.family != "descriptive" else ""  # no sign on counts, ratios, taus
        measured = (_num(r.measured, f"{sign}.3g") if isinstance(r.measured, float)
                    else str(r.measured))
        stats_ = (f"; 95% CI {_num(r.ci_low, '+.2g')} to {_num(r.ci_high, '+.2g')}, at Holm's "
                  f"level {_num(r.level_step, '.2g')}: {_num(r.step_low, '+.2g')} to "
                  f"{_num(r.step_high, '+.2g')}; p = {_num(r.p, '.2g')}, Holm p = "
                  f"{_num(r.p_holm, '.2g')}" if r.family != "descriptive" else "")
        fragile = " (fragile: another tied LR choice flips it)" if r.fragile else ""
        n = f"n = {r.n}" if r.n else "no units yet"
        lines.append(f"- [{r.family}] {r.claim}: {measured} {r.unit} ({n}{stats_}"
                     f"{_power_text(r)}). Paper: {r.paper}. Verdict: {r.verdict}{fragile}.")
    return "\n".join(lines)


