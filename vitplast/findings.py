"""Findings: every notebook's conclusions as a tidy table, and the one function that renders it.

A finding is a row: ``claim``; ``paper``, the paper's value or statement with its source
(``vitplast.paper``); ``measured``; ``ci95``, the half-width of its 95% t interval; ``p``,
two-sided, and ``p_holm``, Holm-corrected over the notebook's family (every row of one table
with a p); ``n`` and its ``unit`` (the independent unit: tasks, never seeds of one task);
``verdict``. Extra columns: ``expected`` (the paper's sign for ``measured``: +1, -1, 0 where
it reports about no difference, NaN where it states nothing), ``p_wilcoxon`` (signed-rank test
on the same differences), ``test`` and ``counts`` (the trainable counts a matched comparison
compares).

Verdicts, after Holm at ``alpha``: "agrees with the paper" / "disagrees with the paper" when the
difference is significant and its sign is / is not the paper's; "not resolved" when it is not
significant (or n < 3); where the paper reports no difference (``expected`` 0), a significant
one disagrees; where it states nothing, a significant result reads "resolved: positive" or
"resolved: negative". Descriptive rows (no test) carry their own verdict, "(untested)". Prose
is made from rows by ``render`` only.

Used by notebooks 01-06: one builder per notebook, below the table machinery.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vitplast.paper import FINETUNING_ORDER, SOURCES, VITB_RMS_TOKEN_NORM, table1_average

COLUMNS = ["claim", "paper", "measured", "ci95", "p", "p_holm", "n", "unit", "verdict"]
EXTRA = ["expected", "p_wilcoxon", "test", "counts"]
ALPHA = 0.05


def _t_interval(values: np.ndarray) -> tuple[float, float]:
    """(half-width of the 95% t interval of the mean, two-sided one-sample t p)."""
    from scipy import stats

    n = len(values)
    if n < 2:
        return math.nan, math.nan
    sd = values.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    if sd == 0:
        return 0.0, (1.0 if values.mean() == 0 else 0.0)
    return float(half), float(stats.ttest_1samp(values, 0.0).pvalue)


def mean_test(claim: str, values, *, paper: str, expected: int, unit: str) -> dict:
    """A finding on the mean of per-unit values (e.g. per-task differences a - b, or per-task
    correlations): one-sample t test and Wilcoxon signed-rank test of mean 0, over the units.

    Args:
        values: one number per independent unit (NaN dropped).
        expected: the paper's sign for the mean (+1, -1; 0: about no difference; NaN: the
            paper states nothing).
    """
    from scipy import stats

    v = pd.Series(values, dtype=float).dropna().to_numpy()
    ci, p = _t_interval(v)
    w = (float(stats.wilcoxon(v).pvalue) if len(v) > 1 and (v != 0).any() else math.nan)
    return dict(claim=claim, paper=paper, measured=float(v.mean()) if len(v) else math.nan,
                ci95=ci, p=p, n=len(v), unit=unit, expected=expected, p_wilcoxon=w,
                test="t (Wilcoxon beside)")


def paired_test(claim: str, a: pd.Series, b: pd.Series, *, paper: str, expected: int,
                unit: str) -> dict:
    """``mean_test`` of a - b, paired on their common index (the units)."""
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    return mean_test(claim, both["a"] - both["b"], paper=paper, expected=expected, unit=unit)


def descriptive(claim: str, measured, *, paper: str, verdict: str, n: int, unit: str) -> dict:
    """A finding with no test, its ``verdict`` given (e.g. "same as the paper (untested)")."""
    return dict(claim=claim, paper=paper, measured=measured, ci95=math.nan, p=math.nan, n=n,
                unit=unit, expected=math.nan, p_wilcoxon=math.nan, test="none", verdict=verdict)


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


def _verdict(row, alpha: float) -> str:
    if row["test"] == "none":
        return row["verdict"]
    if not row["n"] >= 3 or math.isnan(row["p_holm"]) or row["p_holm"] >= alpha:
        return "not resolved"
    if math.isnan(row["expected"]):  # the paper states nothing on it
        return "resolved: " + ("positive" if row["measured"] > 0 else "negative")
    if row["expected"] == 0:  # the paper reports about no difference
        return "disagrees with the paper"
    same = np.sign(row["measured"]) == row["expected"]
    return "agrees with the paper" if same else "disagrees with the paper"


def table(rows: list[dict], alpha: float = ALPHA) -> pd.DataFrame:
    """The findings table of one notebook: Holm over every row with a p, then verdicts."""
    df = pd.DataFrame(rows)
    for col in [*COLUMNS, *EXTRA]:
        if col not in df:
            df[col] = math.nan if col != "verdict" else ""
    df["p_holm"] = holm(df["p"])
    df["verdict"] = [_verdict(r, alpha) for _, r in df.iterrows()]
    return df[[*COLUMNS, *EXTRA]]


def _num(x, fmt: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def render(findings: pd.DataFrame) -> str:
    """The findings as text, one line per row: the only prose the kit makes of results."""
    lines = []
    for r in findings.itertuples():
        measured = _num(r.measured, "+.3g") if isinstance(r.measured, float) else str(r.measured)
        stats_ = (f"; 95% CI +- {_num(r.ci95, '.2g')}, p = {_num(r.p, '.2g')}, Holm p = "
                  f"{_num(r.p_holm, '.2g')}" if r.test != "none" else "")
        lines.append(f"- {r.claim}: {measured} {r.unit} (n = {r.n}{stats_}). "
                     f"Paper: {r.paper}. Verdict: {r.verdict}.")
    return "\n".join(lines)


# -- Notebook 04: finetuning each component alone -------------------------------------------

_TASKS = "points, per task (seed-mean)"


def _by_task(main: pd.DataFrame, config: str, value: str = "test_acc_mean") -> pd.Series:
    rows = main[(main["config"] == config) & (main["task"] != "average")]
    return rows.set_index("task")[value]


def _paper_diff(a: str, b: str) -> str:
    return f"{table1_average(a) - table1_average(b):+.2f} points (Table 1 average)"


def finetuning(main: pd.DataFrame, bands: pd.DataFrame, corr: pd.DataFrame,
               grads: pd.DataFrame, probe: pd.Series, budget: pd.DataFrame | None = None
               ) -> pd.DataFrame:
    """Notebook 04's findings table, from its tables (the task is the unit everywhere).

    Args:
        main: ``results.main_table`` of the main study (test accuracy at the LR chosen on
            validation, seed-mean per task).
        bands: ``results.lr_bands`` of the main study.
        corr: ``results.within_task_correlation`` (plasticity vs gain, per task).
        grads: ``results.grad_norms_by_task``.
        probe: linear-probe test accuracy (%) per task.
        budget: ``results.main_table`` of the 4x-steps runs (None: no budget rows).
    """
    acc = {c: _by_task(main, c) for c in main["config"].unique()}
    rows = []
    for a, b in zip(FINETUNING_ORDER, FINETUNING_ORDER[1:]):
        rows.append(paired_test(f"{a} - {b}, test accuracy", acc[a], acc[b],
                                paper=_paper_diff(a, b), expected=1, unit=_TASKS))
    high = pd.concat([acc[c] for c in ("MHA", "FC1", "FC2")], axis=1).mean(axis=1)
    low = pd.concat([acc[c] for c in ("LN1", "LN2")], axis=1).mean(axis=1)
    paper_gap = (sum(table1_average(c) for c in ("MHA", "FC1", "FC2")) / 3
                 - sum(table1_average(c) for c in ("LN1", "LN2")) / 2)
    rows.append(paired_test("high-plasticity components (MHA, FC1, FC2) - LayerNorms, test "
                            "accuracy", high, low, paper=f"{paper_gap:+.2f} points (Table 1 "
                            "average)", expected=1, unit=_TASKS))
    rows.append(paired_test("MHA - full finetuning, test accuracy", acc["MHA"], acc["full"],
                            paper=_paper_diff("MHA", "full") + ", about equal", expected=0,
                            unit=_TASKS))
    worst = pd.concat([acc[c] for c in FINETUNING_ORDER], axis=1).min(axis=1)
    rows.append(paired_test("weakest single component - linear probe, test accuracy", worst,
                            probe, paper=_paper_diff("LN1", "linear probe"), expected=1,
                            unit=_TASKS))
    rows += _stability_rows(bands, SOURCES["lr_stability"])
    rows += _plasticity_rows(corr, SOURCES["plasticity_gain"])
    rows += _grad_rows(grads, SOURCES["grad_norms"])
    if budget is not None:
        rows += _budget_rows(main, budget)
    return table(rows)


def _ln_mean(frame: pd.DataFrame, value: str) -> pd.Series:
    ln = frame[frame["config"].isin(["LN1", "LN2"])]
    return ln.groupby("task")[value].mean()


def _stability_rows(bands: pd.DataFrame, source: str) -> list[dict]:
    rows = []
    for delta in sorted(bands["delta"].unique()):
        b = bands[bands["delta"] == delta]
        mha = b[b["config"] == "MHA"].set_index("task")
        rows.append(paired_test(
            f"MHA - LayerNorms, width of the LR band within {delta:g} point(s) of the best",
            mha["width"], _ln_mean(b, "width"), paper=source, expected=1,
            unit="decades of LR, per task (bracketed bands only)"))
    b = bands[bands["delta"] == bands["delta"].min()]
    mha = b[b["config"] == "MHA"].set_index("task")
    rows.append(paired_test("MHA - LayerNorms, accuracy drop at 3x the best LR", mha["drop_x3"],
                            _ln_mean(b, "drop_x3"), paper=source + ": smaller drop", expected=-1,
                            unit="points of validation accuracy, per task"))
    return rows


def _plasticity_rows(corr: pd.DataFrame, source: str) -> list[dict]:
    rows = []
    for protocol, c in corr.groupby("protocol"):
        per_task = c.drop_duplicates("task").set_index("task")["spearman"]
        rows.append(mean_test(f"Spearman(plasticity, gain over head-only) over the five "
                              f"components, within a task [{protocol}]", per_task,
                              paper=source + ": positive", expected=1, unit="rho, per task"))
        mha = c[c["component"] == "MHA"]
        ranks = f"plasticity rank {mha['rank_x'].mean():.1f}, gain rank {mha['rank_y'].mean():.1f}"
        top = mha["rank_x"].mean() <= 1.5 and mha["rank_y"].mean() <= 1.5
        rows.append(descriptive(f"where MHA sits among the five [{protocol}] (1 = highest)", ranks,
                                paper="highest plasticity and highest gain (Fig. 2, Table 1)",
                                verdict="same as the paper (untested)" if top
                                else "differs from the paper (untested)",
                                n=mha["task"].nunique(), unit="mean over tasks"))
    return rows


def _grad_rows(grads: pd.DataFrame, source: str) -> list[dict]:
    rows = []
    for kind, expected, paper in (("total", 1, source),
                                  ("per parameter", math.nan, "not reported (objection 4)")):
        g = grads[grads["kind"] == kind].assign(log=lambda d: np.log10(d["grad_norm"]))
        rows.append(paired_test(f"MHA / LayerNorms, gradient norm on its own component "
                                f"({kind}), log10 ratio", g[g["config"] == "MHA"]
                                .set_index("task")["log"], _ln_mean(g, "log"), paper=paper,
                                expected=expected, unit="decades, per task"))
    return rows


def _budget_rows(main: pd.DataFrame, budget: pd.DataFrame) -> list[dict]:
    """Does the order hold at 4x the steps? Kendall's tau between each task's order of the
    configurations at 1x and at 4x (mean over tasks; "order held" when it is at least 0.7, a
    swap of at most 3 of the 21 pairs of 7 configurations), and MHA - LN1 at 4x."""
    from scipy import stats

    taus = []
    for task, b in budget[budget["task"] != "average"].groupby("task"):
        m = main[main["task"] == task].set_index("config")["test_acc_mean"]
        x = b.set_index("config")["test_acc_mean"]
        common = m.index.intersection(x.index)
        taus.append(stats.kendalltau(m[common], x[common]).statistic)
    tau = float(np.mean(taus)) if taus else math.nan
    acc4 = {c: _by_task(budget, c) for c in ("MHA", "LN1")}
    return [descriptive("order of the seven configurations at 4x vs 1x the steps (Kendall tau)",
                        tau, paper="not studied", n=len(taus), unit="tau, mean over tasks",
                        verdict="order held" if tau >= 0.7 else "order changed"),
            paired_test("MHA - LN1 at 4x the steps, test accuracy", acc4["MHA"], acc4["LN1"],
                        paper=_paper_diff("MHA", "LN1") + " at the paper's budget", expected=1,
                        unit=_TASKS)]


# -- Notebook 05: plasticity or parameter count? ---------------------------------------------

def _col(acc: pd.DataFrame, variant: str) -> pd.Series:
    """A variant's accuracy per task; empty when the study has no run of it yet."""
    return acc[variant] if variant in acc else pd.Series(dtype=float)


def _matched(acc: pd.DataFrame, a: str, b: str, counts: dict, claim: str) -> dict:
    """A paired test of variants ``a`` - ``b`` over tasks, stating the counts compared."""
    row = paired_test(claim, _col(acc, a), _col(acc, b), paper=_paper_diff(
        a.split()[0], b.split()[0]) + " at full counts", expected=1, unit=_TASKS)
    return {**row, "counts": f"{counts.get(a, math.nan):,} vs {counts.get(b, math.nan):,}"}


def confounds(acc: pd.DataFrame, counts: dict, layer_corr: pd.DataFrame,
              grads: pd.DataFrame, after: pd.DataFrame | None = None,
              rescale: pd.DataFrame | None = None) -> pd.DataFrame:
    """Notebook 05's findings table: the task is the unit; Holm over every tested row.

    Args:
        acc: ``confounds.accuracy`` of the confound study and its plain SGD baselines (tasks x
            variants, seed-mean test accuracy in %).
        counts: ``confounds.variant_counts_table`` (backbone entries per variant; plain
            configurations included).
        layer_corr: ``confounds.layer_correlations``.
        grads: ``results.grad_norms_by_task`` of the plain configurations (main study).
        after: ``confounds.plasticity_after`` of the best runs (None or empty: no row).
        rescale: ``confounds.rescale_pairs`` (None: no run-by-run rescale rows).
    """
    rows = [_matched(acc, "MHA sparse", "LN1", counts, "MHA - LN1 at LN1's count (sparse MHA)"),
            _matched(acc, "MHA sparse", "FC1 sparse", counts, "MHA - FC1 at LN1's count (sparse)"),
            _matched(acc, "FC1 sparse", "FC2 sparse", counts, "FC1 - FC2 at LN1's count (sparse)")]
    for kind in ("LoRA r1", "bias"):
        rows += [_matched(acc, f"{a} {kind}", f"{b} {kind}", counts, f"{a} - {b}, {kind} at one "
                          "count") for a, b in (("MHA", "FC1"), ("FC1", "FC2"))]
    count_effect = paired_test("MHA at its full count - MHA at LN1's count: what the count adds",
                               _col(acc, "MHA"), _col(acc, "MHA sparse"), paper="not studied",
                               expected=math.nan, unit=_TASKS)
    rows.append({**count_effect, "counts": f"{counts.get('MHA', 0):,} vs "
                 f"{counts.get('MHA sparse', 0):,}"})
    rows += _layer_rows(layer_corr, counts)
    rows.append(paired_test("MHA - LN1 under AdamW", _col(acc, "MHA (AdamW)"),
                            _col(acc, "LN1 (AdamW)"), paper=SOURCES["adamw"], expected=1,
                            unit=_TASKS))
    rows.append(paired_test("MHA - LN1 finetuned from the random init checkpoint",
                            _col(acc, "MHA (init)"), _col(acc, "LN1 (init)"),
                            paper="not studied (architecture vs pretraining)",
                            expected=math.nan, unit=_TASKS))
    rows += _rescale_rows(acc, rescale)
    rows += _grad_rows(grads, SOURCES["grad_norms"])
    if after is not None and len(after):
        own = after[after["variant"] == after["component"]]
        ratios = own.groupby("component")["ratio"].mean()
        rows.append(descriptive(
            "a component's own plasticity after / before finetuning it (best run per task)",
            ", ".join(f"{c} x{r:.2f}" for c, r in ratios.items()), paper="not studied",
            verdict="measured (untested)", n=own["task"].nunique(), unit="mean over tasks"))
    return table(rows)


def _layer_rows(corr: pd.DataFrame, counts: dict) -> list[dict]:
    """Spearman(plasticity, accuracy) over the blocks, within a component (its count per
    block stated): per component and averaged over components, the task as the unit."""
    rows = []
    for comp, c in corr.groupby("component"):
        row = mean_test(f"{comp} of one block: Spearman(plasticity before finetuning, test "
                        "accuracy) over the blocks", c.set_index("task")["spearman"],
                        paper=SOURCES["plasticity_gain"] + ": positive", expected=1,
                        unit="rho, per task")
        per_block = sorted({n for name, n in counts.items() if name.startswith(f"{comp} block ")})
        rows.append({**row, "counts": " vs ".join(f"{n:,}" for n in per_block) + " per block"})
    for column, what, paper in (("spearman", "plasticity", SOURCES["plasticity_gain"]
                                 + ": positive"), ("spearman_depth", "earlier block", None)):
        per_task = (corr.groupby("task")[column].mean() if column in corr
                    else pd.Series(dtype=float))
        rows.append(mean_test(f"one block at a time, mean over components: Spearman({what}, "
                              "test accuracy) over the blocks", per_task,
                              paper=paper or "not studied (depth, which plasticity may follow)",
                              expected=1 if paper else math.nan, unit="rho, per task"))
    return rows


def _rescale_rows(acc: pd.DataFrame, pairs: pd.DataFrame | None) -> list[dict]:
    """The gamma rescale (plasticity x c at one count) against the plain LayerNorm and against
    its lr/c^2 control (task level, with the recipe's clipping); then, run by run, whether the
    rescale and its control end identically, as derived without clipping (``pairs``:
    ``confounds.rescale_pairs``)."""
    rows = []
    for pres in [v for v in acc.columns if v.endswith("(preserved)")]:
        ln, c = pres.split()[0], pres.split()[2]
        rows.append(paired_test(f"{ln} x {c} (preserved) - plain {ln}: plasticity x {c}, same "
                                "count", acc[pres], _col(acc, ln), paper="not studied",
                                expected=math.nan, unit=_TASKS))
        rows.append(paired_test(f"{ln} x {c} (preserved) - its lr/c^2 control, gradient "
                                "clipping on", acc[pres], _col(acc, f"{ln} lr/c^2 (c={c})"),
                                paper="not studied", expected=math.nan, unit=_TASKS))
    for r in (pairs.itertuples() if pairs is not None else []):
        equal = r.identical == r.pairs
        if r.pairs == 0:
            verdict = "not resolved"
        elif r.clipping == "off":
            verdict = "identical, as derived" if equal else "differs: contradicts the derivation"
        else:
            verdict = "identical (the clip never bound)" if equal else "differs, as clipping allows"
        rows.append(descriptive(
            f"{r.variant} vs its lr/c^2 control, run by run (task, LR, seed), gradient clipping "
            f"{r.clipping}", f"{r.identical} of {r.pairs} pairs identical, the largest "
            f"difference {r.max_diff:.2f}", paper="not studied (derived here: identical "
            "without clipping)", verdict=verdict, n=r.pairs, unit="points"))
    return rows


# notebook 01 ---------------------------------------------------------------------------------

def _same(ok: bool) -> str:
    return "same as the paper (untested)" if ok else "differs from the paper (untested)"


def definitions(maps: pd.DataFrame, linear: pd.DataFrame, scale: pd.DataFrame,
                conv: pd.DataFrame, tol: float = 0.05) -> pd.DataFrame:
    """Notebook 01's findings table: exact checks of Definition 1 on hand-checkable functions
    (descriptive rows: these are computations, not samples of units).

    Args:
        maps: ``definitions.maps_1d_table``; linear: ``definitions.linear_table``;
        scale: ``definitions.scale_table`` (modules "LayerNorm" and "attention");
        conv: ``definitions.convergence`` of the model's rates.
        tol: relative tolerance of "close to" (LayerNorm's slope, the linear map's value).
    """
    ok = (maps["plasticity"] <= maps["max_rate"] + 1e-9) & (maps["max_rate"]
                                                            <= maps["lipschitz"] + 1e-6)
    crossing = [f for f, g in maps.groupby("function")
                if g["plasticity"].max() > 1 > g["plasticity"].min()]
    lin = dict(zip(linear["quantity"], linear["value"]))
    ratio = lin["plasticity (mean rate)"] / lin["sqrt(mean sigma^2)"]
    ln = scale[scale["module"] == "LayerNorm"]
    slope = float(np.polyfit(np.log(ln["scale"]), np.log(ln["plasticity"]), 1)[0])
    big = conv[conv["n_pairs"] == conv["n_pairs"].max()]
    rel = float((big["ci95"] / big["plasticity"]).max())
    return table([
        descriptive("plasticity <= largest observed rate <= Lipschitz constant, 1-D maps",
                    f"{int(ok.sum())}/{len(ok)}", paper="Definition 1: P(f) <= Lip(f)",
                    verdict=_same(bool(ok.all())), n=len(ok), unit="(map, scale) cases"),
        descriptive("1-D maps whose plasticity crosses 1 between pair scales",
                    ", ".join(crossing) or "none", paper="objection 1 (PAPER.md): P depends on "
                    "the pair distribution", verdict=_same(bool(crossing)),
                    n=maps["function"].nunique(), unit="(of the maps)"),
        descriptive("linear map: plasticity / sqrt(mean sigma_i^2)", float(ratio),
                    paper="about 1 for isotropic pairs (||W||_F / sqrt(d))",
                    verdict=_same(abs(ratio - 1) <= tol), n=1, unit="(ratio; one map)"),
        descriptive("LayerNorm: slope of log plasticity against log input scale", slope,
                    paper="Prop. 1: bound ||gamma||_inf / sigma, slope -1",
                    verdict=_same(abs(slope + 1) <= tol), n=len(ln), unit="(fit over scales)"),
        descriptive(f"largest 95% CI half-width relative to the estimate at "
                    f"{int(big['n_pairs'].max())} pairs", rel, paper="not reported",
                    verdict="precise (<= 5%)" if rel <= 0.05 else "imprecise (> 5%)",
                    n=len(big), unit="of the estimate, worst (layer, component)"),
    ])


# notebook 03 ---------------------------------------------------------------------------------

def _per_task(ranked: pd.DataFrame, component: str) -> pd.Series:
    return ranked[ranked["component"] == component].set_index("task")["plasticity"]


def _kendall_first_last(along: pd.DataFrame) -> tuple[float, int]:
    """Kendall's tau between each task's component order at the first and the last checkpoint
    (``along`` in measured order), mean over tasks; and the number of tasks."""
    from scipy import stats

    first, last = along["checkpoint"].iloc[0], along["checkpoint"].iloc[-1]
    taus = []
    for _, g in along.groupby("task"):
        a = g[g["checkpoint"] == first].set_index("component")["plasticity"]
        b = g[g["checkpoint"] == last].set_index("component")["plasticity"]
        common = a.index.intersection(b.index)
        taus.append(stats.kendalltau(a[common], b[common]).statistic)
    return (float(np.mean(taus)) if taus else math.nan), len(taus)


def plasticity_ranking(ranked: pd.DataFrame, along: pd.DataFrame | None = None,
                       mha_scale: pd.DataFrame | None = None) -> pd.DataFrame:
    """Notebook 03's findings table: the paper's plasticity order (Takeaway 2, Fig. 2) tested
    over tasks, per protocol. The unit is the task: a component's plasticity on a task is the
    mean over layers of per-layer means over pairs (``plasticity.ranking``).

    Args:
        ranked: ``plasticity.ranking`` of the final checkpoint (``task``, ``protocol``,
            ``component``, ``plasticity``).
        along: ``plasticity.ranking`` over the pretraining checkpoints, in measured order
            (None: no pretraining rows).
        mha_scale: ``plasticity.scale_curve`` (MHA on c times its input; None: no row).
    """
    from scipy import stats

    from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER

    fig2 = SOURCES["fig2"]
    rows = []
    for protocol, g in ranked.groupby("protocol"):
        for a, b in zip(PLASTICITY_ORDER, PLASTICITY_ORDER[1:]):
            rows.append(paired_test(
                f"{a} - {b}, plasticity [{protocol}]", _per_task(g, a), _per_task(g, b),
                paper=f"{FIG2_PLASTICITY[a] - FIG2_PLASTICITY[b]:+.2f}, {fig2}", expected=1,
                unit="plasticity, per task (layer-mean)"))
        rho = g.groupby("task").apply(lambda t: stats.spearmanr(
            t.set_index("component").loc[list(PLASTICITY_ORDER), "plasticity"],
            [FIG2_PLASTICITY[c] for c in PLASTICITY_ORDER]).statistic, include_groups=False)
        rows.append(mean_test(f"Spearman(measured plasticity, paper's Fig. 2) over the five "
                              f"components [{protocol}]", rho, paper=f"+1 (same order), {fig2}",
                              expected=1, unit="rho, per task"))
        means = g.groupby("component", observed=True)["plasticity"].mean()
        above = [c for c in PLASTICITY_ORDER if means.get(c, 0) > 1]
        paper_above = [c for c in PLASTICITY_ORDER if FIG2_PLASTICITY[c] > 1]
        rows.append(descriptive(f"components above 1 (mean over tasks) [{protocol}]",
                                ", ".join(above) or "none", paper=", ".join(paper_above),
                                verdict=_same(above == paper_above), n=g["task"].nunique(),
                                unit="(tasks)"))
    for protocol, g in ([] if along is None else along.groupby("protocol", sort=False)):
        tau, n = _kendall_first_last(g)
        rows.append(descriptive(
            f"order at {g['checkpoint'].iloc[0]} vs at {g['checkpoint'].iloc[-1]} (Kendall tau) "
            f"[{protocol}]", tau, paper="not studied (the paper measures the final model)",
            verdict="order held" if tau >= 0.7 else "order changed along pretraining", n=n,
            unit="tau, mean over tasks"))
    if mha_scale is not None:
        per = mha_scale.groupby("scale")["plasticity"].median()
        ratio = float(per.iloc[-1] / per.iloc[0])
        rows.append(descriptive(
            f"MHA plasticity at input scale {per.index[-1]:g} / at {per.index[0]:g} (median "
            "over layers)", ratio, paper="not studied (the embedding protocol feeds MHA the "
            "raw embedding)", verdict="scale-invariant" if abs(math.log(ratio)) < 0.1 else
            "depends on the input scale", n=mha_scale["layer"].nunique(),
            unit="ratio, median over layers"))
    return table(rows)


# notebook 06 ---------------------------------------------------------------------------------

def explorer(bounds_: pd.DataFrame, gamma: pd.DataFrame, tol: float = 1e-3) -> pd.DataFrame:
    """Notebook 06's findings table, from the explorers' views (descriptive rows: exact checks).

    Args:
        bounds_: ``widgets.bound_table`` (per layer and component: ``plasticity``,
            ``max_rate``, ``bound``).
        gamma: ``widgets.gamma_table`` (per scale ``c``: ``ratio``, ``bound_ratio``,
            ``diff_preserved``, ``diff_raw``).
        tol: relative tolerance of "proportional to c", and the largest logit difference that
            counts as "the same function".
    """
    held = bounds_["max_rate"] <= bounds_["bound"]
    loose = float((bounds_["bound"] / bounds_["plasticity"]).median())
    off = float(((gamma["ratio"] / gamma["c"]) - 1).abs().max())
    kept, raw = float(gamma["diff_preserved"].max()), float(gamma["diff_raw"].min())
    return table([
        descriptive("largest measured rate <= its bound (Props. 1-3)",
                    f"{int(held.sum())}/{len(held)}", paper="Props. 1-3: upper bounds",
                    verdict=_same(bool(held.all())), n=len(held), unit="(layer, component)"),
        descriptive("bound / plasticity, median over (layer, component)", loose,
                    paper="not reported", verdict="tight (< 2)" if loose < 2 else
                    "loose (>= 2)", n=len(bounds_), unit="ratio, median"),
        descriptive("LayerNorm gamma, beta times c: |plasticity ratio / c - 1|, largest over c",
                    off, paper="Prop. 1: plasticity proportional to gamma",
                    verdict=_same(off <= tol), n=len(gamma), unit="(relative, over scales c)"),
        descriptive("largest |logit difference|: function-preserving rescale (smallest for the "
                    "raw one beside it)", f"{kept:.2g} (raw: {raw:.2g})",
                    paper="objections 3-4: the same function, another plasticity",
                    verdict=_same(kept <= tol < raw), n=len(gamma), unit="(logits, over scales c)"),
    ])


# notebook 02
#: Takeaway 1's order of the bounds, "~" as groups: MHA > FC1 ~ FC2 > LN2 ~ LN1.
TAKEAWAY1 = (("MHA",), ("FC1", "FC2"), ("LN2", "LN1"))
#: Prop. 1 assumes tokens share sigma: read as holding while the per-token cv is below this.
SHARED_SIGMA_CV = 0.05
_PROPS = {"P1": ("Prop. 1", ["LN1", "LN2"], "bound", "Lip(LN) <= ||gamma||_inf / sigma"),
          "P2": ("Prop. 2", ["FC1", "FC2"], "bound", "Lip(W) <= ||W||_2"),
          "P3": ("Prop. 3", ["MHA"], "bound", "Lip(MHA) <= sum_h ... sqrt(3n + (12n+3) r^4 ...)"),
          "P4": ("Prop. 4", ["MHA"], "bound_p4", "the tighter MHA bound, sqrt(n) + alpha^2 E ..")}


def _holds(bound: pd.Series, lipschitz_lower: pd.Series) -> str:
    from vitplast.intervals import holds  # the one definition of a bound holding

    bad = int((~holds(bound, lipschitz_lower)).sum())
    return f"holds in all {len(bound)} cases" if bad == 0 else \
        f"violated in {bad} of {len(bound)} cases"


def _in_takeaway1_order(order: list[str]) -> bool:
    rank = {c: i for i, group in enumerate(TAKEAWAY1) for c in group}
    return all(rank[a] <= rank[b] for a, b in zip(order, order[1:]))


def bounds(df: pd.DataFrame, checks: pd.DataFrame) -> pd.DataFrame:
    """Notebook 02's findings table: do Props. 1-4 bracket the Lipschitz constant, and does the
    order of the bounds give the order of plasticity? Every row is descriptive (the layers of one
    model are not independent units), its verdict computed from the numbers.

    Args:
        df: ``intervals.intervals`` of one model, task and protocol.
        checks: ``intervals.random_checks``.
    """
    from vitplast.intervals import compare_rankings

    ratio = checks["bound"] / checks["lipschitz_lower"]
    rows = [descriptive("every bound >= the lower end of Lip(f), on random weights where its "
                        "assumption holds exactly", float(ratio.min()), paper="Props. 1-4",
                        verdict=_holds(checks["bound"], checks["lipschitz_lower"]),
                        n=len(checks),
                        unit="x, min of bound / lower end over seed x proposition cases")]
    for name, comps, col, statement in _PROPS.values():
        g = df[df["component"].isin(comps)]
        ratio = g[col] / g["lipschitz_lower"]
        rows.append(descriptive(f"{name} >= the lower end of Lip(f) on the model "
                                f"({' and '.join(comps)})", float(ratio.min()),
                                paper=f"{name}: {statement}",
                                verdict=_holds(g[col], g["lipschitz_lower"]), n=len(g),
                                unit="x, min of bound / lower end over (component, layer) cases"))
    rows += _plugin_rows(df)
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
            verdict="same as the paper (untested)" if _in_takeaway1_order(order)
            else "differs from the paper (untested)", n=len(cmp),
            unit="(order of layer means), over components"))
    return table(rows)


def _plugin_rows(df: pd.DataFrame) -> list[dict]:
    """The paper's plug-in statistics, Prop. 4 vs Prop. 3, Prop. 1's assumption, widths."""
    plug = df[df["component"].isin(["LN1", "LN2", "MHA"])]
    ratio = plug["plugin"] / plug["max_rate"]
    mha, ln = df[df["component"] == "MHA"], df[df["component"].isin(["LN1", "LN2"])]
    p4 = mha["bound_p4"] / mha["bound"]
    cv = ln["sigma_cv"]
    width = df.groupby("component", observed=True)["width"].median()
    narrow = [c for c, w in width.items() if w <= 2]
    return [
        descriptive("the paper's plug-in values (LN at the mean sigma, MHA at the RMS radius) "
                    ">= the largest observed rate", float(ratio.min()),
                    paper=f"Prop. 3 at r = RMS token norm ({VITB_RMS_TOKEN_NORM} on ViT-B)",
                    verdict="above every observed rate" if (ratio >= 1).all() else
                    f"below an observed rate in {int((ratio < 1).sum())} of {len(ratio)} cases: "
                    "not a bound", n=len(ratio),
                    unit="x, min of plug-in / largest rate over (component, layer) cases"),
        descriptive("Prop. 4 below Prop. 3 for MHA", float(p4.median()),
                    paper="Prop. 4: the tighter MHA bound",
                    verdict="Prop. 4 smaller in every layer" if (p4 < 1).all() else
                    f"Prop. 4 larger in {int((p4 >= 1).sum())} of {len(p4)} layers",
                    n=len(p4), unit="x, median of Prop. 4 / Prop. 3 over MHA layers"),
        descriptive("tokens of a LayerNorm's input share sigma",
                    float(cv.median()), paper="Prop. 1 assumes tokens share sigma",
                    verdict=f"assumption holds (cv < {SHARED_SIGMA_CV} in every layer)"
                    if (cv < SHARED_SIGMA_CV).all() else f"assumption fails (cv >= "
                    f"{SHARED_SIGMA_CV} in {int((cv >= SHARED_SIGMA_CV).sum())} of {len(cv)})",
                    n=len(cv), unit="median per-token cv of sigma (0 = shared) over LN layers"),
        descriptive("width of the interval around Lip(f), upper / lower end",
                    ", ".join(f"{c} {w:.3g}" for c, w in width.items()),
                    paper="not reported (objection 2)",
                    verdict=f"Lip(f) known within 2x for: {', '.join(narrow) or 'none'}",
                    n=len(df), unit="(x, median per component) over (component, layer) cases")]
