"""Notebook 02b's rows on relative plasticity (``vitplast.measure.relative``): what the
residual-stream gauge leaves unchanged (``relative.gauge_check``, ``gauge_findings``) and the
order of relative plasticity of three networks of the embedded architecture
(``relative.model_rankings``, ``ranking_findings``).

Paper: not in the paper (issue 38); it reads Definition 1 in the units the gauge leaves alone,
beside Takeaway 2's order (Fig. 2).
"""

from __future__ import annotations

import pandas as pd
from scipy import stats

from vitplast.measure.gauge import RATE_FACTORS
from vitplast.measure.relative import UNCHANGED, ranking
from vitplast.paper import PLASTICITY_ORDER, SOURCES
from vitplast.stats.verdicts import AS_DERIVED, descriptive

__all__ = ["gauge_findings", "ranking_findings"]


def gauge_findings(check: pd.DataFrame) -> list[dict]:
    """Rows on ``relative.gauge_check``, per protocol: the largest relative difference of
    relative plasticity between c = 1 and c over components (each component's beside, in the
    verdict: which moved, which stayed within ``relative.UNCHANGED``), and plasticity's ratio
    per component against the derived factors (``gauge.RATE_FACTORS``). Descriptive: exact
    recomputations on one network. Used by notebook 02b. Paper: none (issue 38)."""
    rows = []
    for protocol, g in check.groupby("protocol", sort=False):
        g, c = g.set_index("component"), float(check["c"].iloc[0])
        moved = [f"{k} {v:.2g}" for k, v in g["relative_difference"].items() if v > UNCHANGED]
        kept = [f"{k} {v:.1g}" for k, v in g["relative_difference"].items() if v <= UNCHANGED]
        verdict = (f"unchanged within {UNCHANGED:g} for every component" if not moved else
                   f"moved: {', '.join(moved)}" + (f"; unchanged within {UNCHANGED:g}: "
                                                   f"{', '.join(kept)}" if kept else ""))
        rows.append(descriptive(
            f"relative plasticity, gauge c = {c:g} vs c = 1: largest relative difference over "
            f"layers and components [{protocol}]", float(g["relative_difference"].max()),
            paper="not in the paper (derived here: unchanged under hidden)", verdict=verdict,
            n=len(g), unit="(components; relative)"))
        factors = {k: f(c) for k, f in RATE_FACTORS[protocol].items() if f is not None}
        off = max(abs(g.loc[k, "plasticity_ratio"] / f - 1) for k, f in factors.items())
        free = [k for k in g.index if k not in factors]  # no factor derived (MHA, embedding)
        derived = ", ".join(k for k in g.index if k in factors)
        rows.append(descriptive(
            f"plasticity, gauge c = {c:g} over c = 1, median over layers [{protocol}]",
            ", ".join(f"{k} x{v:.3g}" + (" (no factor derived)" if k in free else "")
                      for k, v in g["plasticity_ratio"].items()),
            paper="not in the paper (derived: LN / c, FC1 x 1, FC2 x c"
            + (", MHA x c)" if protocol == "hidden" else "; MHA not derived)"),
            verdict=(f"as derived for {derived} (largest deviation {off:.1g})" if off < AS_DERIVED
                     else f"not as derived for {derived} (largest deviation {off:.2g})")
            + (f"; {', '.join(free)}: no factor derived, measured only" if free else ""),
            n=len(g), unit="(components)"))
    return rows


def ranking_findings(models_: pd.DataFrame) -> list[dict]:
    """One descriptive row per (model, protocol) of ``relative.model_rankings``: the order of
    relative plasticity (mean over tasks of the layer means, values shown) beside the paper's
    order of plasticity (Fig. 2: the paper has no relative plasticity, so the row compares
    orders, not values); then each other network against the trained one (``_against_trained``).
    Used by notebook 02b."""
    paper_order, rows = " > ".join(PLASTICITY_ORDER), []
    ranked = ranking(models_)
    for (model, protocol), g in ranked.groupby(["model", "protocol"], sort=False):
        means = (g.groupby("component", observed=True)["relative_plasticity"].mean()
                 .sort_values(ascending=False))
        text = " > ".join(f"{k} {v:.3g}" for k, v in means.items())
        same = " > ".join(means.index.astype(str)) == paper_order
        rows.append(descriptive(
            f"order of relative plasticity, {model} [{protocol}]", text,
            paper=f"plasticity: {paper_order}, {SOURCES['fig2']}",
            verdict="the paper's order of plasticity" if same
            else "not the paper's order of plasticity", n=g["task"].nunique(),
            unit="(tasks; values: mean over tasks)"))
    return rows + _against_trained(ranked)


def _against_trained(ranked: pd.DataFrame, trained: str = "embedded (final)") -> list[dict]:
    """Per protocol and every other network: Kendall's tau between its order of relative
    plasticity (mean over tasks) and the trained embedded model's, and which components
    change place: does pretraining (random init vs trained) or the recipe move the order?"""
    means = ranked.groupby(["protocol", "model", "component"], observed=True, sort=False)[
        "relative_plasticity"].mean()
    rows = []
    for protocol in ranked["protocol"].unique():
        if trained not in means[protocol].index.get_level_values("model"):
            continue
        ref = means[protocol][trained]
        for model in ranked["model"].unique():
            if model == trained or model not in means[protocol].index.get_level_values("model"):
                continue
            other = means[protocol][model][ref.index]
            tau = stats.kendalltau(ref, other).statistic
            # equal values share the best place (LN1 and LN2 read the same input at init)
            rank_ref, rank_other = (v.rank(ascending=False, method="min").astype(int)
                                    for v in (ref, other))
            tied = rank_other.duplicated(keep=False)
            moved = [f"{c} {rank_ref[c]} -> {rank_other[c]}" + (" (tied)" if tied[c] else "")
                     for c in ref.index if rank_ref[c] != rank_other[c]]
            rows.append(descriptive(
                f"order of relative plasticity, {model} vs {trained} [{protocol}]",
                f"Kendall tau {tau:.2f}", paper="not in the paper",
                verdict="the same order" if not moved else
                "another order (place in the trained model -> in this one): " + ", ".join(moved),
                n=len(ref), unit="(components; orders of the means over tasks)"))
    return rows
