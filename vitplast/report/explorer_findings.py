"""Notebook 06's findings rows, from the explorers' views: the bounds against the rates, the
rescaled LayerNorm against its derived factor, and the results browser's run (descriptive rows:
exact checks). A row, its verdict and the table are ``vitplast.stats.verdicts``'s.

Paper: Props. 1-3 (the bounds); objection 3 (the rescaled LayerNorm).
"""

from __future__ import annotations

import math

import pandas as pd

from vitplast.stats.verdicts import TIGHT, checked, descriptive, exact, table

__all__ = ["explorer"]


def explorer(bounds_: pd.DataFrame | None = None, gamma: pd.DataFrame | None = None,
             run: pd.DataFrame | None = None, tol: float = 1e-3) -> pd.DataFrame:
    """Notebook 06's findings table, from the explorers' views (descriptive rows: exact
    checks); each argument adds its section's rows (None: left out).

    Args:
        bounds_: ``widgets.bound_table`` (per layer and component: ``plasticity``,
            ``max_rate``, ``bound``).
        gamma: ``widgets.gamma_table`` (per scale ``c``: ``ratio``, ``bound_ratio``,
            ``diff_preserved``, ``diff_raw``).
        run: ``widgets.run_table`` (the results browser's run: ``metric``, ``step``,
            ``value``).
        tol: relative tolerance of "proportional to c", and the largest logit difference that
            counts as "the same function".
    """
    rows = []
    if bounds_ is not None:
        held = bounds_["max_rate"] <= bounds_["bound"]
        loose = (bounds_["bound"] / bounds_["plasticity"]).groupby(
            bounds_["component"].astype(str), sort=False).median()
        rows += [descriptive("largest measured rate <= its bound (Props. 1-3)",
                             f"{int(held.sum())}/{len(held)}", paper="Props. 1-3: upper bounds",
                             verdict=exact(bool(held.all())), n=len(held),
                             unit="(layer, component)"),
                 descriptive("bound / plasticity, median over layers, per component",
                             ", ".join(f"{c} {r:.3g}" for c, r in loose.items()),
                             paper="not reported", verdict=f"tight (< {TIGHT:g}) for: " + (
                                 ", ".join(c for c, r in loose.items() if r < TIGHT) or "none"),
                             n=len(bounds_), unit="(ratio, median per component)")]
    if gamma is not None:
        off = float(((gamma["ratio"] / gamma["c"]) - 1).abs().max())
        kept, raw = float(gamma["diff_preserved"].max()), float(gamma["diff_raw"].min())
        paper = "not in the paper (objection 3, docs/objections.md)"
        rows += [descriptive("LayerNorm gamma, beta times c: |plasticity ratio / c - 1|, "
                             "largest over c", off, paper=paper, verdict=checked(off <= tol),
                             n=len(gamma), unit="(relative, over scales c)"),
                 descriptive("largest |logit difference|: function-preserving rescale "
                             "(smallest for the raw one beside it)",
                             f"{kept:.2g} (raw: {raw:.2g})", paper=paper,
                             verdict=checked(kept <= tol < raw), n=len(gamma),
                             unit="(logits, over scales c)")]
    rows += _run_rows(run) if run is not None else []
    return table(rows)


def _run_rows(run: pd.DataFrame) -> list[dict]:
    """The results browser's run: where its validation accuracy peaked, and how often its
    global gradient norm sat at its recipe's clip (``clip_grad_norm``)."""
    if not len(run):
        return [descriptive("the run shown", "none: the store is empty", paper="not reported",
                            verdict="nothing to read", n=0, unit="(runs)")]
    val = run[run["metric"] == "val_acc"].dropna(subset=["value"]).sort_values("step")
    norm = run[run["metric"] == "grad_norm"].dropna(subset=["value"])
    best, last = int(val.loc[val["value"].idxmax(), "step"]), int(val["step"].max())
    clip = float(run["clip_grad_norm"].fillna(0.0).max())  # null or 0: no clipping
    clipped = float((norm["value"] >= clip).mean()) if len(norm) and clip > 0 else math.nan
    return [
        descriptive("the run shown: step of its best validation accuracy / its last evaluation",
                    f"{best} / {last}", paper="not reported", n=len(val), unit="(steps)",
                    verdict="best at the last evaluation: it may still have been improving when "
                    "the step budget ended" if best == last else "it peaked before the step "
                    "budget ended"),
        descriptive(f"the run shown: share of logged steps whose global gradient norm is at or "
                    f"above its clip ({clip:g})", clipped, paper="not reported",
                    n=len(norm), unit="(fraction of logged steps)",
                    verdict="its recipe does not clip" if clip == 0 else
                    "clipping scaled most updates" if clipped > 0.5 else
                    "clipping scaled some updates" if clipped > 0 else
                    "clipping never acted")]
