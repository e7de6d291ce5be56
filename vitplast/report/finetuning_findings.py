"""Findings of the finetuning studies (notebooks 04 and 05), as ``verdicts`` tables.

Each table opens with the study's declared primary questions (``Study.primaries``: Holm over
them only), then exploratory rows (their own Holm family), then descriptive ones. Groups are
named by what they are: a contrast of component types is named by the types; a grouping by
plasticity is computed from the plasticity measured on the model and task in question. Every
table is built once from the study's LR choices and once more per tied choice broken the other
way (``with_ties``): a row whose verdict moves is marked ``fragile``, and a row counts the ties.

``STATISTICS`` names the per-task statistics a ``primaries.Primary`` may declare.

Paper: section 5, Takeaway 3, Table 1, Figs. 4 and 18; objections 3-4 (docs/objections.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats

from vitplast.measure.components import NORMS
from vitplast.measure.pairs import PROTOCOLS
from vitplast.paper import FIG2_PLASTICITY, FINETUNING_ORDER, SOURCES, group_gap, table1_average
from vitplast.stats.verdicts import (
    ORDER_HELD_TAU,
    TOP_RANK,
    descriptive,
    mean_test,
    paired_test,
    same,
    table,
)

if TYPE_CHECKING:  # for annotations only
    from vitplast.report.finetuning_tables import FinetuningTables

#: Per-task statistics a primary may name, and what each is: rank correlations, in [-1, 1]
#: (``primaries.Primary.row`` cuts their intervals there).
STATISTICS = {
    "spearman(plasticity, gain)": "Spearman's rho over the five components, within a task, "
    "between measured plasticity and the gain of finetuning the component alone over "
    "head-only (finetuning_tables.within_task_correlation)",
    "partial spearman(plasticity, accuracy | block)": "per component, Spearman's rho over the "
    "blocks between a block's plasticity and the accuracy of finetuning it alone, partial on "
    "the block index; mean over the components where it is defined (neither plasticity nor "
    "accuracy monotone in depth: confound_tables.layer_correlations)",
}
_TASKS = "points, per task (seed-mean)"


def _paper_diff(a: str, b: str) -> tuple[str, float]:
    gap = table1_average(a) - table1_average(b)
    return f"{gap:+.2f} points (Table 1 average)", gap


def declared_by(primaries) -> set:
    """The pairs of configuration groups and the statistics the primaries test (an
    exploratory row never repeats them)."""
    return {(p.a, p.b) for p in primaries} | {p.statistic for p in primaries if p.statistic}


def _verdict_core(found: pd.DataFrame) -> pd.Series:
    """Per claim, the verdict without its power note (what a flip is judged on)."""
    core = found["verdict"].where(found["verdict"].str.startswith("resolved"),
                                  found["verdict"].str.split(":").str[0])
    return core.set_axis(found["claim"])[~found["claim"].duplicated().to_numpy()]


def with_ties(build, t) -> pd.DataFrame:
    """``build(t)`` (a findings table from a study's tables: ``FinetuningTables``,
    ``ConfoundTables``), its ``fragile`` column computed: a row is fragile when one of
    ``t.alternatives`` (the same tables with one tied LR choice broken the other way:
    ``lr_selection.tie_alternatives``) flips its verdict. A descriptive row counts the ties
    (``t.ties``: ``lr_selection.lr_ties``; None: not computed, no row)."""
    found = build(t)
    core, fragile = _verdict_core(found), set()
    for alt in t.alternatives:
        other = _verdict_core(build(alt))
        common = core.index.intersection(other.index)
        fragile |= set(common[(core[common] != other[common]).to_numpy()])
    found["fragile"] = found["claim"].isin(fragile)
    ties = t.ties
    if ties is None:
        return found
    what = ", ".join(f"{r.task} / {r.setting} at {r.lr:g}" for r in ties.assign(
        setting=ties.get("variant", ties.get("config"))).itertuples()) or "none"
    row = descriptive("LR choices decided by the tie-break (equal seed-mean validation "
                      "accuracy; then the lower seed-mean validation loss)", f"{len(ties)}: {what}",
                      paper="not reported", n=len(ties), unit="tied choices",
                      verdict=f"{len(fragile)} row(s) fragile: " + ("; ".join(sorted(fragile))
                                                                   or "none"))
    return pd.concat([found, table([row])], ignore_index=True)


# -- Notebook 04: finetuning each component alone --------------------------------------------

def _wide(main: pd.DataFrame) -> pd.DataFrame:
    """``finetuning_tables.main_table`` as tasks x configurations (seed-mean test accuracy, %)."""
    rows = main[main["task"] != "average"]
    return rows.pivot_table(index="task", columns="config", values="test_acc_mean")


def _rho(corr: pd.DataFrame, protocol: str) -> pd.Series:
    """The per-task plasticity-gain rho under the declared ``protocol``."""
    return corr[corr["protocol"] == protocol].drop_duplicates("task").set_index("task")[
        "spearman"]


def _family(row: dict, protocol: str, declared_protocol: str) -> dict:
    """``row`` in the family "sensitivity" when it reports the protocol other than the
    declared one (beside the declared row, Holm within its own family)."""
    return row if protocol == declared_protocol or row["family"] == "descriptive" else {
        **row, "family": "sensitivity"}


def finetuning(t: FinetuningTables, probe: pd.Series, primaries=(), protocol: str = "hidden"
               ) -> pd.DataFrame:
    """Notebook 04's findings table (the task is the unit everywhere). Every row that reads
    plasticity is computed under each protocol of ``t.corr``: under the declared
    ``protocol`` as the study declared it, under the other in the family "sensitivity".

    Args:
        t: ``finetuning_tables.tables``: its ``main``, ``bands``, ``link``,
            ``corr``, ``grads``, ``budget`` (None: no budget rows), and ``ties`` /
            ``alternatives`` (the fragile flag; None / empty: not computed).
        probe: linear-probe test accuracy (%) per task.
        primaries: the study's ``primaries.Primary`` questions (``studies.Study.primaries``).
        protocol: the plasticity protocol the study declared (``pairs.PROTOCOLS``).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")
    return with_ties(lambda tt: _finetuning(tt, probe, primaries, protocol), t)


def _finetuning(t: FinetuningTables, probe: pd.Series, primaries, protocol: str
                ) -> pd.DataFrame:
    acc, declared = _wide(t.main), declared_by(primaries)
    rows = [p.row(acc, {"spearman(plasticity, gain)": _rho(t.corr, protocol)})
            for p in primaries]
    for a, b in [*zip(FINETUNING_ORDER, FINETUNING_ORDER[1:]), ("MHA", "full")]:
        if ((a,), (b,)) not in declared and a in acc and b in acc:
            paper, gap = _paper_diff(a, b)
            rows.append(paired_test(f"{a} - {b}, test accuracy", acc[a], acc[b], unit=_TASKS,
                                    paper=paper + (", about equal" if b == "full" else ""),
                                    expected=0 if b == "full" else 1, effect=gap,
                                    sides=(_alone(a), _alone(b))))
    if "LN1" in acc:
        paper, gap = _paper_diff("LN1", "linear probe")
        rows.append(paired_test("LN1 - linear probe, test accuracy", acc["LN1"], probe,
                                paper=paper, expected=1, unit=_TASKS, effect=gap,
                                sides=(_alone("LN1"), "the linear probe")))
    rows += _measured_groups(t.link, protocol)
    rows += _stability_rows(t.bands, SOURCES["lr_stability"])
    rows += _plasticity_rows(t.corr, SOURCES["plasticity_gain"], protocol, declared)
    rows += grad_rows(t.grads, SOURCES["grad_norms"])
    rows += _budget_rows(t.main, t.budget)  # rows without values: no budget check
    return table(rows)


def _alone(config: str) -> str:
    """A configuration in words, for a sentence: "MHA alone", "full finetuning"."""
    return "full finetuning" if config == "full" else f"{config} alone"


def _measured_groups(link: pd.DataFrame | None, declared: str, k: int = 2) -> list[dict]:
    """The ``k`` components measured most plastic on each task minus the ``k`` least plastic
    (test accuracy), per protocol (the ``declared`` one's row exploratory, the other's
    sensitivity): a grouping by plasticity computed from measurement; and the measured
    order, the most common over tasks."""
    rows = []
    top, bottom = list(FIG2_PLASTICITY)[:k], list(FIG2_PLASTICITY)[-k:]
    for protocol, g in ([] if link is None else link.groupby("protocol")):
        order = g.sort_values("plasticity", ascending=False).groupby("task")["component"].agg(
            lambda s: tuple(s.astype(str)))
        acc = g.pivot_table(index="task", columns="component", values="test_acc_mean",
                            observed=True)
        diff = pd.Series({task: acc.loc[task, list(o[:k])].mean() - acc.loc[task, list(o[-k:])]
                          .mean() for task, o in order.items()})
        rows.append(_family(mean_test(
            f"the {k} components measured most plastic on a task - the {k} least plastic, "
            f"test accuracy [{protocol}]", diff, paper=f"{group_gap(top, bottom):+.2f} points "
            f"({', '.join(top)} - {', '.join(bottom)}; Fig. 2 order, Table 1 average)",
            expected=1, unit=_TASKS, effect=group_gap(top, bottom),
            sides=(f"the {k} most plastic", f"the {k} least plastic")), protocol, declared))
        mode = order.mode().iloc[0] if len(order) else ()
        rows.append(descriptive(f"measured plasticity order, most common over tasks [{protocol}]",
                                " > ".join(mode), paper=" > ".join(FIG2_PLASTICITY) + " (Fig. 2)",
                                verdict=f"on {int((order == mode).sum())} of {len(order)} tasks",
                                n=len(order), unit="(order)"))
    return rows


def _ln_mean(frame: pd.DataFrame, value: str) -> pd.Series:
    ln = frame[frame["config"].isin(NORMS)]
    return ln.groupby("task")[value].mean()


def _stability_rows(bands: pd.DataFrame, source: str) -> list[dict]:
    rows = []
    for delta in sorted(bands["delta"].unique()):
        b = bands[bands["delta"] == delta]
        mha = b[b["config"] == "MHA"].set_index("task")
        rows.append(paired_test(
            f"MHA - LayerNorms, width of the LR band within {delta:g} point(s) of the best",
            mha["width"], _ln_mean(b, "width"), paper=source, expected=1,
            unit="decades of LR, per task (bracketed bands only)",
            sides=("MHA", "the LayerNorms")))
    b = bands[bands["delta"] == bands["delta"].min()]
    mha = b[b["config"] == "MHA"].set_index("task")
    rows.append(paired_test("MHA - LayerNorms, accuracy drop at 3x the best LR", mha["drop_x3"],
                            _ln_mean(b, "drop_x3"), paper=source + ": smaller drop", expected=-1,
                            unit="points of validation accuracy, per task",
                            sides=("MHA's drop", "the LayerNorms' drop")))
    return rows


def _plasticity_rows(corr: pd.DataFrame, source: str, protocol: str, declared=()
                     ) -> list[dict]:
    """Per protocol: the within-task plasticity-gain rho (unless the declared protocol's is a
    primary; the other protocol's in the family "sensitivity"), and where MHA sits."""
    rows = []
    for p, c in corr.groupby("protocol"):
        per_task = c.drop_duplicates("task").set_index("task")["spearman"]
        if p != protocol or "spearman(plasticity, gain)" not in declared:
            rows.append(_family(mean_test(
                f"Spearman(plasticity, gain over head-only) over the five components, within a "
                f"task [{p}]", per_task, paper=source + ": positive", expected=1,
                unit="rho, per task", bounded=True), p, protocol))
        mha = c[c["component"] == "MHA"]
        ranks = f"plasticity rank {mha['rank_x'].mean():.1f}, gain rank {mha['rank_y'].mean():.1f}"
        top = mha["rank_x"].mean() <= TOP_RANK and mha["rank_y"].mean() <= TOP_RANK
        rows.append(descriptive(f"where MHA sits among the five [{p}] (1 = highest)", ranks,
                                paper="highest plasticity and highest gain (Fig. 2, Table 1)",
                                verdict=same(top),
                                n=mha["task"].nunique(), unit="mean over tasks"))
    return rows


def grad_rows(grads: pd.DataFrame, source: str) -> list[dict]:
    rows = []
    for kind, expected, paper in (("total", 1, source),
                                  ("per parameter", math.nan, "not reported (objection 4)")):
        g = grads[grads["kind"] == kind].assign(log=lambda d: np.log10(d["grad_norm"]))
        rows.append(paired_test(f"MHA / LayerNorms, gradient norm on its own component "
                                f"({kind}), log10 ratio", g[g["config"] == "MHA"]
                                .set_index("task")["log"], _ln_mean(g, "log"), paper=paper,
                                expected=expected, unit="decades, per task",
                                sides=("MHA", "the LayerNorms")))
    return rows


def _budget_rows(main: pd.DataFrame, budget: pd.DataFrame) -> list[dict]:
    """Does the order hold at 4x the steps? Kendall's tau between each task's order of the
    configurations at 1x and at 4x (mean over tasks, descriptive: no cutoff), and MHA - LN1
    at 4x (a test where there are enough tasks); measured on 0 tasks when ``budget`` is None."""
    if budget is None:
        budget = pd.DataFrame(columns=["task", "config", "test_acc_mean"])

    taus = []
    for task, b in budget[budget["task"] != "average"].groupby("task"):
        m = main[main["task"] == task].set_index("config")["test_acc_mean"]
        x = b.set_index("config")["test_acc_mean"]
        common = m.index.intersection(x.index)
        taus.append(stats.kendalltau(m[common], x[common]).statistic)
    tau = float(np.mean(taus)) if taus else math.nan
    acc4 = _wide(budget)
    paper, gap = _paper_diff("MHA", "LN1")
    held = (f"the order mostly held (tau >= {ORDER_HELD_TAU:g})" if tau >= ORDER_HELD_TAU else
            f"the order changed (tau < {ORDER_HELD_TAU:g})")
    return [descriptive("order of the seven configurations at 4x vs 1x the steps (Kendall tau)",
                        tau, paper="not studied", n=len(taus), unit="Kendall tau, mean over tasks",
                        verdict=f"{held}, on {len(taus)} task(s) with runs at 4x the steps"
                        if taus else "not measured: no task has runs at 4x the steps"),
            paired_test("MHA - LN1 at 4x the steps, test accuracy", acc4.get("MHA", pd.Series(
                dtype=float)), acc4.get("LN1", pd.Series(dtype=float)),
                paper=paper + " at the paper's budget", expected=1, unit=_TASKS, effect=gap,
                sides=(_alone("MHA"), _alone("LN1"))),
            _budget_gain(_wide(main), acc4)]


def _budget_gain(acc1: pd.DataFrame, acc4: pd.DataFrame) -> dict:
    """Per task of the budget check, what 4x the steps added: the mean over configurations of
    the 4x minus the 1x test accuracy, with the smallest and largest configuration's gain (an
    order can hold while every configuration gains many points)."""
    tasks = [t for t in acc4.index if t in acc1.index]
    parts = []
    for task in tasks:
        both = [c for c in acc4.columns if c in acc1.columns]
        gain = acc4.loc[task, both] - acc1.loc[task, both]
        parts.append(f"{task} {gain.mean():+.1f} (from {gain.min():+.1f} to {gain.max():+.1f})")
    return descriptive("gain from 4x the steps, per task (mean over the configurations, their "
                       "range)", "; ".join(parts) or "none", paper="not studied", n=len(tasks),
                       unit="(test points)",
                       verdict=("every configuration gained on every task" if parts and all(
                           (acc4.loc[t] - acc1.loc[t]).dropna().min() > 0 for t in tasks)
                           else "not every configuration gained" if parts
                           else "not measured: no task has runs at 4x the steps"))
