"""Notebook 02b's rows on the residual stream's scale: the ranking under the gauge and with the
embedding rescaled (``stream.gauge_rankings``, ``stream.embedding_scale_rankings``), short
finetuning runs of a gauged network beside the original (``invariance.finetuning_invariance``),
and the ranking of a network another pretraining recipe made (``recipes.recipe_rankings``:
training, not a gauge, sets the scale).

Paper: Takeaway 2 (the order of Fig. 2) and Takeaway 3's configurations.
"""

from __future__ import annotations

import math

import pandas as pd

from vitplast.measure.gauge import RATE_FACTORS
from vitplast.measure.stream import orders, spearman_fig2
from vitplast.paper import PLASTICITY_ORDER, SOURCES
from vitplast.report.plasticity_findings import correlation_row
from vitplast.stats.verdicts import AS_DERIVED, descriptive, same, table


def _factor_deviation(ranked: pd.DataFrame, protocol: str) -> tuple[float, int]:
    """Largest |measured ratio / derived factor - 1| over tasks and components with a derived
    factor, between the largest c and c = 1 (and the number of tasks)."""
    g = ranked[ranked["protocol"] == protocol]
    c = g["c"].max()
    wide = g.pivot_table(index=["task", "component"], columns="c", values="plasticity",
                         observed=True)
    dev = [abs(r[c] / r[1.0] / RATE_FACTORS[protocol][comp](c) - 1)
           for (_, comp), r in wide.iterrows() if RATE_FACTORS[protocol][comp] is not None]
    return float(max(dev)), g["task"].nunique()


def gauge_order_claim(c: float, protocol: str) -> str:
    """The claim of ``ranking_findings``' order row at gauge ``c`` under ``protocol``."""
    return f"order at gauge c = {c:g} [{protocol}]"


def gauge_order_claims(gauge_cs) -> list[str]:
    """The order rows at the least and largest of ``gauge_cs`` under each protocol: the ones
    notebook 02b shows and the closing synthesis reads."""
    return [gauge_order_claim(c, protocol) for protocol in ("embedding", "hidden")
            for c in (min(gauge_cs), max(gauge_cs))]


def ranking_findings(gauged: pd.DataFrame | None, embedding_scaled: pd.DataFrame | None = None,
                     *, tested: bool = True, token_ratio: float | None = None) -> list[dict]:
    """Notebook 02b's rows on the gauge (``verdicts.table`` makes them a table with the rest):
    per protocol and c, the order (descriptive) and its Spearman correlation with Fig. 2 over
    tasks (tested; left out with ``tested=False``, for a Read cell before the whole table
    exists); the rate factors the gauge was derived to give; per embedding scale, the order
    (descriptive), the scale nearest ``token_ratio`` (``tokens.token_scale``'s ratio: ViT-B's
    token scale over this model's) named in its verdict. None: no rows of that table.

    Paper: Takeaway 2, Fig. 2."""
    paper_order, rows = " > ".join(PLASTICITY_ORDER), []
    rows += _scaled_rows(embedding_scaled, token_ratio) if embedding_scaled is not None else []
    if gauged is None:
        return rows
    for (protocol, c), g in gauged.groupby(["protocol", "c"]):
        text = orders(g).iloc[0, 0]
        rows.append(descriptive(
            gauge_order_claim(c, protocol), text,
            paper=f"{paper_order}, {SOURCES['fig2']}",
            verdict=same(text == paper_order), n=g["task"].nunique(),
            unit="(order, mean over tasks)"))
        rows += [correlation_row(
            f"Spearman(measured, Fig. 2) at gauge c = {c:g} [{protocol}]", spearman_fig2(g),
            paper=f"+1 (same order), {SOURCES['fig2']}")] if tested else []
    for protocol in gauged["protocol"].unique():
        dev, n = _factor_deviation(gauged, protocol)
        mha = ", MHA x c" if protocol == "hidden" else ""
        rows.append(descriptive(
            f"rate factors of the gauge (LN / c, FC1 x 1, FC2 x c{mha}): largest relative "
            f"deviation [{protocol}]", dev, paper="not studied (derived here)",
            verdict="as derived" if dev < AS_DERIVED else "not as derived", n=n,
            unit="(relative deviation, largest over tasks)"))
    return rows


def _scaled_rows(scaled: pd.DataFrame, token_ratio: float | None) -> list[dict]:
    """Per embedding scale s: the order (mean over tasks), the paper's beside; the s nearest
    ``token_ratio`` on a log scale says so in its verdict."""
    paper_order, scales = " > ".join(PLASTICITY_ORDER), sorted(scaled["scale"].unique())
    near = (min(scales, key=lambda s: abs(math.log(s / token_ratio)))
            if token_ratio else None)
    rows = []
    for s, g in scaled.groupby("scale"):
        text = orders(g, by="scale").iloc[0, 0]
        where = (f"; s = {s:g} is the scale nearest ViT-B's tokens (x{token_ratio:.2f})"
                 if s == near else "")
        rows.append(descriptive(
            f"order with the embedding times {s:g} [embedding]", text,
            paper=f"{paper_order}, {SOURCES['fig2']}",
            verdict=("the paper's order" if text == paper_order else "not the paper's order")
            + where, n=g["task"].nunique(), unit="(order, mean over tasks)"))
    return [*rows, _paper_order_at(scaled, near, token_ratio)] if near else rows


def _paper_order_at(scaled: pd.DataFrame, near: float, token_ratio: float) -> dict:
    """At which embedding scales the paper's order appears, beside the scale nearest ViT-B's
    tokens: is the disagreement of notebook 02 a matter of this model's token scale alone?"""
    paper_order = " > ".join(PLASTICITY_ORDER)
    at = [s for s, g in scaled.groupby("scale") if orders(g, by="scale").iloc[0, 0] == paper_order]
    where = ", ".join(f"{s:g}" for s in at) or "no scale measured"
    there = near in at
    return descriptive(
        "embedding scales s at which the paper's order appears [embedding]", where,
        paper=f"{paper_order}, {SOURCES['fig2']}", n=scaled["task"].nunique(), unit="(scales s)",
        verdict=(f"{'at' if there else 'not at'} s = {near:g}, the scale nearest ViT-B's tokens "
                 f"(x{token_ratio:.2f})" + ("" if there else f"; the paper's order at s = "
                                            f"{where} only" if at else "; at none of them")))


def invariance_findings(inv: pd.DataFrame, tol: float = 5e-3) -> list[dict]:
    """Rows on ``finetuning_invariance``: per configuration, the largest loss difference from
    the original run (the same trajectory where no gauged parameter trains), from the LR / c^2
    run with the recipe's clip and without any clip (the same where derived). ``tol``: a loss
    difference below it reads as the same trajectory; the gauge keeps LayerNorm's eps, whose
    effect (about 5e-4 in the logits at c = 8 on the embedded model) a few SGD steps amplify
    to at most ~1e-3 there, while the LR and clip effects measured are above 2e-2."""
    rows = []
    for _, r in inv.iterrows():
        for col, what in (("vs_original", "the original run"),
                          ("vs_lr_scaled_clip", "the LR / c^2 run, recipe's clip"),
                          ("vs_lr_scaled_noclip", "the LR / c^2 run, no clip")):
            if col in r and not pd.isna(r[col]):
                rows.append(descriptive(
                    f"{r['config']}-only finetuning, gauged vs {what}: largest |loss difference|",
                    float(r[col]), paper="not studied (derived here)", n=1, unit="(run pair)",
                    verdict="same trajectory (within LayerNorm's eps)" if r[col] < tol
                    else "different trajectory"))
    return rows


def findings_table(found: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """A notebook's findings table with ``rows`` added: one table, Holm over all its tests."""
    return table(found.to_dict("records") + rows)


def recipe_findings(ranked: pd.DataFrame) -> list[dict]:
    """One descriptive row per protocol of ``recipes.recipe_rankings``: each recipe's order of
    plasticity (mean over tasks) and its Spearman correlation with the paper's Fig. 2 (mean
    over tasks). Used by notebook 02b. Paper: Takeaway 2, Fig. 2."""
    text = orders(ranked, by="recipe")["order"]
    rows = []
    for protocol, g in ranked.groupby("protocol", sort=False):
        recipes = list(dict.fromkeys(g["recipe"]))
        rho = {r: float(spearman_fig2(g[g["recipe"] == r]).mean()) for r in recipes}
        rows.append(descriptive(
            f"order of plasticity by pretraining recipe ({protocol} protocol)",
            "; ".join(f"{r}: {text[(protocol, r)]}" for r in recipes),
            paper="Fig. 2: " + " > ".join(PLASTICITY_ORDER),
            verdict="Spearman with Fig. 2, mean over tasks: "
                    + ", ".join(f"{r} {rho[r]:+.2f}" for r in recipes),
            n=g["task"].nunique(), unit="(orders of task means), over tasks"))
    return rows
