"""Notebook 01's findings: Definition 1 checked on functions one can work out by hand, Prop. 1
computed by hand, the estimator's precision, and the model's order of the components.

Every row is descriptive (computations on chosen functions or one model, not samples of
independent units). Each section's table adds its rows (``definitions``' arguments), so a
section's Read cell renders its own rows.

Paper: Definition 1, Prop. 1 and 2, Fig. 2; objection 1.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vitplast.paper import PLASTICITY_ORDER, SOURCES
from vitplast.stats.verdicts import (
    PRECISE,
    SCALE_INVARIANT,
    checked,
    descriptive,
    exact,
    same,
    table,
)

#: A largest observed rate at least this fraction of the Lipschitz constant reads "near Lip"
#: (notebook 01: where the pairs reach the steepest region of a map).
NEAR_LIP = 0.9


def definitions(maps: pd.DataFrame | None = None, linear: pd.DataFrame | None = None,
                scale: pd.DataFrame | None = None, conv: pd.DataFrame | None = None, *,
                prop1: tuple | None = None, ranked: pd.DataFrame | None = None,
                tol: float = 0.05) -> pd.DataFrame:
    """Notebook 01's findings table: exact checks of Definition 1 on hand-checkable functions
    (descriptive rows: these are computations, not samples of units). Each argument adds its
    section's rows (None: left out), so a section's Read cell renders its rows from its table.

    Args:
        maps: ``definitions.maps_1d_table``; linear: ``definitions.linear_table``;
        scale: ``definitions.scale_table`` (modules "LayerNorm" and "attention");
        conv: ``definitions.convergence`` of the model's rates.
        prop1: (Prop. 1's bound computed by hand, ``bounds.layernorm_bound``'s, the rates of
            the pairs) for one LayerNorm (section 4).
        ranked: ``plasticity.ranking`` of the model under one or both protocols.
        tol: relative tolerance of "close to" (LayerNorm's slope, the linear map's value).
    """
    rows = []
    for given, make in ((maps, _map_rows), (linear, _linear_rows), (prop1, _prop1_rows),
                        (conv, _conv_rows), (ranked, _order_rows)):
        rows += make(given) if given is not None else []
    rows += _scale_rows(scale, tol) if scale is not None else []
    return table(rows)


def _map_rows(maps: pd.DataFrame) -> list[dict]:
    ok = (maps["plasticity"] <= maps["max_rate"] + 1e-9) & (maps["max_rate"]
                                                            <= maps["lipschitz"] + 1e-6)
    crossing = [f for f, g in maps.groupby("function", sort=False)
                if g["plasticity"].max() > 1 > g["plasticity"].min()]
    ends = maps.sort_values("scale").groupby("function", sort=False)
    spread = ends["plasticity"].last() / ends["plasticity"].first()
    reach = (ends["max_rate"].last() / ends["lipschitz"].last()).sort_values(ascending=False)
    low = ends["max_rate"].first() / ends["lipschitz"].first()
    same_ = [f for f, r in spread.items() if abs(math.log(r)) < SCALE_INVARIANT]
    n, lo, hi = maps["function"].nunique(), maps["scale"].min(), maps["scale"].max()
    return [
        descriptive("plasticity <= largest observed rate <= Lipschitz constant, 1-D maps",
                    f"{int(ok.sum())}/{len(ok)}", paper="Definition 1: P(f) <= Lip(f)",
                    verdict=exact(bool(ok.all())), n=len(ok), unit="(map, scale) cases"),
        descriptive("1-D maps whose plasticity crosses 1 between pair scales (non-smooth under "
                    "one pair distribution, smooth under another)", ", ".join(crossing) or "none",
                    paper="not in the paper (objection 1, docs/objections.md)",
                    verdict=f"{len(crossing)} of {n} maps cross 1", n=n, unit="(of the maps)"),
        descriptive(f"plasticity at pair scale {hi:g} / at {lo:g}, per map",
                    ", ".join(f"{f} {r:.3g}" for f, r in spread.items()),
                    paper="not in the paper (a positively homogeneous map's rate is the same at "
                    "every scale)", verdict="scale-invariant: " + (", ".join(same_) or "none"),
                    n=n, unit="(ratio, per map)"),
        descriptive(f"largest observed rate / Lipschitz constant at pair scale {hi:g} (at "
                    f"{lo:g} beside it)", ", ".join(f"{f} {r:.2f} ({low[f]:.2f})"
                                                    for f, r in reach.items()),
                    paper="not in the paper (the largest rate is a lower end of Lip)",
                    verdict=_near(reach, low, lo, hi), n=n, unit="(ratio, per map)")]


def _near(reach: pd.Series, low: pd.Series, lo: float, hi: float) -> str:
    """Which maps' largest observed rate comes near Lip (``NEAR_LIP``) at both pair scales,
    only at the larger, or at neither."""
    groups = {"at both scales": [f for f in reach.index if reach[f] >= NEAR_LIP <= low[f]],
              f"only at scale {hi:g}, not at {lo:g}": [
                  f for f in reach.index if reach[f] >= NEAR_LIP > low[f]],
              "at neither": [f for f in reach.index if reach[f] < NEAR_LIP]}
    return f"near Lip (>= {NEAR_LIP:g}) " + "; ".join(
        f"{k}: {', '.join(v)}" for k, v in groups.items() if v)


def _linear_rows(linear: pd.DataFrame) -> list[dict]:
    lin = dict(zip(linear["quantity"], linear["value"]))
    ratio = lin["plasticity (mean rate)"] / lin["sqrt(mean sigma^2)"]
    lip = lin["Lipschitz = sigma_max"]
    of_lip = lin["plasticity (mean rate)"] / lip, lin["max observed rate"] / lip
    return [
        descriptive("linear map: plasticity / sqrt(mean sigma_i^2)", float(ratio),
                    paper="not in the paper (Jensen: E[rate] <= sqrt(E[rate^2]) = ||W||_F / "
                    "sqrt(d) for isotropic pairs, so at most 1)",
                    verdict=checked(ratio <= 1 + 1e-6), n=1, unit="(ratio; one map)"),
        descriptive("linear map: plasticity and the largest observed rate, each / Lipschitz "
                    "constant (sigma_max)", f"{of_lip[0]:.3g} and {of_lip[1]:.3g}",
                    paper="Prop. 2: Lip(W) = ||W||_2 = sigma_max",
                    verdict=("the largest observed rate is a lower end of Lip, below it" if
                             of_lip[1] < 1 - 1e-6 else "the largest observed rate reaches Lip"),
                    n=1, unit="(ratios; one map)")]


def _slope(g: pd.DataFrame) -> float:
    return float(np.polyfit(np.log(g["scale"]), np.log(g["plasticity"]), 1)[0])


def _scale_rows(scale: pd.DataFrame, tol: float) -> list[dict]:
    """LayerNorm's slope against Prop. 1's -1; attention's (where measured) as a result."""
    ln, attn = (scale[scale["module"] == m] for m in ("LayerNorm", "attention"))
    slope = _slope(ln)
    rows = [descriptive("LayerNorm: slope of log plasticity against log input scale", slope,
                        paper="Prop. 1: bound ||gamma||_inf / sigma, slope -1",
                        verdict=exact(abs(slope + 1) <= tol), n=len(ln),
                        unit="(fit over scales)")]
    if not len(attn):
        return rows
    a = _slope(attn)
    return rows + [
        descriptive("attention: slope of log plasticity against log input scale", a,
                    paper="not in the paper (softmax is not scale-invariant)",
                    verdict="scale-invariant" if abs(a) < SCALE_INVARIANT else
                    "plasticity rises with the input scale" if a > 0 else
                    "plasticity falls with the input scale", n=len(attn),
                    unit="(fit over scales)")]


def _prop1_rows(prop1: tuple) -> list[dict]:
    by_hand, bound, rates = prop1
    if hasattr(rates, "cpu"):  # a tensor, on the model's device
        rates = rates.detach().cpu()
    rates = np.asarray(rates, dtype=float).ravel()
    largest = float(rates.max())
    return [
        descriptive("Prop. 1's bound by hand (smallest token sigma) / bounds.layernorm_bound",
                    by_hand / bound, paper="not in the paper (the same formula, computed twice)",
                    verdict=checked(math.isclose(by_hand, bound, rel_tol=1e-6)), n=1,
                    unit="(ratio; one LayerNorm)"),
        descriptive("the LayerNorm's largest rate over the pairs / Prop. 1's bound",
                    largest / bound, paper="Prop. 1: at most 1", verdict=exact(largest <= bound),
                    n=len(rates), unit="(ratio) over pairs")]


def _conv_rows(conv: pd.DataFrame) -> list[dict]:
    big = conv[conv["n_pairs"] == conv["n_pairs"].max()]
    rel = float((big["ci95"] / big["plasticity"]).max())
    return [_settled(big),
            descriptive(f"largest 95% CI half-width relative to the estimate at "
                        f"{int(big['n_pairs'].max())} pairs", rel, paper="not reported",
                        verdict=f"precise (<= {PRECISE:.0%})" if rel <= PRECISE
                        else f"imprecise (> {PRECISE:.0%})",
                        n=len(big), unit="of the estimate, worst (layer, component)")]


def _order_rows(ranked: pd.DataFrame) -> list[dict]:
    """Per protocol, the order of the components (mean over layers, and over tasks if several)
    against the paper's Fig. 2 order."""
    rows = []
    for protocol, g in ranked.groupby("protocol", observed=True):
        means = g.groupby("component", observed=True)["plasticity"].mean()
        order = [str(c) for c in means.sort_values(ascending=False).index]
        rows.append(descriptive(
            f"order of the components' plasticity (mean over layers) against Fig. 2's "
            f"{' > '.join(PLASTICITY_ORDER)} [{protocol}]",
            " > ".join(order), paper=f"{' > '.join(PLASTICITY_ORDER)}, {SOURCES['fig2']}",
            verdict=same(order == list(PLASTICITY_ORDER)), n=len(order),
            unit="(components)"))
    return rows


def _settled(big: pd.DataFrame) -> dict:
    """Whether the order of the components is settled at ``big``'s number of pairs: per
    layer, components neighbouring in the order whose 95% CIs overlap."""
    overlap, total = [], 0
    for layer, g in big.groupby("layer"):
        g = g.sort_values("plasticity", ascending=False)
        for (_, a), (_, b) in zip(g.iterrows(), g.iloc[1:].iterrows()):
            total += 1
            if a["plasticity"] - a["ci95"] <= b["plasticity"] + b["ci95"]:
                overlap.append(f"{a['component']}/{b['component']} (layer {layer})")
    n = int(big["n_pairs"].max())
    verdict = ("one component per layer: no order" if not total else "order settled"
               if not overlap else "order not settled where the intervals overlap")
    return descriptive(f"neighbours in the order whose confidence intervals overlap at {n} pairs",
                       f"{len(overlap)} of {total}" + (f": {', '.join(overlap)}" if overlap
                                                       else ""),
                       paper="not reported", n=total, unit="(neighbouring components, "
                       "per layer; 95% intervals)", verdict=verdict)
