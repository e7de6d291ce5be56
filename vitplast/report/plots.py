"""Figures as pure functions: a tidy DataFrame in, a matplotlib Figure out.

Nothing here computes results or holds numbers: callers pass the tables the kit measured. The
look is ``vitplast.report.plot_style``'s: every figure drawn inside its ``theme()`` (no global
style set on import), axes named in words (``LABELS``), plain log ticks (``log_axis``), one
colour per configuration in every notebook (``PALETTE``; a variant such as "MHA sparse" takes
its component's, dashed: ``style``; a per-component figure draws the rows of ``components``,
default ``components.TABLE``, in their colours), figures saved with ``save``. The explorers of
``vitplast.report.widgets`` redraw ``rate_histogram``, ``layernorm_rescale`` and ``run_curves``.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullFormatter

from vitplast.measure.components import TABLE
from vitplast.report.plot_style import (
    OTHERS,
    PALETTE,
    _config_rank,
    _grid,
    _label,
    _themed,
    colours,
    component_palette,
    legend_beside,
    log_axis,
    robust_ylim,
    style,
)
from vitplast.stats.verdicts import ALPHA


@_themed
def plasticity_box(summary, col: str | None = "protocol", hue: str | None = None,
                   components=TABLE):
    """Fig. 2 analogue: per component, a box over layers of per-layer plasticity.

    Args:
        summary: ``vitplast.measure.plasticity.summarize`` output (one row per layer x component),
            or ``vitplast.measure.empirical.pooled_layers``.
        col: a column to split into panels (e.g. protocol), or None.
        hue: a column to colour by (e.g. task or checkpoint), or None.
    """
    fig, axes, cols = _grid(summary, col, sharey=False)
    names, palette = [c.name for c in components], component_palette(components)
    for ax, value in zip(axes, cols):
        sub = summary if value is None else summary[summary[col] == value]
        colour = (dict(hue=hue, palette=colours(summary[hue])) if hue else dict(
            hue="component", hue_order=names, palette=palette, dodge=False, legend=False))
        sns.boxplot(sub, x="component", y="plasticity", order=names, ax=ax, **colour)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set(title=f"{col} = {value}" if value is not None else "", xlabel=_label("component"),
               ylabel="plasticity per layer (mean rate)")
    fig.tight_layout()
    return fig


@_themed
def plasticity_by_layer(summary, col: str | None = "protocol", components=TABLE):
    """Fig. 3 analogue: per-layer plasticity curves per component, with 95% CI bands."""
    fig, axes, cols = _grid(summary, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = summary if value is None else summary[summary[col] == value]
        for c in components:
            g = sub[sub["component"] == c.name].groupby("layer")[["plasticity", "ci95"]].mean()
            line, = ax.plot(g.index, g["plasticity"], marker="o", label=c.name, color=c.colour)
            ax.fill_between(g.index, g["plasticity"] - g["ci95"], g["plasticity"] + g["ci95"],
                            color=line.get_color(), alpha=0.2)
        ax.set(xlabel=_label("layer"), ylabel=_label("plasticity"),
               title=f"{col} = {value}" if value is not None else "")
        log_axis(ax)
    legend_beside(fig, axes[-1], "component")
    return fig


@_themed
def rate_distributions(df, col: str | None = "protocol", components=TABLE):
    """Per-pair rate distributions per component (all layers pooled), log scale."""
    fig, axes, cols = _grid(df, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        names = [c.name for c in components]
        sns.violinplot(sub, x="component", y="rate", order=names, hue="component", ax=ax,
                       hue_order=names, palette=component_palette(components), legend=False,
                       log_scale=True, cut=0, linewidth=0.6, dodge=False)
        ax.set(title=f"{col} = {value}" if value is not None else "", xlabel=_label("component"),
               ylabel=_label("rate"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    return fig


@_themed
def lines(df, x: str, y: str, hue: str, col: str | None = None, logx: bool = False,
          logy: bool = False, band: str | None = None, title: str = "",
          xlabel: str | None = None, ylabel=None, robust: bool = False):
    """Line plot of ``y`` against ``x`` per ``hue`` (optionally ``band`` = +- column), one panel
    per ``col`` value; ``xlabel``/``ylabel`` name the axes in words (default: ``LABELS``, else
    the column name when it is words); ``ylabel`` may map each ``col`` value to its panel's own
    label (panels of different quantities). ``robust``: y limits from the 2-98% quantiles
    (``robust_ylim``).
    """
    fig, axes, cols = _grid(df, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        shown = []
        groups = sorted(sub.groupby(hue, observed=True, sort=False), key=_config_rank)
        colour = colours(key for key, _ in groups)
        for key, g in groups:
            g = g.groupby(x)[[y] + ([band] if band else [])].mean().reset_index()
            line, = ax.plot(g[x], g[y], marker="o", label=str(key),
                            **dict(style(key), color=colour[key]))
            shown.append(g[y])
            if band:
                ax.fill_between(g[x], g[y] - g[band], g[y] + g[band], alpha=0.2,
                                color=line.get_color())
        if logx:
            log_axis(ax, "x", sub[x].unique())
        if robust and shown:
            robust_ylim(ax, np.concatenate(shown), log=logy)
        if logy:
            log_axis(ax, "y")
        ax.set(xlabel=_label(x, xlabel), ylabel=_label(y, ylabel, value),
               title=f"{title}{value}" if value is not None else title)
    if len(df):
        legend_beside(fig, axes[-1], hue)
    else:
        axes[0].text(0.5, 0.5, "no data yet", ha="center", va="center",
                     transform=axes[0].transAxes)
        fig.tight_layout()
    return fig


@_themed
def scatter(df, x: str, y: str, hue: str, logx: bool = False, title: str = "",
            col: str | None = None, xlabel: str | None = None, ylabel: str | None = None):
    """Scatter of ``y`` against ``x`` coloured by ``hue``, one panel per ``col`` value."""
    fig, axes, cols = _grid(df, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        order = sorted(df[hue].unique(), key=lambda v: _config_rank((v, None)))
        sns.scatterplot(sub, x=x, y=y, hue=hue, ax=ax, legend=ax is axes[-1], s=60,
                        hue_order=order, palette=colours(order))
        if logx:
            log_axis(ax, "x")
        ax.axhline(0, color="k", lw=0.8, ls="--")
        ax.set(title=f"{title}{value}" if value is not None else title, xlabel=_label(x, xlabel),
               ylabel=_label(y, ylabel))
    if axes[-1].get_legend() is not None:
        legend_beside(fig, axes[-1], hue)
    else:
        fig.tight_layout()
    return fig


@_themed
def differences(df, label: str, diff: str = "diff_pp", ci: str = "ci95_pp",
                significant: str | None = None, title: str = "", xlabel: str | None = None,
                descriptive: str | None = None, alpha: float | None = None):
    """A forest plot: per row of ``df``, ``diff`` with a +-``ci`` bar, against zero.

    ``significant`` (a boolean column) draws the rows it marks filled, the others hollow;
    ``descriptive`` (a boolean column) draws its rows as grey diamonds (no test);
    ``xlabel`` names the difference in words (default: "difference, with its 95% CI").
    With ``significant``, a legend below says what fill, diamond and bar mean (``alpha``: the
    Holm level).
    """
    labels = [textwrap.fill(str(v), 48) for v in df[label]]  # rows as tall as the longest label
    row = max(0.55, 0.19 * max((t.count("\n") + 1 for t in labels), default=1) + 0.12)
    fig, ax = plt.subplots(figsize=(9, row * len(df) + (1.8 if significant else 1.2)))
    y = range(len(df))[::-1]  # first row on top
    filled = df[significant].astype(bool) if significant else [True] * len(df)
    plain = df[descriptive].astype(bool) if descriptive else [False] * len(df)
    for yi, (_, r), full, desc in zip(y, df.iterrows(), filled, plain):
        color = "0.55" if desc else "C0"
        ax.errorbar(r[diff], yi, xerr=r[ci] if np.isfinite(r[ci]) else None,
                    fmt="D" if desc else "o", color=color, capsize=3,
                    markerfacecolor=color if full or desc else "white")
    ax.axvline(0, color="k", lw=0.8, ls="--")
    ax.set(yticks=list(y), yticklabels=labels, title=title,
           xlabel=xlabel or "difference, with its 95% CI")
    _forest_key(fig, alpha, descriptive is not None and any(plain)) if significant else None
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight() if significant else 0, 1, 1))
    return fig


def _forest_key(fig, alpha: float | None, with_diamond: bool) -> None:
    """The forest plot's legend, below it: what fill, a grey diamond and the bar mean."""
    keys = [("o", "C0", "C0", "-", "filled: significant after Holm within its family"
             + (f" (Holm p < {alpha:g})" if alpha is not None else "")),
            ("o", "C0", "white", "-", "hollow: not significant after Holm"),
            ("|", "C0", "C0", "-", "bar: the 95% confidence interval"),
            ("D", "0.55", "0.55", "", "grey diamond: descriptive, no test (fewer than 3 tasks)")]
    fig.legend(handles=[Line2D([], [], marker=m, color=c, markerfacecolor=f, ls=ls, label=t)
                        for m, c, f, ls, t in keys[:4 if with_diamond else 3]],
               loc="lower center", ncol=2, fontsize=8, frameon=False)


@_themed
def intervals(df, components=TABLE):
    """Per component, along depth on a log scale: the interval around the Lipschitz constant
    (shaded, from ``lipschitz_lower`` to ``lipschitz_upper``), the bounds it comes from, the
    paper's plug-in value, and plasticity (the mean rate, below the interval).

    Paper: Props. 1-4 next to the measured plasticity; ``df`` from ``intervals.intervals``.
    """
    comps = [c.name for c in components if c.name in set(df["component"])]
    fig, axes = plt.subplots(1, len(comps), figsize=(2.8 * len(comps), 3.6), sharey=True,
                             squeeze=False)
    for ax, comp in zip(axes[0], comps):
        g = df[df["component"] == comp].sort_values("layer")
        ax.fill_between(g["layer"], g["lipschitz_lower"], g["lipschitz_upper"], color="C1",
                        alpha=0.25, label="Lip(f) lies in here")
        for col, fmt, color, label in (
                ("lipschitz_lower", "^-", "C0", "lower end (largest rate / Jacobian)"),
                ("bound", "v-", "C1", "bound (Prop. 1, 2 or 3)"),
                ("bound_p4", "s-.", "C2", "bound (Prop. 4)"),
                ("plugin", "x:", "C4", "paper's plug-in (not a bound)"),
                ("plasticity", "o--", "C3", "plasticity (mean rate)")):
            if g[col].notna().any():
                ax.plot(g["layer"], g[col], fmt, color=color, label=label, ms=4)
        ax.set(title=comp, xlabel="layer (block index)", yscale="log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("rate ||f(x)-f(y)|| / ||x-y||\n(no unit, log scale)")
    labels = {lab: h for ax in axes[0] for h, lab in zip(*ax.get_legend_handles_labels())}
    fig.legend(labels.values(), labels.keys(), loc="lower center", ncol=3, fontsize=9)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig


@_themed
def findings(table, unit: str | None = None, title: str = "", xlabel: str | None = None,
             alpha: float | None = None):
    """A forest plot of the findings rows (``verdicts.table``) measured in ``unit`` (default:
    the unit of most tested rows), primaries first: each mean with its 95% CI, filled
    where the table's own Holm-corrected p (within its family) is below ``alpha`` (default
    ``verdicts.ALPHA``), hollow where not, a grey diamond where the row is descriptive (n < 3:
    no test); the legend below says so. Each label names the row's family and n.
    """
    alpha = ALPHA if alpha is None else alpha
    shown = table[pd.to_numeric(table["measured"], errors="coerce").notna()
                  & ((table["test"] != "none") | (table["family"] != "descriptive"))]
    tested = shown[shown["family"] != "descriptive"]
    units = (tested if len(tested) else shown)["unit"].value_counts()
    unit = unit or (units.index[0] if len(units) else "")
    rows = shown[shown["unit"] == unit].reset_index(drop=True)
    if not len(rows):
        return message("no findings row with a number to plot yet")
    rows = rows.assign(significant=rows["p_holm"] < alpha, descriptive=rows["family"] ==
                       "descriptive", measured=rows["measured"].astype(float),
                       label=[f"[{f}] {c} (n\u00a0=\u00a0{n})" for f, c, n in
                              zip(rows["family"], rows["claim"], rows["n"])])
    return differences(rows, label="label", diff="measured", ci="ci95", significant="significant",
                       descriptive="descriptive", title=title, alpha=alpha,
                       xlabel=xlabel or f"difference, with its 95% CI ({unit})")


@_themed
def paired_bars(df, x: str, y: str, hue: str, col: str | None = None, ylabel: str | None = None,
                title: str = "", xlabel: str | None = None, from_zero: bool = True):
    """Bars of ``y`` per ``x`` and ``hue`` (colours: ``colours``), a panel per ``col`` value,
    from zero (length = value) or (``from_zero=False``) spanning its values: a 1-point gap shows."""
    fig, axes, cols = _grid(df, col, aspect=1.5, sharey=False)  # each panel its own range
    if not len(df):
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
        return fig
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        order = sorted(sub[x].unique(), key=lambda v: _config_rank((v, None)))
        hues = list(dict.fromkeys(df[hue]))
        sns.barplot(sub, x=x, y=y, hue=hue, ax=ax, legend=ax is axes[-1], order=order,
                    hue_order=hues, palette=colours(hues))
        ax.set(ylabel=_label(y, ylabel), xlabel=_label(x, xlabel),
               title=f"{title}{value}" if value is not None else title)
        if not from_zero:  # a margin of 15% of the range, at least 0.5
            ax.set_ylim(sub[y].min() - (m := max(0.5, 0.15 * np.ptp(sub[y]))), sub[y].max() + m)
    if axes[-1].get_legend() is not None:
        legend_beside(fig, axes[-1], hue)
    else:
        fig.tight_layout()
    return fig


# -- Explorers (notebook 06): the figures the widgets redraw ---------------------------------
def message(text: str):
    """A figure holding only ``text`` (an explorer's view with nothing to plot)."""
    fig, ax = plt.subplots(figsize=(7, 0.5))
    ax.axis("off")
    ax.text(0, 0.5, text, va="center", fontsize=9)
    return fig


@_themed
def rate_histogram(rates, bound: float, bound_name: str, title: str = "",
                   component: str | None = None):
    """Per-pair rates of one component (log bins, its colour), their mean (the plasticity) and
    the bound of ``bound_name`` (e.g. "Prop. 1"). Paper: Definition 1, Props. 1-3."""
    r = np.asarray(rates, dtype=float)
    p = float(r.mean())
    fig, ax = plt.subplots(figsize=(6.5, 3))
    lo = r[r > 0].min() if (r > 0).any() else 1e-6
    ax.hist(r, bins=np.geomspace(lo, max(r.max(), bound) * 1.05, 50), alpha=0.8,
            color=PALETTE.get(component, OTHERS[0]))
    ax.axvline(p, color="k", label=f"plasticity {p:.3g}")
    ax.axvline(bound, color=OTHERS[2], ls="--", label=f"bound ({bound_name}) {bound:.3g}")
    ax.set(xlabel=_label("rate"), ylabel="number of pairs", title=title)
    log_axis(ax, "x")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside, not on, the bars
    fig.tight_layout()
    return fig


@_themed
def layernorm_rescale(visited, c: float, title: str = ""):
    """Left: a LayerNorm's plasticity and Prop. 1 bound after scaling gamma and beta by ``c``,
    beside c times their values at c = 1; right: the largest logit difference from the
    original model, function-preserving and raw.

    Args:
        visited: one row per scale visited: ``c``, ``plasticity``, ``bound``,
            ``diff_preserved``, ``diff_raw`` (a row at c = 1 included).
        c: the scale shown now (marked).

    Paper: Prop. 1, objections 3-4.
    """
    v = visited.sort_values("c")
    one = v[v["c"] == 1.0].iloc[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    grid = np.geomspace(0.1, 10, 50)
    for col, mark, ls, colour, label in (("plasticity", "o", "-", OTHERS[3], "plasticity"),
                                         ("bound", "v", "--", OTHERS[2], "bound (Prop. 1)")):
        left.plot(grid, grid * one[col], ls, color=colour, lw=0.8, label=f"c x {col} at c = 1")
        left.plot(v["c"], v[col], mark, color=colour, ms=4, label=label)
    now = v[v["c"] == c]
    left.plot(now["c"], now["plasticity"], "ko", ms=7, label=f"c = {c:.3g}")
    for col, fmt, colour, label in (("diff_preserved", "o-", OTHERS[1], "function-preserving"),
                                    ("diff_raw", "s-", OTHERS[0], "raw (not preserving)")):
        right.plot(v["c"], v[col].clip(lower=1e-12), fmt, color=colour, label=label)
    left.set(title=title, ylabel="plasticity and bound")
    right.set(title="the network's output (0 drawn at 1e-12)", ylabel="max |logit difference|")
    for ax in (left, right):
        ax.set(xlabel="scale c of gamma and beta", xlim=(0.09, 11))
        log_axis(ax, "x")
        ax.set_yscale("log")
    fig.tight_layout()  # before the legends, which go below the panels, past the figure's edge
    for ax in (left, right):
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2)
    return fig


#: Finetuning curves of ``run_curves``: metric -> axis label (accuracy, stored as a fraction,
#: drawn in percent: ``PERCENT``).
RUN_CURVES = {"loss": "training loss", "val_acc": "validation accuracy (%)",
              "grad_norm": "gradient norm"}
PERCENT = ("val_acc",)


@_themed
def run_curves(history, title: str = ""):
    """The training loss, validation accuracy and gradient norms (global, and per component:
    ``grad_norm/<component>``) of finetuning runs along their steps, one line per run;
    accuracy in percent; each parameter group in its ``PALETTE`` colour (``colours``).

    Args:
        history: ``results.history`` rows of the runs: ``run``, ``step``, ``metric``, ``value``.

    Paper: Fig. 4 (training dynamics).
    """
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    h = history.dropna(subset=["value"])
    groups = sorted(sorted({m[len("grad_norm/"):] for m in h["metric"]
                            if m.startswith("grad_norm/")}), key=lambda g: _config_rank((g, None)))
    runs = {run: f"global, run {str(run)[:8]}" for run in h["run"].unique()}
    colour = colours([*runs.values(), *groups])  # a group that is no configuration: OTHERS
    for run, part in h.groupby("run", sort=False):
        for ax, metric in zip(axes, RUN_CURVES):
            m = part[part["metric"] == metric]
            ax.plot(m["step"], m["value"] * (100 if metric in PERCENT else 1), marker=".",
                    label=runs[run], color=colour[runs[run]], zorder=1)  # behind the groups
        for name in groups:
            m = part[part["metric"] == f"grad_norm/{name}"]
            axes[2].plot(m["step"], m["value"], lw=0.8, label=name,
                         **dict(style(name), color=colour[name]))
    for ax, (metric, name) in zip(axes, RUN_CURVES.items()):
        ax.set(xlabel=_label("step"), ylabel=name, title=metric.replace("_", " "))
        if metric == "grad_norm":
            log_axis(ax)
    axes[2].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the curves
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
