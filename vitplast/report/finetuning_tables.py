"""The finetuning studies' tables (notebook 04, and the confound study's): the main table,
gains, the link between plasticity and gain, training dynamics and gradient norms, read from a
study's records table (``vitplast.experiments.results.records_table``).

Paper: section 5, the main table (best LR per configuration, mean +- std over 3 seeds),
robustness across learning rates (Fig. 18), training dynamics (Fig. 4). Beyond the paper:
paired tests between configurations, and the link between a component's measured plasticity
and its finetuning gain. The best LR is chosen on validation accuracy; ``on="test"``
reproduces the public code's choice on test accuracy and is labelled as such
(``selected_on``): the rule is ``vitplast.experiments.lr_selection``'s. Every table behind
notebook 04's findings comes as one ``FinetuningTables`` (``tables``); the findings
rows over them are ``vitplast.report.finetuning_findings``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from vitplast.experiments.lr_selection import (
    _select,
    lr_ties,
    selected_runs,
    tie_alternatives,
)
from vitplast.experiments.results import history
from vitplast.measure import plasticity
from vitplast.paper import TABLE1_CONFIGS, table1_average
from vitplast.train.configurations import CONFIG_ORDER


def main_table(df: pd.DataFrame, on: str = "val", ddof: int = 0) -> pd.DataFrame:
    """The paper's main table: per task x configuration, test accuracy at the selected LR.

    Args:
        df: ``records_table`` rows.
        on: where the LR is selected (``select_lr``); ``selected_on`` says which.
        ddof: of the std over seeds; 0 as the public code (``np.std``).

    Returns:
        Per setting (task, config, ...): ``lr``, ``test_acc_mean`` and ``test_acc_std`` over
        the seeds with status "ok" (in %; NaN when there are none), ``n_seeds``,
        ``selected_on``, ``lr_at_edge`` (the LR is the smallest or largest the setting was
        run at: the optimum may lie outside the grid); then per setting but task, a row with
        task "average": the mean of ``test_acc_mean`` over tasks, NaN unless every task has
        one (lr, std, n_seeds NaN).
    """
    keys, df, best = _select(df, on)
    chosen = df[df["status"] == "ok"].merge(best[["_setting", "lr"]], on=["_setting", "lr"])
    per_setting = chosen.groupby("_setting")["test_acc"].agg(
        test_acc_mean=lambda s: 100 * s.mean(), test_acc_std=lambda s: 100 * s.std(ddof=ddof),
        n_seeds="count")
    table = (df.drop_duplicates("_setting")[["_setting", *keys]]
             .merge(best[["_setting", "lr"]], on="_setting", how="left")
             .merge(per_setting, on="_setting", how="left").sort_values("_setting"))
    edges = df.groupby("_setting")["lr"].agg(["min", "max"])
    table["lr_at_edge"] = (table["lr"].eq(table["_setting"].map(edges["min"]))
                           | table["lr"].eq(table["_setting"].map(edges["max"])))
    rest = [k for k in keys if k != "task"]
    table["_rest"] = table.groupby(rest, dropna=False).ngroup() if rest else 0
    n_tasks = table["task"].nunique()
    means = table.groupby("_rest")["test_acc_mean"].agg(
        lambda s: s.mean() if s.notna().sum() == n_tasks else math.nan)
    average = table.drop_duplicates("_rest")[["_rest", *rest]].assign(
        task="average", test_acc_mean=lambda d: d["_rest"].map(means))
    out = pd.concat([table, average], ignore_index=True).assign(selected_on=on)
    out["lr_at_edge"] = out["lr_at_edge"].astype("boolean").fillna(False).astype(bool)
    return out.drop(columns=["_setting", "_rest"])[[*keys, "lr", "test_acc_mean", "test_acc_std",
                                                    "n_seeds", "selected_on", "lr_at_edge"]]


def main_wide(main: pd.DataFrame, probe: pd.Series | None = None,
              value: str = "test_acc_mean") -> pd.DataFrame:
    """``main_table`` as the paper prints it: tasks as rows (and "average"), configurations as
    columns, plus the linear probe (``probe``: accuracy in % per task) when given."""
    wide = main.pivot_table(index="task", columns="config", values=value, sort=False,
                            dropna=False)
    if probe is not None:
        wide["linear probe"] = probe.reindex(wide.index)
        wide.loc["average", "linear probe"] = probe.mean()
    order = [c for c in (*CONFIG_ORDER, "linear probe") if c in wide]
    # rows with no value at all (the average row of LRs) are left out
    return wide[order + [c for c in wide if c not in order]].dropna(how="all")


def compare_with_paper(wide: pd.DataFrame) -> pd.DataFrame:
    """The average row of ``main_wide`` beside Table 1's average (ViT-B/16 in21k, the
    paper's 11 datasets): per configuration, both accuracies (%) and both ranks."""
    configs = [c for c in TABLE1_CONFIGS if c in wide]
    out = pd.DataFrame({"config": configs,
                        "embedded (%)": [wide.loc["average", c] for c in configs],
                        "paper, Table 1 (%)": [table1_average(c) for c in configs]})
    out["embedded rank"] = out["embedded (%)"].rank(ascending=False).astype(int)
    out["paper rank"] = out["paper, Table 1 (%)"].rank(ascending=False).astype(int)
    return out


@dataclass(frozen=True)
class FinetuningTables:
    """Every table behind notebook 04's findings (``tables``), the task the unit.

    Attributes:
        main: ``main_table`` (per task x configuration, and the "average" rows).
        bands: ``lr_bands`` (per task x configuration x delta: the LR band's width, drops).
        corr: ``within_task_correlation`` of ``link`` (per protocol x task x component).
        grads: ``grad_norms_by_task`` of ``grad_norms`` (per task x configuration x kind).
        gain: ``gains`` of ``main`` over head-only.
        link: ``plasticity_vs_gain`` (per task x component x protocol); None: no link rows.
        dynamics: ``dynamics`` (the curves at each setting's selected LR).
        grad_norms: ``component_grad_norms`` of ``dynamics`` (per run x step x kind).
        budget: ``main_table`` of the budget check's runs; None: no budget check.
        ties: ``lr_ties`` (the LR choices the tie-break decided); None: not computed.
        alternatives: these tables again, once per tied choice broken the other way
            (``tie_alternatives``; empty: none, or not computed).
    """

    main: pd.DataFrame
    bands: pd.DataFrame
    corr: pd.DataFrame
    grads: pd.DataFrame
    gain: pd.DataFrame | None = None
    link: pd.DataFrame | None = None
    dynamics: pd.DataFrame | None = None
    grad_norms: pd.DataFrame | None = None
    budget: pd.DataFrame | None = None
    ties: pd.DataFrame | None = None
    alternatives: tuple[FinetuningTables, ...] = ()


def tables(runs: pd.DataFrame, budget: pd.DataFrame, root, *, rates: pd.DataFrame,
                      on: str = "val", ties: bool = True, curves: pd.DataFrame | None = None
                      ) -> FinetuningTables:
    """Every table behind notebook 04's findings (``FinetuningTables``), from a study's runs
    (``GridStudy.load``: ``records_table`` rows) and the plasticity ``rates`` of its tasks; with
    ``ties``, also ``ties`` and ``alternatives``.

    Args:
        budget: the budget check's runs (empty: none).
        root: the study's store (its curves are read from it unless ``curves`` is given).
        on: where each LR is selected (``select_lr``).
        curves: ``history(root)``, when already read.
    """
    curves = history(root) if curves is None else curves
    main = main_table(runs, on=on)
    gain = gains(main)
    link = plasticity_vs_gain(plasticity.ranking(rates), gain)
    dyn = dynamics(runs, curves, on=on)
    norms = component_grad_norms(dyn)
    alternatives = tuple(tables(alt, budget, root, rates=rates, on=on, ties=False, curves=curves)
                         for alt in tie_alternatives(runs, on)) if ties else ()
    return FinetuningTables(
        main=main, bands=lr_bands(runs), corr=within_task_correlation(link),
        grads=grad_norms_by_task(norms), gain=gain, link=link, dynamics=dyn, grad_norms=norms,
        budget=main_table(budget, on=on) if len(budget) else None,
        ties=lr_ties(runs, on) if ties else None, alternatives=alternatives)


def budget_comparison(main: pd.DataFrame, budget: pd.DataFrame | None) -> pd.DataFrame:
    """Per task of the budget check x configuration, test accuracy (%) at the main study's
    budget and at the budget check's (``budget``: "1x" or "4x" steps); empty without one."""
    if budget is None or not len(budget):
        return pd.DataFrame(columns=["task", "config", "test_acc_mean", "budget"])
    tasks = set(budget["task"]) - {"average"}
    both = [main[main["task"].isin(tasks)].assign(budget="1x steps"),
            budget[budget["task"].isin(tasks)].assign(budget="4x steps")]
    return pd.concat(both, ignore_index=True)[["task", "config", "test_acc_mean", "budget"]]


def gains(main: pd.DataFrame, baseline: str = "head") -> pd.DataFrame:
    """Each configuration's test accuracy against a baseline configuration, per task.

    Columns added to ``main``'s (task, config, test_acc_mean...): ``baseline_acc``,
    ``gain_pp`` (accuracy minus the baseline's, in points) and ``gain_rel`` (the share of the
    baseline's error removed: gain_pp / (100 - baseline_acc)); NaN where the baseline has no
    result.
    """
    base = main[main["config"] == baseline].set_index("task")["test_acc_mean"]
    out = main.assign(baseline_acc=main["task"].map(base))
    out["gain_pp"] = out["test_acc_mean"] - out["baseline_acc"]
    out["gain_rel"] = out["gain_pp"] / (100 - out["baseline_acc"])
    return out


def dynamics(df: pd.DataFrame, curves: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Training curves of the runs at each setting's selected LR (the Fig. 4 analogue).

    Args:
        df: ``records_table`` rows (a ``variant`` column, as
            ``confound_variants.with_variant`` adds, is kept);
            curves: ``history`` of the same store.

    Returns:
        ``history`` rows joined with ``task``, ``config``, ``lr``, ``seed``, ``component``
        (the component the configuration trains: ``ablation.component`` for the confound
        variants that set it, else the configuration) and ``variant`` when ``df`` has it.
    """
    runs = selected_runs(df, on)
    component = runs["config"]
    if "ablation.component" in runs:
        component = runs["ablation.component"].fillna(component)
    keep = ["run", "task", "config", "lr", "seed", *(["variant"] if "variant" in runs else [])]
    return curves.merge(runs[keep].assign(component=component), on="run")


def paired_tests(df: pd.DataFrame, reference: str = "MHA", on: str = "val",
                 by: str = "config") -> pd.DataFrame:
    """``reference`` against every other configuration, paired on (task, seed) at each
    configuration's selected LR: paired t-test and Wilcoxon signed-rank test.

    ``by``: the column naming what is compared (``"variant"`` for ``confound_variants.with_variant``
    results). Columns: ``by``, ``n_pairs``, ``mean_diff_pp`` (reference minus it, in points),
    ``ci95_pp`` (half-width of its 95% t interval), ``t_stat``, ``t_p``, ``wilcoxon_p``
    (two-sided; NaN with fewer than 2 pairs or no difference at all).
    """
    runs = selected_runs(df, on)
    acc = runs.pivot_table(index=["task", "seed"], columns=by, values="test_acc")
    rows = []
    if reference not in acc:  # nothing to compare yet
        acc = pd.DataFrame(columns=[reference])
    for other in [c for c in acc.columns if c != reference]:
        pair = acc[[reference, other]].dropna()
        diff, n = 100 * (pair[reference] - pair[other]), len(pair)
        t = stats.ttest_rel(pair[reference], pair[other]) if n > 1 else None
        w = (stats.wilcoxon(diff).pvalue if n > 1 and (diff != 0).any() else math.nan)
        ci = stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / math.sqrt(n) if n > 1 else math.nan
        rows.append({by: other, "n_pairs": n, "mean_diff_pp": diff.mean(), "ci95_pp": ci,
                     "t_stat": t.statistic if t else math.nan,
                     "t_p": t.pvalue if t else math.nan, "wilcoxon_p": w})
    return pd.DataFrame(rows, columns=[by, "n_pairs", "mean_diff_pp", "ci95_pp", "t_stat", "t_p",
                                       "wilcoxon_p"])


def plasticity_vs_gain(ranked: pd.DataFrame, gain: pd.DataFrame) -> pd.DataFrame:
    """Per task x component x protocol: measured plasticity (``plasticity.ranking``) beside
    that component's finetuning gain over the baseline (``gains``)."""
    g = gain[gain["config"].isin(ranked["component"].astype(str).unique())]
    merged = ranked.assign(config=ranked["component"].astype(str)).merge(
        g[["task", "config", "test_acc_mean", "gain_pp", "gain_rel"]], on=["task", "config"])
    return merged.drop(columns="config")


def within_task_correlation(link: pd.DataFrame, x: str = "plasticity", y: str = "gain_pp",
                            by: str = "protocol") -> pd.DataFrame:
    """Per task (and ``by`` group): Spearman correlation over the components of ``x`` and
    ``y`` (``plasticity_vs_gain``), and each component's rank by both (1 = highest): the
    task is the unit, so that no two points of one correlation come from unlike tasks.

    Returns:
        One row per by x task x component: ``spearman`` (of its task), ``rank_x``, ``rank_y``.
    """
    out = []
    for key, g in link.dropna(subset=[x, y]).groupby([by, "task"]):
        rho = stats.spearmanr(g[x], g[y]).statistic if len(g) > 2 else np.nan
        out.append(g[[by, "task", "component"]].assign(
            spearman=rho, rank_x=g[x].rank(ascending=False), rank_y=g[y].rank(ascending=False)))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(
        columns=[by, "task", "component", "spearman", "rank_x", "rank_y"])


def component_grad_norms(dyn: pd.DataFrame) -> pd.DataFrame:
    """From ``dynamics``: each configuration's gradient norm on its own component, total and
    per trainable parameter (norm / sqrt(#trainable)), one row per run x step x ``kind``."""
    own = dyn[dyn["metric"].str.split("/").str[-1] == dyn["component"]]
    kind = np.where(own["metric"].str.startswith("grad_norm_per_param/"), "per parameter", "total")
    return own.assign(kind=kind)


def grad_norms_by_task(norms: pd.DataFrame) -> pd.DataFrame:
    """From ``component_grad_norms``: per task x config x kind, the mean over logged steps and
    seeds of the gradient norm on the configuration's own component (the task is the unit)."""
    per_run = norms.groupby(["task", "config", "kind", "run"])["value"].mean()
    return per_run.groupby(["task", "config", "kind"]).mean().rename("grad_norm").reset_index()


def lr_bands(df: pd.DataFrame, within=(1.0, 2.0), chance: float = 10.0) -> pd.DataFrame:
    """LR robustness relative to each setting's own best LR (the Fig. 18 analogue, measured).

    Per task x configuration, on the curve of seed-mean validation accuracy (in %) over
    log10(lr), where a diverged run counts as ``chance`` (its model is unusable) and a failed
    one is left out: the ``width`` in decades of the band around the best LR where accuracy
    stays within ``delta`` points of the best (edges interpolated linearly in log-LR between
    the last LR inside and the first outside), and the ``drop`` in points at best x3 and
    best / 3 (interpolated). A band that reaches an end of the grid is not ``bracketed``: its
    width is then NaN, since the grid does not show where it ends.

    Returns:
        One row per task x config x delta: ``task``, ``config``, ``delta``, ``best_lr``,
        ``best_acc``, ``width``, ``bracketed``, ``drop_x3``, ``drop_div3``.
    """
    runs = df[df["status"].isin(["ok", "diverged"])]
    acc = 100 * runs["best_val_acc"].where(runs["status"] == "ok", chance / 100)
    curves = runs.assign(acc=acc).groupby(["task", "config", "lr"])["acc"].mean().reset_index()
    rows = []
    for (task, config), c in curves.groupby(["task", "config"]):
        x, y = np.log10(c["lr"].to_numpy()), c["acc"].to_numpy()
        best = int(np.argmax(y))
        for delta in within:
            lo, hi = _edge(x, y, best, -1, y[best] - delta), _edge(x, y, best, 1, y[best] - delta)
            rows.append(dict(task=task, config=config, delta=delta, best_lr=10 ** x[best],
                             best_acc=y[best], width=hi - lo, bracketed=not math.isnan(hi - lo),
                             drop_x3=y[best] - np.interp(x[best] + math.log10(3), x, y),
                             drop_div3=y[best] - np.interp(x[best] - math.log10(3), x, y)))
    return pd.DataFrame(rows)


def _edge(x: np.ndarray, y: np.ndarray, start: int, step: int, level: float) -> float:
    """Where ``y`` first falls below ``level`` walking from ``start`` by ``step`` (log-LR,
    interpolated); NaN if it never does inside the grid."""
    i = start
    while 0 <= i + step < len(x):
        if y[i + step] < level:
            t = (y[i] - level) / (y[i] - y[i + step])
            return x[i] + t * (x[i + step] - x[i])
        i += step
    return math.nan


__all__ = ["FinetuningTables", "budget_comparison", "compare_with_paper", "component_grad_norms",
           "dynamics", "gains", "grad_norms_by_task", "lr_bands", "main_table", "main_wide",
           "paired_tests", "plasticity_vs_gain", "tables", "within_task_correlation"]
