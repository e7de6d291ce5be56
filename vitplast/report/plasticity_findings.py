"""Plasticity findings, of notebooks 02 and 02b, as rows: 02 ``plasticity_ranking`` (with
``layer_summaries``, ``spread_rows`` and ``token_findings``, also 07's), 02b ``relative_suite``,
and ``correlation_row`` (a per-task correlation with the paper's values). A row, its test, Holm
family, power and verdict are ``vitplast.stats.verdicts``'s (``verdicts.table`` makes the rows a
table, ``verdicts.render`` prints it); the other notebooks' builders are their own modules
(``definition_findings``, ``bound_findings``, ``scale_findings``, ``relative_findings``,
``finetuning_findings``, ``confound_findings``, ``explorer_findings``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from vitplast import paper
from vitplast.experiments import task_measures
from vitplast.measure import components
from vitplast.measure.empirical import task_summaries
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER, SOURCES
from vitplast.report.suite_findings import accuracy, order_row, spearman_plasticity_gain
from vitplast.stats.verdicts import (
    MIN_N,
    ORDER_HELD_TAU,
    PRECISE,
    SCALE_INVARIANT,
    descriptive,
    mean_test,
    paired_test,
    same,
    table,
)

__all__ = ["RELATIVE_SUITE", "correlation_row", "layer_summaries",
           "plasticity_ranking", "relative_suite", "relative_suite_orders", "spread_rows",
           "token_findings", "token_ratio_words"]


# notebook 02 ---------------------------------------------------------------------------------


def spread_rows(spread: pd.DataFrame) -> list[dict]:
    """What ``plasticity.spread`` shows, one descriptive row per protocol: how many neighbours
    in the order of the medians lie closer together (their ``median / the next lower``) than
    each one's own per-pair spread (``95% / 5%``), naming them; a single pair cannot order
    those two components, only the mean over many pairs can."""
    rows = []
    for protocol, one in spread.groupby(level="protocol", sort=False):
        one = one.droplevel("protocol")
        within, apart = [], []
        for lower, upper in zip(one.index[:-1], one.index[1:]):
            gap = one.at[upper, "median / the next lower"]
            spreads = one.loc[[lower, upper], "95% / 5%"]
            said = f"{upper}/{lower} {gap:.2f}x (spreads {spreads.min():.1f}x-{spreads.max():.1f}x)"
            (within if gap < spreads.min() else apart).append(said)
        rows.append(descriptive(
            f"neighbours in the order of the median per-pair rate that lie closer than their "
            f"per-pair spreads (median gap below both 95% / 5% ratios) [{protocol}]",
            len(within), paper="not in the paper", n=len(within) + len(apart),
            unit="neighbouring pairs of components",
            verdict="; ".join(part for part in (
                "within the spread: " + ", ".join(within) if within else "",
                "apart: " + ", ".join(apart) if apart else "") if part)))
    return rows


def _swaps(rho: float, k: int = 5) -> str:
    """How far a Spearman ``rho`` over ``k`` components (five by default) is from the same
    order, in words: rho = 1 - 6 sum(d^2) / (k (k^2 - 1)), and one swap of two neighbours makes
    sum(d^2) = 2 (rho = 0.9 over five)."""
    d2 = round((1 - rho) * k * (k * k - 1) / 6)
    return ("one swap of two neighbours from it" if d2 == 2 else
            f"its ranks differ by a sum of squares of {d2} (one swap of two neighbours: 2)")


def correlation_row(claim: str, rho, *, paper: str, unit: str = "rho, per task",
                    paper_value: float = 1.0) -> dict:
    """A row on a per-task correlation with the paper's values (e.g. Spearman's rho with Fig.
    2, whose own value is ``paper_value`` = +1). Tested over tasks (``mean_test``, the paper's
    sign +1) when it varies; when it takes ONE value on every one of at least ``MIN_N`` tasks
    there is nothing for a test to weigh: the row is descriptive and reads "agrees with the
    paper" when that value is the paper's, "disagrees with the paper" otherwise (a rho of
    exactly 0 on every task is a clear, repeated disagreement with +1, not "not resolved").

    Paper: Takeaway 2 (the order of Fig. 2)."""
    v = pd.Series(rho, dtype=float).dropna()
    if len(v) >= MIN_N and v.nunique() == 1:
        value = float(v.iloc[0])
        every = f"rho = {value:+.2g} on every one of the {len(v)} tasks"
        if math.isclose(value, paper_value):
            verdict = f"agrees with the paper: {every} (no spread, so no test is needed)"
        elif 0.5 <= value < paper_value:  # near: say how near, in swaps of neighbours
            verdict = (f"near the paper's order, not the same: {every}, {_swaps(value)} (no "
                       "spread, so no test is needed)")
        else:
            verdict = f"disagrees with the paper: {every} (no spread, so no test is needed)"
        return descriptive(claim, value, paper=paper, n=len(v), unit=unit, verdict=verdict)
    return mean_test(claim, v, paper=paper, expected=1, unit=unit, bounded=True)


def _per_task(ranked: pd.DataFrame, component: str) -> pd.Series:
    return ranked[ranked["component"] == component].set_index("task")["plasticity"]


def _kendall_first_last(along: pd.DataFrame) -> tuple[float, int]:
    """Kendall's tau between each task's component order at the first and the last checkpoint
    (``along`` in measured order), mean over tasks; and the number of tasks."""
    first, last = along["checkpoint"].iloc[0], along["checkpoint"].iloc[-1]
    taus = []
    for _, g in along.groupby("task"):
        a = g[g["checkpoint"] == first].set_index("component")["plasticity"]
        b = g[g["checkpoint"] == last].set_index("component")["plasticity"]
        common = a.index.intersection(b.index)
        taus.append(stats.kendalltau(a[common], b[common]).statistic)
    return (float(np.mean(taus)) if taus else math.nan), len(taus)


def plasticity_ranking(ranked: pd.DataFrame, along: pd.DataFrame | None = None,
                       mha_scale: pd.DataFrame | None = None, *,
                       per_layer: pd.DataFrame | None = None,
                       precision: pd.DataFrame | None = None,
                       token: dict | None = None) -> pd.DataFrame:
    """Notebook 02's findings table: the paper's plasticity order (Takeaway 2, Fig. 2) tested
    over tasks, per protocol. The unit is the task: a component's plasticity on a task is the
    mean over layers of per-layer means over pairs (``plasticity.ranking``).

    Args:
        ranked: ``plasticity.ranking`` of the final checkpoint (``task``, ``protocol``,
            ``component``, ``plasticity``).
        along: ``plasticity.ranking`` over the pretraining checkpoints, in measured order
            (None: no pretraining rows).
        mha_scale: ``plasticity.scale_curve`` (MHA on c times its input; None: no row).
        per_layer: ``plasticity.summarize`` of the final checkpoint (per task, protocol,
            layer, component): the orders by the layer mean, median and mean without layer 0
            (``layer_summaries``; None: no rows).
        precision: ``empirical.precision`` (None: no rows).
        token: ``tokens.token_scale`` (None: no row; ``token_findings``).

    Every row but the paper's order (paired differences) and the Spearman rows is
    descriptive, so a table built without ``along``, ``mha_scale`` or the keyword arguments
    gives those tested rows the same Holm p as the whole one (the Read cells of notebook 02
    read it before sections 6-8 exist).
    """
    fig2 = SOURCES["fig2"]
    rows = []
    for protocol, g in ranked.groupby("protocol"):
        for a, b in zip(PLASTICITY_ORDER, PLASTICITY_ORDER[1:]):
            rows.append(paired_test(
                f"{a} - {b}, plasticity [{protocol}]", _per_task(g, a), _per_task(g, b),
                paper=f"{FIG2_PLASTICITY[a] - FIG2_PLASTICITY[b]:+.2f}, {fig2}", expected=1,
                unit="plasticity, per task (layer-mean)", sides=(a, b)))
        rho = g.groupby("task").apply(lambda t: stats.spearmanr(
            t.set_index("component").loc[list(PLASTICITY_ORDER), "plasticity"],
            [FIG2_PLASTICITY[c] for c in PLASTICITY_ORDER]).statistic, include_groups=False)
        rows.append(correlation_row(f"Spearman(measured plasticity, paper's Fig. 2) over the "
                                    f"five components [{protocol}]", rho,
                                    paper=f"+1 (same order), {fig2}"))
        means = g.groupby("component", observed=True)["plasticity"].mean()
        above = [c for c in PLASTICITY_ORDER if means.get(c, 0) > 1]
        paper_above = [c for c in PLASTICITY_ORDER if FIG2_PLASTICITY[c] > 1]
        rows.append(descriptive(f"components above 1 (mean over tasks) [{protocol}]",
                                ", ".join(above) or "none", paper=", ".join(paper_above),
                                verdict=same(above == paper_above), n=g["task"].nunique(),
                                unit="(components)"))
    for protocol, g in ([] if along is None else along.groupby("protocol", sort=False)):
        tau, n = _kendall_first_last(g)
        rows.append(descriptive(
            f"order at {g['checkpoint'].iloc[0]} vs at {g['checkpoint'].iloc[-1]} (Kendall tau) "
            f"[{protocol}]", tau, paper="not studied (the paper measures the final model)",
            verdict="order held" if tau >= ORDER_HELD_TAU else "order changed along pretraining",
            n=n,
            unit="tau, mean over tasks"))
    if mha_scale is not None:
        per = mha_scale.groupby("scale")["plasticity"].median()
        ratio = float(per.iloc[-1] / per.iloc[0])
        rows.append(descriptive(
            f"MHA plasticity at input scale {per.index[-1]:g} / at {per.index[0]:g} (median "
            "over layers)", ratio, paper="not studied (the embedding protocol feeds MHA the "
            "raw embedding)", n=mha_scale["layer"].nunique(),
            verdict="scale-invariant" if abs(math.log(ratio)) < SCALE_INVARIANT
            else "depends on the input scale",
            unit="ratio, median over layers"))
    rows += layer_summaries(per_layer) if per_layer is not None else []
    rows += _precision_rows(precision) if precision is not None else []
    if token is not None:
        rows.append(token_findings(token))
    return table(rows)


def token_findings(token: dict) -> dict:
    """The row on the model's token scale (``tokens.token_scale``) against the paper's r: how
    many times larger ViT-B's tokens are. Used by notebooks 02 (``plasticity_ranking``) and 07.
    Paper: ``paper.VITB_RMS_TOKEN_NORM``."""
    r, ratio = token["r"], token["ratio"]
    return descriptive(
        f"token scale r: RMS token norm of the embedding on {token['n_images']} test images of "
        "the pretraining domain", r, paper=f"{token['paper_r']} ({SOURCES['token_norm']})",
        verdict=token_ratio_words(ratio), n=token["n_images"], unit="(RMS token norm; n: images)")


def token_ratio_words(ratio: float) -> str:
    """ViT-B's RMS token norm over a model's (``ratio``), in words, whichever is larger."""
    if round(ratio, 2) == 1:
        return "this model's tokens have ViT-B's scale"
    return (f"ViT-B's tokens are {ratio:.2f} times larger than this model's" if ratio > 1
            else f"this model's tokens are {1 / ratio:.2f} times larger than ViT-B's")


def _order_values(means: pd.Series) -> str:
    """``"FC1 0.712 > MHA 0.590 > ..."``: the order of ``means`` with its values."""
    return " > ".join(f"{c} {v:.3f}" for c, v in means.sort_values(ascending=False).items())


def layer_summaries(per_layer: pd.DataFrame) -> list[dict]:
    """Notebook 02's rows on how a component's layers are summarised, per protocol and
    summary (``empirical.LAYER_SUMMARIES``, taken per task by ``empirical.task_summaries``, as
    in ``empirical.layer_summary``'s table): the order of the components by it (its mean over
    tasks, values shown) beside the paper's, and which neighbours in that order the tasks do not
    separate: the 95% t interval over tasks of their paired difference contains 0 (noise, at
    this many tasks). Descriptive rows: the paired differences of the paper's order are tested
    in ``plasticity_ranking``.

    Paper: Takeaway 2 and Fig. 2 (a per-layer mean)."""
    paper_order, rows = " > ".join(PLASTICITY_ORDER), []
    for protocol, g in task_summaries(per_layer).groupby("protocol"):
        for name in g.columns:
            per_task = g[name].droplevel("protocol").unstack("component")  # (tasks, components)
            means = per_task.mean().sort_values(ascending=False)
            noise = []
            for a, b in zip(means.index, means.index[1:]):
                d = (per_task[a] - per_task[b]).dropna()
                half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
                if abs(d.mean()) <= half:
                    noise.append(f"{a} - {b} = {d.mean():+.3f} +- {half:.3f}")
            order_ = " > ".join(means.index.astype(str))
            verdict = ("the paper's order" if order_ == paper_order else
                       "not the paper's order") + ("; neighbours within noise (95% CI over "
                                                   "tasks includes 0): " + ", ".join(noise)
                                                   if noise else "; every neighbour separated "
                                                   "(95% CI over tasks excludes 0)")
            rows.append(descriptive(f"order by the {name} [{protocol}]", _order_values(means),
                                    paper=f"{paper_order}, {SOURCES['fig2']}", verdict=verdict,
                                    n=len(per_task), unit="(plasticity, mean over tasks)"))
    return rows


def _precision_rows(precision: pd.DataFrame) -> list[dict]:
    """Per protocol: the median and largest 95% CI half-width of the per-layer estimates
    relative to the estimate (``empirical.precision``)."""
    return [descriptive(f"95% CI half-width of a per-layer estimate, relative to it, median "
                        f"over (task, layer, component) [{r['protocol']}]",
                        float(r["median_relative_ci95"]), paper="not reported",
                        verdict=f"largest {r['max_relative_ci95']:.1%}: " + (
                            f"precise (<= {PRECISE:.0%})" if r["max_relative_ci95"] <= PRECISE
                            else f"imprecise somewhere (> {PRECISE:.0%})"),
                        n=int(r["pairs"]), unit=f"median relative half-width, over the "
                        f"estimates of {int(r['pairs'])} pairs each")
            for _, r in precision.iterrows()]


# notebook 02b --------------------------------------------------------------------------------

#: Notebook 02b's exploratory family on the suite study, declared here before any of its
#: values was computed (the suite's finetuning runs, data/suite/, existed already; its
#: relative plasticity companions were being measured): within a task, Spearman's rho over
#: the five components between relative plasticity before finetuning (``vitplast.measure.relative``)
#: and the gain over head-only, one row per protocol, Holm over these two rows only. The
#: paper defines no relative plasticity, so no direction is expected: the rows read
#: "resolved: positive / negative" or "not resolved".
RELATIVE_SUITE = {p: "Spearman(relative plasticity, gain over head-only) over the five "
                     f"components, within a task [{p}]" for p in ("embedding", "hidden")}


def relative_suite(root, picked: pd.DataFrame, n_pairs: int = 256, *,
                   compute: bool = True) -> pd.DataFrame:
    """The ``RELATIVE_SUITE`` family as a findings table, on the complete tasks of ``picked``
    (the suite study's ``load``), reading the relative plasticity companions of the
    store ``root`` (``task_measures.task_plasticity(quantity="relative")``; measured once when
    missing, unless ``compute`` is False: then the stored tasks only, n says how many).
    Family "exploratory", its own table: Holm over its two rows.

    Paper: none (issue 38); Takeaway 3 makes its claim for plasticity."""
    tasks, rows = list(picked["task"].unique()), []
    for protocol, claim in RELATIVE_SUITE.items():
        rel = task_measures.component_plasticity(
            root, tasks, n_pairs, protocol, quantity="relative", compute=compute).dropna(
            subset=["relative_plasticity"])
        rho = spearman_plasticity_gain(picked, rel, value="relative_plasticity")
        rows.append(mean_test(claim, rho, paper="not in the paper (relative plasticity: issue "
                              "38); asked after the suite's runs existed", expected=math.nan,
                              unit="rho, per task", bounded=True))
    return table([*rows, _protocols_row(rows)])


def _protocols_row(rows: list[dict]) -> dict:
    """What the ``RELATIVE_SUITE`` rows say together (descriptive): under each protocol, does
    relative plasticity go with the gain (mean rho above 0) or against it."""
    said = [(p, r["measured"]) for p, r in zip(RELATIVE_SUITE, rows)
            if isinstance(r["measured"], float) and math.isfinite(r["measured"])]
    ways = [f"{'with' if m > 0 else 'against'} the gain under {p} (mean rho {m:+.2f})"
            for p, m in said]
    differ = len({m > 0 for _, m in said}) > 1
    return descriptive("relative plasticity and the gain, by protocol", "", paper="not in the "
                       "paper", n=max([r["n"] for r in rows] or [0]), unit="",
                       verdict=("the protocols disagree in sign: " if differ else
                                "the protocols agree in sign: ") + "; ".join(ways)
                       if said else "nothing measured yet (no task)")


def relative_suite_orders(root, picked: pd.DataFrame, n_pairs: int = 256, *,
                          compute: bool = True) -> pd.DataFrame:
    """What explains the sign of each ``RELATIVE_SUITE`` row: per protocol, the components'
    order of relative plasticity over the complete tasks of ``picked`` (mean rank, 1 = the
    largest in a task), and their order of gain over head-only, each beside the paper's
    (``suite_findings.order_row``). Descriptive rows, its own table (notebook 02b, section 7).

    Paper: none; Takeaway 3 makes its claim for plasticity (Fig. 2, Table 1)."""
    tasks, rows = list(picked["task"].unique()), []
    for protocol in RELATIVE_SUITE:
        rel = task_measures.component_plasticity(
            root, tasks, n_pairs, protocol, quantity="relative", compute=compute).dropna(
            subset=["relative_plasticity"])
        wide = rel.pivot(index="task", columns="component", values="relative_plasticity")
        rows.append(order_row(f"relative plasticity before finetuning, {protocol} protocol, "
                              "mean over blocks", wide[list(components.COMPONENTS)],
                              paper.PLASTICITY_ORDER, "plasticity: " + SOURCES["fig2"]))
    acc = accuracy(picked)
    rows.append(order_row("gain over head-only (test points)",
                          acc[list(components.COMPONENTS)].sub(acc["head"], axis=0),
                          paper.FINETUNING_ORDER, "Table 1 average (ViT-B/16)"))
    return table(rows)


# notebook 06 ---------------------------------------------------------------------------------
