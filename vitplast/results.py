"""Finetuning results: the tables and tests behind Takeaway 3, read from the results store.

Paper: section 5, the main table (best LR per configuration, mean +- std over 3 seeds),
robustness across learning rates (Fig. 18), training dynamics (Fig. 4). Beyond the paper:
paired tests between configurations, and the link between a component's measured
plasticity and its finetuning gain.

The best LR is chosen on validation accuracy; ``on="test"`` reproduces the public code's
choice on test accuracy and is labelled as such (``selected_on``).

Used by notebooks 04-06.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from vitplast import store
from vitplast.runs import run_hash

_OUTCOME = ("status", "error", "test_acc", "test_loss", "best_val_acc", "best_step", "trainable",
            "seconds", "train_seconds", "device", "machine", "vitplast", "torch", "timm",
            "python", "git_commit", "git_dirty", "date")


def _flat(config: dict, prefix: str = "") -> dict:
    """Nested dicts become ``a.b`` columns; lists become their JSON text (hashable)."""
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = json.dumps(v) if isinstance(v, list) else v
    return out


#: Settings every run has (``sweep.run_config``): the columns of a table, even an empty one.
_SETTINGS = ("kind", "model", "checkpoint", "pretrained", "task", "config", "optimizer", "lr",
             "seed", "steps", "batch_size")


def runs_table(records: list[dict]) -> pd.DataFrame:
    """Records (``sweep.run_one`` with their config) as the table ``results`` documents."""
    rows = [{"run": run_hash(r["config"]), **_flat(r["config"]),
             **{k: r.get(k) for k in _OUTCOME}} for r in records]
    settings = dict.fromkeys(["run", *_SETTINGS,
                              *(k for row in rows for k in row if k not in _OUTCOME)])
    df = pd.DataFrame(rows, columns=[*settings, *_OUTCOME])
    for k in ("test_acc", "test_loss", "best_val_acc", "seconds", "train_seconds"):
        df[k] = pd.to_numeric(df[k]).astype(float)
    return df


def _records(roots) -> list[dict]:
    """Stored runs of one or more results folders, each run once."""
    return list({run_hash(r["config"]): r
                 for root in roots for r in store.load_runs(root)}.values())


def results(*roots: str | Path) -> pd.DataFrame:
    """One row per stored run of one or more results folders (half-written or unreadable
    files are not runs).

    Columns: ``run`` (``runs.run_hash`` of its config); every config key (``run_config``:
    kind, model, checkpoint, pretrained, task, ..., config, lr, seed, steps, optimizer, ...;
    nested dicts as ``key.sub``, lists as JSON text); ``status`` ("ok", "diverged",
    "failed"); ``error``; ``test_acc``, ``best_val_acc`` (in [0, 1]; NaN unless ok) and
    ``test_loss``; ``best_step`` (step of the kept weights); ``trainable`` (parameters
    trained); ``seconds`` (whole run), ``train_seconds``; ``device``; provenance
    (``machine``, ``vitplast``, ``torch``, ``timm``, ``python``, ``git_commit``,
    ``git_dirty``, ``date``).
    """
    return runs_table(_records(roots))


def history(*roots: str | Path, metrics: list[str] | None = None) -> pd.DataFrame:
    """Every stored run's logged curves, one row per run x step x metric.

    Columns: ``run`` (join ``results`` on it), ``step``, ``metric`` (``loss``, ``lr``,
    ``grad_norm``, ``grad_norm/<group>``, ``grad_norm_per_param/<group>``, ``val_loss``,
    ``val_acc``: see ``vitplast.finetune``), ``value`` (NaN where not finite).

    Args:
        metrics: keep only these metrics (default: all).
    """
    rows = [(run_hash(r["config"]), h["step"], k, v)
            for r in _records(roots) for h in r.get("history") or []
            for k, v in h.items() if k != "step" and (metrics is None or k in metrics)]
    df = pd.DataFrame(rows, columns=["run", "step", "metric", "value"])
    return df.astype({"value": float})


def _select(df: pd.DataFrame, on: str):
    """(setting columns, ``df`` with a ``_setting`` id, per id the chosen ``lr`` and score)."""
    if on not in ("val", "test"):
        raise ValueError(f"on must be 'val' or 'test', got {on!r}")
    keys = [c for c in df.columns if c not in (*_OUTCOME, "run", "lr", "seed")]
    df = df.assign(_setting=df.groupby(keys, dropna=False).ngroup())  # NaN keys are a value
    scores = (df[df["status"] == "ok"].groupby(["_setting", "lr"])
              ["best_val_acc" if on == "val" else "test_acc"]
              .agg(selection_score="mean", n_seeds="count").reset_index())  # by lr: ties -> min
    best = scores.sort_values("selection_score", ascending=False, kind="stable")
    return keys, df, best.drop_duplicates("_setting")


def select_lr(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per setting (all config columns but lr and seed: task, config, optimizer...), the LR
    with the best seed-mean accuracy; ties go to the smaller LR.

    Diverged and failed runs are missing (the mean is over the seeds left, ``n_seeds``),
    never zeros.

    Args:
        df: ``results``, or a table with setting columns, ``lr``, ``seed``, ``status``,
            ``best_val_acc`` and ``test_acc``.
        on: ``"val"`` (``best_val_acc``) or ``"test"``: the public code's optimistic choice on
            test accuracy, kept to reproduce its numbers.

    Returns:
        One row per setting: its columns, ``lr``, ``selection_score`` (the seed-mean
        accuracy it was chosen on), ``n_seeds`` and ``selected_on`` (``on``).
    """
    keys, df, best = _select(df, on)
    out = df.drop_duplicates("_setting")[["_setting", *keys]].merge(best, on="_setting")
    return out.sort_values("_setting").drop(columns="_setting").assign(
        selected_on=on).reset_index(drop=True)


def main_table(df: pd.DataFrame, on: str = "val", ddof: int = 0) -> pd.DataFrame:
    """The paper's main table: per task x configuration, test accuracy at the selected LR.

    Args:
        df: ``results``.
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
    stats = chosen.groupby("_setting")["test_acc"].agg(
        test_acc_mean=lambda s: 100 * s.mean(), test_acc_std=lambda s: 100 * s.std(ddof=ddof),
        n_seeds="count")
    table = (df.drop_duplicates("_setting")[["_setting", *keys]]
             .merge(best[["_setting", "lr"]], on="_setting", how="left")
             .merge(stats, on="_setting", how="left").sort_values("_setting"))
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
    return out.drop(columns=["_setting", "_rest"])[[*keys, "lr", "test_acc_mean", "test_acc_std",
                                                    "n_seeds", "selected_on", "lr_at_edge"]]


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


def lr_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Per task x config x lr: seed-mean and std of test and validation accuracy (in %),
    over runs with status "ok" (``n_seeds``). The Fig. 18 analogue."""
    ok = df[df["status"] == "ok"]
    g = ok.groupby(["task", "config", "lr"])
    out = g.agg(test_mean=("test_acc", "mean"), test_std=("test_acc", "std"),
                val_mean=("best_val_acc", "mean"), n_seeds=("seed", "count")).reset_index()
    out[["test_mean", "test_std", "val_mean"]] *= 100
    return out


def lr_robustness(curves: pd.DataFrame, lrs=None) -> pd.DataFrame:
    """Per config: how much test accuracy depends on the LR, averaged over tasks.

    Columns: ``config``, ``spread`` (max - min over the grid of the seed-mean test accuracy,
    in points), ``drop_from_best`` (best minus the mean over the grid), ``n_tasks``.

    Args:
        lrs: measure over these LRs only (e.g. the grid every configuration ran, so that the
            extra LRs of some do not widen their spread); default: every LR in ``curves``.
    """
    if lrs is not None:
        curves = curves[curves["lr"].isin(lrs)]
    per_task = curves.groupby(["task", "config"])["test_mean"].agg(
        spread=lambda s: s.max() - s.min(), drop_from_best=lambda s: s.max() - s.mean())
    out = per_task.groupby("config").agg(spread=("spread", "mean"),
                                         drop_from_best=("drop_from_best", "mean"),
                                         n_tasks=("spread", "count"))
    return out.sort_values("spread").reset_index()


def selected_runs(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """The runs (all seeds, status ok) at each setting's selected LR (``select_lr``)."""
    _, df, best = _select(df, on)
    chosen = df[df["status"] == "ok"].merge(best[["_setting", "lr"]], on=["_setting", "lr"])
    return chosen.drop(columns="_setting")


def dynamics(df: pd.DataFrame, curves: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Training curves of the runs at each setting's selected LR (the Fig. 4 analogue).

    Args:
        df: ``results`` (a ``variant`` column, as ``confounds.with_variant`` adds, is kept);
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

    ``by``: the column naming what is compared (``"variant"`` for ``confounds.with_variant``
    results). Columns: ``by``, ``n_pairs``, ``mean_diff_pp`` (reference minus it, in points),
    ``ci95_pp`` (half-width of its 95% t interval), ``t_stat``, ``t_p``, ``wilcoxon_p``
    (two-sided; NaN with fewer than 2 pairs or no difference at all).
    """
    from scipy import stats

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


def correlation(table: pd.DataFrame, x: str = "plasticity", y: str = "gain_pp",
                by: str = "protocol") -> pd.DataFrame:
    """Spearman correlation of ``x`` and ``y`` per ``by`` group (all tasks pooled), with
    its p-value and the number of points."""
    from scipy import stats

    rows = []
    for key, g in table.dropna(subset=[x, y]).groupby(by):
        r = stats.spearmanr(g[x], g[y]) if len(g) > 2 else None
        rows.append({by: key, "spearman": r.statistic if r else np.nan,
                     "p": r.pvalue if r else np.nan, "n": len(g)})
    return pd.DataFrame(rows)


def component_grad_norms(dyn: pd.DataFrame) -> pd.DataFrame:
    """From ``dynamics``: each configuration's gradient norm on its own component, total and
    per trainable parameter (norm / sqrt(#trainable)), one row per run x step x ``kind``."""
    own = dyn[dyn["metric"].str.split("/").str[-1] == dyn["component"]]
    kind = np.where(own["metric"].str.startswith("grad_norm_per_param/"), "per parameter", "total")
    return own.assign(kind=kind)


def expected_status(df: pd.DataFrame, expected: list[dict]) -> pd.Series:
    """The status of each expected run in ``results`` table ``df``: "ok", "diverged",
    "failed", or "missing" where the store lacks it."""
    status = dict(zip(df["run"], df["status"])) if len(df) else {}
    return pd.Series([status.get(run_hash(c), "missing") for c in expected],
                     dtype=object)


def coverage(df: pd.DataFrame, expected: list[dict]) -> dict:
    """How much of a grid the store holds: counts of expected runs by status."""
    return {"expected": len(expected), **expected_status(df, expected).value_counts().to_dict()}


def what_this_shows(main: pd.DataFrame, tests: pd.DataFrame, robustness: pd.DataFrame,
                    corr: pd.DataFrame, cover: dict) -> str:
    """Notebook 04's conclusions, computed from its tables."""
    avg = main[main["task"] == "average"].set_index("config")["test_acc_mean"]
    lines = [f"Runs: {cover}."]
    if avg.notna().any():
        order = " > ".join(f"{c} ({v:.2f})" for c, v in avg.dropna().sort_values(
            ascending=False).items())
        lines.append(f"Average test accuracy at the LR chosen on {main['selected_on'].iloc[0]}: "
                     f"{order}.")
        comps = [c for c in ("MHA", "FC1", "FC2", "LN2", "LN1") if c in avg and avg.notna()[c]]
        ranked = " > ".join(sorted(comps, key=lambda c: -avg[c]))
        verdict = "matches" if ranked == " > ".join(comps) else "differs from"
        if len(comps) > 1:
            lines.append(f"Component order {ranked} {verdict} the paper's MHA > FC1 > FC2 > LN2 > "
                         f"LN1{'' if len(comps) == 5 else ' (on the components it has)'}.")
        else:
            lines.append("Too few components have an average over every task: no order yet.")
    else:
        lines.append("No task has results for every configuration yet: no average row.")
    chosen = main[(main["task"] != "average") & main["lr"].notna()]
    edge = chosen[chosen["lr_at_edge"].astype(bool)]
    if len(chosen):
        lines.append(f"Chosen LR inside the grid for {len(chosen) - len(edge)} of {len(chosen)} "
                     "(task, configuration)" + (": at its edge, where a better LR may lie "
                     "outside, " + ", ".join(f"{r.config} on {r.task} ({r.lr:g})"
                                             for r in edge.itertuples()) if len(edge) else "")
                     + ".")
    for r in tests.itertuples():
        lines.append(f"MHA - {r.config}: {r.mean_diff_pp:+.2f} +- {r.ci95_pp:.2f} points (95% "
                     f"CI) over {r.n_pairs} (task, seed) pairs; paired t p = {r.t_p:.3g}, "
                     f"Wilcoxon p = {r.wilcoxon_p:.3g}.")
    if len(robustness):
        lines.append("Least LR-sensitive first (mean spread over the grid, points): " + ", ".join(
            f"{r.config} {r.spread:.1f}" for r in robustness.itertuples()) + ".")
        spread = robustness.set_index("config")["spread"]
        lns = [c for c in ("LN1", "LN2") if c in spread]
        if "MHA" in spread and lns:
            stabler = all(spread["MHA"] < spread[c] for c in lns)
            lines.append(f"MHA is {'less' if stabler else 'not less'} LR-sensitive than "
                         f"{' and '.join(lns)}: {'agrees' if stabler else 'disagrees'} with the "
                         "paper's claim that high-plasticity components are more stable.")
    for r in corr.itertuples():
        link = ("a significant positive link, as the paper suggests"
                if r.spearman > 0 and r.p < 0.05 else
                "no significant positive link: the paper's plasticity-gain story is not seen here")
        lines.append(f"[{r.protocol}] Spearman(plasticity, gain over head-only) = "
                     f"{r.spearman:+.2f} (p = {r.p:.3g}, n = {r.n}): {link}.")
    return "\n".join(lines)
