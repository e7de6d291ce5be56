"""Notebooks 03 and 03b's findings: do Props. 1-4 bracket the Lipschitz constant
(``propositions``, notebook 03), and how wide is the interval, does the order of the bounds give
the order of plasticity, and how do the bounds move under the gauge (``intervals``, 03b)?

Every row is descriptive (the layers of one model are not independent units), its verdict
computed from the numbers (``intervals.holds``: the one definition of a bound holding). A row
that checks a statement is labelled as its question ("is Prop. 4 below Prop. 3 for MHA?"), so
its label cannot contradict its answer ("no: Prop. 4 larger in 6 of 6 layers").

Paper: Propositions 1-4 and Takeaway 1.
"""

from __future__ import annotations

import pandas as pd

from vitplast.measure.components import NORMS
from vitplast.measure.gauge import RATE_FACTORS
from vitplast.measure.intervals import compare_rankings, holds
from vitplast.paper import PROPOSITIONS, TAKEAWAY1, VITB_RMS_TOKEN_NORM
from vitplast.stats.verdicts import SHARED_SIGMA_CV, TIGHT, checked, descriptive, same, table

#: Each proposition: its bound's column of ``intervals.intervals`` and its statement; the
#: components it bounds are ``paper.PROPOSITIONS``'s (Prop. 4: MHA's tighter bound).
_PROPS = {"Prop. 1": ("bound", "Lip(LN) <= ||gamma||_inf / sigma"),
          "Prop. 2": ("bound", "Lip(W) <= ||W||_2"),
          "Prop. 3": ("bound", "Lip(MHA) <= sum_h ... sqrt(3n + (12n+3) r^4 ...)"),
          "Prop. 4": ("bound_p4", "the tighter MHA bound, sqrt(n) + alpha^2 E ..")}


def _bounded_by(prop: str) -> list[str]:
    """The components ``prop`` bounds (Prop. 4: those of Prop. 3, MHA)."""
    prop = "Prop. 3" if prop == "Prop. 4" else prop
    return [c for c, p in PROPOSITIONS.items() if p == prop]


def _holds(bound: pd.Series, lipschitz_lower: pd.Series) -> str:
    bad = int((~holds(bound, lipschitz_lower)).sum())
    return f"yes: the bound was at least the lower end in all {len(bound)} cases" if bad == 0 \
        else f"no: the bound was below the lower end in {bad} of {len(bound)} cases"


def _in_takeaway1_order(order: list[str]) -> bool:
    rank = {c: i for i, group in enumerate(TAKEAWAY1) for c in group}
    return all(rank[a] <= rank[b] for a, b in zip(order, order[1:]))


def _apart(values: dict) -> list[str]:
    """Takeaway 1's "~" read with numbers: the pairs it calls about equal (FC1 ~ FC2, LN2 ~
    LN1) whose values differ by more than ``TIGHT`` times, in words ("FC2's bound 6.2x
    FC1's")."""
    said = []
    for group in TAKEAWAY1:
        v = {c: values[c] for c in group if c in values}
        if len(v) == 2:
            (lo, a), (hi, b) = sorted(v.items(), key=lambda kv: kv[1])
            if a > 0 and b / a > TIGHT:
                said.append(f"{hi}'s bound {b / a:.2g}x {lo}'s, not {' ~ '.join(group)}")
    return said


def bounds(df: pd.DataFrame, checks: pd.DataFrame, gauged: pd.DataFrame | None = None,
           c: float = 8.0, heads_diff: float | None = None) -> pd.DataFrame:
    """Both notebooks' findings in one table: ``propositions`` (notebook 03) and then
    ``intervals`` (notebook 03b), with the arguments of each."""
    return table(_proposition_rows(df, checks, heads_diff) + _interval_rows(df, gauged, c))


def propositions(df: pd.DataFrame, checks: pd.DataFrame,
                 heads_diff: float | None = None) -> pd.DataFrame:
    """Notebook 03's findings table: does each of Props. 1-4 hold where its assumption holds
    exactly (random weights) and on the model, how close does it come, and do the paper's
    plug-in values bound? Every row is descriptive (the layers of one model are not
    independent units), its verdict computed from the numbers.

    Args:
        df: ``intervals.intervals`` of one model, task and protocol.
        checks: ``intervals.random_checks``.
        heads_diff: the largest difference between attention recomputed head by head from
            row blocks (``bounds.attention_by_heads``) and the module's output (None: no row).
    """
    return table(_proposition_rows(df, checks, heads_diff))


def intervals(df: pd.DataFrame, gauged: pd.DataFrame | None = None,
              c: float = 8.0) -> pd.DataFrame:
    """Notebook 03b's findings table: how wide is the interval around each component's
    Lipschitz constant, does the order of the bounds give the order of plasticity (by layer
    means and by layer medians), and how do the bounds move under the gauge? Descriptive
    rows, verdicts computed from the numbers.

    Args:
        df: ``intervals.intervals`` of one model, task and protocol.
        gauged: ``intervals.gauged`` of the same model at gauge ``c`` (the same pairs and
            protocol), or None (the gauge rows then say it was not run): with it, the rows of
            the gauge (``gauge_ratios``) follow.
    """
    return table(_interval_rows(df, gauged, c))


def _proposition_rows(df: pd.DataFrame, checks: pd.DataFrame,
                      heads_diff: float | None) -> list[dict]:
    ratio = checks["bound"] / checks["lipschitz_lower"]
    rows = [descriptive("is every bound >= the lower end of Lip(f), on random weights where "
                        "its assumption holds exactly?", float(ratio.min()), paper="Props. 1-4",
                        verdict=_holds(checks["bound"], checks["lipschitz_lower"]),
                        n=len(checks), unit="smallest bound / lower end, over the seed x "
                        "proposition cases"),
            _attained(checks)]
    if heads_diff is not None:
        rows.append(descriptive(
            "attention recomputed head by head from the row blocks of qkv.weight: largest "
            "difference from the module's output", heads_diff, paper="not in the paper (its "
            "public code sliced column blocks)", verdict=checked(heads_diff <= HEADS_ATOL),
            n=1, unit="(largest absolute difference; block 0's attention)"))
    for name, (col, statement) in _PROPS.items():
        comps = _bounded_by(name)
        g = df[df["component"].isin(comps)]
        ratio = g[col] / g["lipschitz_lower"]
        rows.append(descriptive(f"is {name} >= the lower end of Lip(f) on the model "
                                f"({' and '.join(comps)})?", float(ratio.min()),
                                paper=f"{name}: {statement}",
                                verdict=_holds(g[col], g["lipschitz_lower"]), n=len(g),
                                unit="smallest bound / lower end, over the (component, layer) "
                                "cases"))
    return rows + _plugin_rows(df)


def _interval_rows(df: pd.DataFrame, gauged: pd.DataFrame | None, c: float) -> list[dict]:
    rows = [_width_row(df)] + _median_rows(df)
    for col, what in (("bound", "proven bounds (Props. 1-3)"),
                      ("plugin", "paper's plug-in values")):
        cmp = compare_rankings(df, col)
        label = "bounds" if col == "bound" else "plug-in"
        rows.append(descriptive(
            f"order of the {what} vs order of measured plasticity across components",
            f"{label} {cmp.attrs['theory']}; plasticity {cmp.attrs['measured']}; Kendall tau "
            f"{cmp.attrs['kendall_tau']:.2f}", paper="Takeaway 1 ranks bounds, Takeaway 2 "
            "plasticity", verdict="same order" if cmp.attrs["match"] else "different order",
            n=len(cmp), unit="(orders of layer means), over components"))
        order = cmp.sort_values("rank_bound")["component"].astype(str).tolist()
        rows.append(descriptive(
            f"order of the {what} vs Takeaway 1", " > ".join(order),
            paper="Takeaway 1: MHA > FC1 ~ FC2 > LN2 ~ LN1",
            verdict=same(_in_takeaway1_order(order)), n=len(cmp),
            unit="(order of layer means), over components"))
    rows += _gauge_rows(df, gauged, c) if gauged is not None else [descriptive(
        claim, "not run",
        paper="not in the paper (vitplast.measure.gauge: the same network function)",
        verdict="not run (gauge_c = 0)", n=0, unit="(components)") for claim in (
        "do bounds and plasticity move by the derived factors under the gauge?",
        "order of the proven bounds under the gauge vs Takeaway 1")]
    return rows


#: Largest difference of the head-by-head recomputation from the module that reads "the same"
#: (float32 round-off of a few sums).
HEADS_ATOL = 1e-4


def _attained(checks: pd.DataFrame) -> dict:
    """How close each proposition comes to Lip(f) where its assumption holds exactly (random
    weights): the median over seeds of the lower end / bound (1: attained)."""
    close = (checks["lipschitz_lower"] / checks["bound"]).groupby(
        checks["proposition"], sort=False).median()
    return descriptive("lower end of Lip(f) / bound on random weights, per proposition",
                       ", ".join(f"{p} {r:.2g}" for p, r in close.items()),
                       paper="Props. 1-4 (upper bounds; how tight is not stated)",
                       verdict=f"attained within {TIGHT:g}x: " + (", ".join(
                           p for p, r in close.items() if r * TIGHT >= 1) or "none") + "".join(
                           f"; {p}'s bound about {1 / r:,.0f}x the lower end" for p, r in
                           close.items() if 0 < r * TIGHT < 1),
                       n=len(checks), unit="(median over seeds, per proposition)")


def _order(df: pd.DataFrame, col: str, how: str) -> list[str]:
    """Components ordered by ``col`` aggregated over layers with ``how`` ("mean", "median")."""
    agg = df.groupby("component", observed=True)[col].agg(how).sort_values(ascending=False)
    return [str(c) for c in agg.index]


def _median_rows(df: pd.DataFrame) -> list[dict]:
    """The verdicts on orders rest on layer means: the same orders from layer medians, which
    one extreme layer (e.g. a LayerNorm bound from one small-sigma token) cannot move."""
    mean_b, med_b = _order(df, "bound", "mean"), _order(df, "bound", "median")
    mean_p, med_p = _order(df, "plasticity", "mean"), _order(df, "plasticity", "median")
    n = df["component"].nunique()
    return [
        descriptive("order of the proven bounds (Props. 1-3), layer MEDIANS, vs Takeaway 1",
                    " > ".join(med_b), paper="Takeaway 1: MHA > FC1 ~ FC2 > LN2 ~ LN1",
                    verdict=same(_in_takeaway1_order(med_b)) + (
                        "; the same order as the layer means" if med_b == mean_b else
                        "; the layer means give another order: the verdict depends on the "
                        "average"), n=n, unit="(order of layer medians), over components"),
        descriptive("order of measured plasticity: layer means vs layer MEDIANS",
                    f"means {' > '.join(mean_p)}; medians {' > '.join(med_p)}",
                    paper="Takeaway 2 (Fig. 2 shows per-layer boxes)",
                    verdict="same order" if mean_p == med_p else
                    "the order depends on the average (mean vs median over layers)", n=n,
                    unit="(orders), over components")]


def _plugin_rows(df: pd.DataFrame) -> list[dict]:
    """The paper's plug-in statistics, Prop. 4 vs Prop. 3, Prop. 1's assumption."""
    mha, ln = df[df["component"] == "MHA"], df[df["component"].isin(NORMS)]
    p4 = mha["bound_p4"] / mha["bound"]
    cv = ln["sigma_cv"]
    rows = []
    for name, g, at, paper in (
            ("Prop. 1", ln, "the mean sigma", "Prop. 1 at a typical token's sigma"),
            ("Prop. 3", mha, "the RMS token norm",
             f"Prop. 3 at r = RMS token norm ({VITB_RMS_TOKEN_NORM} on ViT-B)")):
        ratio = g["plugin"] / g["max_rate"]
        rows.append(descriptive(
            f"is {name} at {at} (the paper's plug-in value) >= the largest observed rate "
            f"({' and '.join(_bounded_by(name))})?", float(ratio.min()), paper=paper,
            verdict="yes: above every observed rate" if (ratio >= 1).all() else
            f"no: below an observed rate in {int((ratio < 1).sum())} of {len(ratio)} cases, "
            "so not a bound", n=len(ratio),
            unit="smallest plug-in / largest rate, over the (component, layer) cases"))
    return rows + [
        descriptive("is Prop. 4 below Prop. 3 for MHA?", float(p4.median()),
                    paper="Prop. 4: the tighter MHA bound",
                    verdict="yes: Prop. 4 smaller in every layer" if (p4 < 1).all() else
                    f"no: Prop. 4 larger in {int((p4 >= 1).sum())} of {len(p4)} layers, a "
                    f"median {p4.median():.2g}x looser (the public review calls it a tighter "
                    "variant)",
                    n=len(p4), unit="median Prop. 4 / Prop. 3, over the MHA layers"),
        descriptive("do the tokens of a LayerNorm's input share sigma?",
                    float(cv.median()), paper="Prop. 1 assumes tokens share sigma",
                    verdict=f"yes: the assumption holds (cv < {SHARED_SIGMA_CV} in every layer)"
                    if (cv < SHARED_SIGMA_CV).all() else f"no: the assumption fails (cv >= "
                    f"{SHARED_SIGMA_CV} in {int((cv >= SHARED_SIGMA_CV).sum())} of {len(cv)} "
                    "layers)", n=len(cv),
                    unit="median per-token cv of sigma over the LN layers, 0 when shared")]


def _width_row(df: pd.DataFrame) -> dict:
    """How wide the interval around each component's Lipschitz constant is (median over
    layers of upper / lower end)."""
    width = df.groupby("component", observed=True)["width"].median()
    narrow = [c for c, w in width.items() if w <= TIGHT]
    return descriptive("width of the interval around Lip(f), upper / lower end",
                       ", ".join(f"{c} {w:.3g}" for c, w in width.items()),
                       paper="not reported (objection 2)",
                       verdict=f"Lip(f) known within {TIGHT:g}x for: {', '.join(narrow) or 'none'}",
                       n=len(df), unit="upper / lower end, median per component over the "
                       "(component, layer) cases")


#: Relative departure from a derived factor that float32 alone explains (layer means of
#: rates summed over a few hundred pairs).
FLOAT_RTOL = 1e-4


def gauge_tolerance(df: pd.DataFrame, c: float, eps: float = 1e-6) -> float:
    """Largest relative departure of a gauged layer mean from its derived factor that reads "as
    derived": ``FLOAT_RTOL`` plus LayerNorm's eps, which the gauge leaves, at the smallest
    per-token sigma of ``df`` (``intervals.intervals``): (1 - c^-2) eps / (2 s^2), the bound of
    ``gauge.layernorm_shift``. Tokens of small sigma (timm's CLS token starts near 0) set it."""
    var = (df["sigma"].dropna() ** 2 - eps).min()
    return FLOAT_RTOL + (1 - c**-2) * eps / (2 * var)


def gauge_ratios(df: pd.DataFrame, gauged: pd.DataFrame, c: float) -> pd.DataFrame:
    """Per component: its layer-mean ``bound`` and ``plasticity`` on the gauged model
    (``gauged``: ``intervals.intervals`` of ``gauge.rescale_stream(model, c)``, the same pairs and
    protocol) over the same on the model (``df``), beside the factor derived for plasticity
    (``gauge.RATE_FACTORS``; NaN where none is derived). Columns ``component``, ``derived``,
    ``bound_ratio``, ``plasticity_ratio``."""
    factors = RATE_FACTORS[str(df["protocol"].iloc[0])]
    means = [d.groupby("component", observed=True)[["bound", "plasticity"]].mean()
             for d in (df, gauged)]
    ratio = (means[1] / means[0]).add_suffix("_ratio")
    derived = [factors[str(k)](c) if factors.get(str(k)) else float("nan") for k in ratio.index]
    return ratio.assign(derived=derived).reset_index()[
        ["component", "derived", "bound_ratio", "plasticity_ratio"]]


def _gauge_rows(df: pd.DataFrame, gauged: pd.DataFrame, c: float) -> list[dict]:
    """The gauge rows of ``bounds``: the bounds move with the residual stream's scale as
    plasticity does (``gauge_ratios`` against the derived factors: the architecture does not
    fix the bounds, the gauge does), and the order of the bounds and of plasticity on the
    gauged model against Takeaway 1."""
    ratios = gauge_ratios(df, gauged, c).dropna(subset=["derived"])
    off = (ratios[["bound_ratio", "plasticity_ratio"]].div(ratios["derived"], axis=0) - 1).abs()
    worst = float(off.to_numpy().max())
    rows = [descriptive(
        f"do bounds and plasticity move by the derived factors under the gauge (c = {c:g}: "
        + ", ".join(f"{r.component} x{r.derived:.3g}" for r in ratios.itertuples()) + ")?",
        worst, paper="not in the paper (vitplast.measure.gauge: the same network function)",
        verdict=("yes, as derived (exact check)" if worst <= gauge_tolerance(df, c) else
                 "no, not as derived (exact check): the derivation or the code is wrong"),
        n=len(ratios), unit="largest relative departure of a layer mean, over components")]
    cmp = compare_rankings(gauged)
    order = cmp.sort_values("rank_bound")["component"].astype(str).tolist()
    apart = _apart(dict(zip(cmp["component"].astype(str), cmp["bound"])))
    rows.append(descriptive(
        f"order of the proven bounds under the gauge (c = {c:g}) vs Takeaway 1",
        f"bounds {' > '.join(order)}; plasticity {cmp.attrs['measured']}",
        paper="Takeaway 1: MHA > FC1 ~ FC2 > LN2 ~ LN1",
        verdict=same(_in_takeaway1_order(order) and not apart) + (
            ": the order is Takeaway 1's, but " + "; ".join(apart) if apart and
            _in_takeaway1_order(order) else ": " + "; ".join(apart) if apart else ""),
        n=len(cmp), unit="(orders of layer means), over components"))
    return rows
