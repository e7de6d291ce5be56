"""Figures as pure functions: a tidy DataFrame in, a matplotlib Figure out.

Nothing here computes results or holds numbers: callers pass the tables that
``vitplast.plasticity``, ``.intervals``, ``.sweep`` produce. Notebooks save what they show with
``save``.

Used by notebooks 01-06.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from vitplast.components import COMPONENTS

ORDER = list(COMPONENTS)
#: Finetuning configurations in the order figures list them (others follow as they come).
CONFIG_ORDER = ["full", "head", "MHA", "FC1", "FC2", "LN2", "LN1"]
#: At most this many panels per row; more wrap onto new rows.
MAX_COLS = 4


def _themed(fn):
    """Draw ``fn``'s figure in seaborn's whitegrid style, without changing the global theme."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):
            return fn(*args, **kwargs)
    return wrapper


def save(fig: plt.Figure, folder: str | Path, name: str) -> Path | None:
    """Save ``fig`` as ``folder/name.png`` (nothing when ``folder`` is empty)."""
    if not folder:
        return None
    path = Path(folder) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _grid(df, col, height=3.2, aspect=1.2, **kw):
    """A figure with one panel per value of ``col``, at most ``MAX_COLS`` per row; returns
    (fig, the used axes in order, the values). Unused panels are hidden."""
    cols = (list(dict.fromkeys(df[col])) or [None]) if col else [None]
    ncols = min(len(cols), MAX_COLS)
    aspect = aspect * 1.4 if ncols == 1 else aspect  # room for a legend beside one panel
    nrows = math.ceil(len(cols) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(height * aspect * ncols, height * nrows),
                             squeeze=False, sharey=kw.pop("sharey", True))
    axes = axes.ravel()
    for ax in axes[len(cols):]:
        ax.set_visible(False)
    return fig, axes[:len(cols)], cols


def _config_rank(item) -> int:
    """Sort key of a (hue value, group) pair: ``CONFIG_ORDER`` first, in its order."""
    key = str(item[0])
    return CONFIG_ORDER.index(key) if key in CONFIG_ORDER else len(CONFIG_ORDER)


@_themed
def plasticity_box(summary, col: str | None = "protocol", hue: str | None = None):
    """Fig. 2 analogue: per component, a box over layers of per-layer plasticity.

    Args:
        summary: ``vitplast.plasticity.summarize`` output (one row per layer x component).
        col: a column to split into panels (e.g. protocol), or None.
        hue: a column to colour by (e.g. task or checkpoint), or None.
    """
    fig, axes, cols = _grid(summary, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = summary if value is None else summary[summary[col] == value]
        sns.boxplot(sub, x="component", y="plasticity", hue=hue, order=ORDER, ax=ax)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_title(f"{col} = {value}" if value is not None else "")
    fig.tight_layout()
    return fig


@_themed
def plasticity_by_layer(summary, col: str | None = "protocol", style: str | None = None):
    """Fig. 3 analogue: per-layer plasticity curves per component, with 95% CI bands."""
    fig, axes, cols = _grid(summary, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = summary if value is None else summary[summary[col] == value]
        for comp in ORDER:
            part = sub[sub["component"] == comp].groupby("layer")[["plasticity", "ci95"]].mean()
            line, = ax.plot(part.index, part["plasticity"], marker="o", label=comp)
            ax.fill_between(part.index, part["plasticity"] - part["ci95"],
                            part["plasticity"] + part["ci95"], color=line.get_color(), alpha=0.2)
        ax.set_xlabel("layer")
        ax.set_ylabel("plasticity")
        ax.set_yscale("log")
        ax.set_title(f"{col} = {value}" if value is not None else "")
    axes[-1].legend(bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    return fig


@_themed
def rate_distributions(df, col: str | None = "protocol"):
    """Per-pair rate distributions per component (all layers pooled), log scale."""
    fig, axes, cols = _grid(df, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        sns.violinplot(sub, x="component", y="rate", order=ORDER, ax=ax, log_scale=True, cut=0)
        ax.set_title(f"{col} = {value}" if value is not None else "")
    fig.tight_layout()
    return fig


@_themed
def lines(df, x: str, y: str, hue: str, col: str | None = None, logx: bool = False,
          logy: bool = False, band: str | None = None, title: str = "",
          xlabel: str | None = None, ylabel: str | None = None):
    """Line plot of ``y`` against ``x`` per ``hue`` (optionally ``band`` = +- column), one panel
    per ``col`` value; ``xlabel``/``ylabel`` name the axes in words (default: column names)."""
    fig, axes, cols = _grid(df, col, sharey=False)
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        for key, g in sorted(sub.groupby(hue, observed=True, sort=False), key=_config_rank):
            g = g.groupby(x)[[y] + ([band] if band else [])].mean().reset_index()
            line, = ax.plot(g[x], g[y], marker="o", label=str(key))
            if band:
                ax.fill_between(g[x], g[y] - g[band], g[y] + g[band], alpha=0.2,
                                color=line.get_color())
        ax.set_xscale("log" if logx else "linear")
        ax.set_yscale("log" if logy else "linear")
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(ylabel or y)
        ax.set_title(f"{title}{value}" if value is not None else title)
    if len(df):
        axes[-1].legend(title=hue, bbox_to_anchor=(1.02, 1), loc="upper left")
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
        sns.scatterplot(sub, x=x, y=y, hue=hue, ax=ax, legend=ax is axes[-1], s=60)
        ax.set_xscale("log" if logx else "linear")
        ax.axhline(0, color="k", lw=0.8, ls="--")
        ax.set(title=f"{title}{value}" if value is not None else title, xlabel=xlabel or x,
               ylabel=ylabel or y)
    if axes[-1].get_legend() is not None:
        axes[-1].legend(title=hue, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    return fig


@_themed
def differences(df, label: str, diff: str = "diff_pp", ci: str = "ci95_pp",
                significant: str | None = None, title: str = "", xlabel: str | None = None):
    """A forest plot: per row of ``df``, ``diff`` with a +-``ci`` bar, against zero.

    ``significant`` (a boolean column) draws the rows it marks filled, the others hollow.
    Used by notebooks 04 (paired tests) and 05 (verdicts).
    """
    import textwrap

    fig, ax = plt.subplots(figsize=(9, 0.55 * len(df) + 1.2))
    y = range(len(df))[::-1]  # first row on top
    filled = df[significant].astype(bool) if significant else [True] * len(df)
    for yi, (_, r), full in zip(y, df.iterrows(), filled):
        ax.errorbar(r[diff], yi, xerr=r[ci], fmt="o", color="C0", capsize=3,
                    markerfacecolor="C0" if full else "white")
    ax.axvline(0, color="k", lw=0.8, ls="--")
    ax.set(yticks=list(y), yticklabels=[textwrap.fill(str(v), 45) for v in df[label]], title=title,
           xlabel=xlabel or f"{diff} (+- {ci})")
    fig.tight_layout()
    return fig


@_themed
def intervals(df):
    """Per component, along depth on a log scale: the interval around the Lipschitz constant
    (shaded, from ``lipschitz_lower`` to ``lipschitz_upper``), the bounds it comes from, the
    paper's plug-in value, and plasticity (the mean rate, below the interval).

    Paper: Props. 1-4 next to the measured plasticity; ``df`` from ``intervals.intervals``.
    Used by notebook 02.
    """
    from matplotlib.ticker import MaxNLocator

    comps = [c for c in ORDER if c in set(df["component"])]
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
def findings(table, unit: str, title: str = ""):
    """A forest plot of the findings rows measured in ``unit`` (``vitplast.findings``): each
    difference with its 95% CI, filled where Holm-significant. Used by notebooks 04-05."""
    rows = table[(table["unit"] == unit) & (table["test"] != "none")].reset_index(drop=True)
    rows = rows.assign(significant=rows["p_holm"] < 0.05)
    return differences(rows, label="claim", diff="measured", ci="ci95", significant="significant",
                       title=title or "filled: significant after Holm correction",
                       xlabel=unit)


@_themed
def paired_bars(df, x: str, y: str, hue: str, col: str | None = None, ylabel: str | None = None,
                title: str = "", xlabel: str | None = None):
    """Bars of ``y`` per ``x`` and ``hue``, one panel per ``col`` value (e.g. accuracy per
    configuration at two budgets)."""
    fig, axes, cols = _grid(df, col, aspect=1.5)
    if not len(df):
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
        return fig
    for ax, value in zip(axes, cols):
        sub = df if value is None else df[df[col] == value]
        order = sorted(sub[x].unique(), key=lambda v: _config_rank((v, None)))
        sns.barplot(sub, x=x, y=y, hue=hue, ax=ax, legend=ax is axes[-1], order=order)
        lo = sub[y].min()
        ax.set(ylim=(lo - 0.1 * (sub[y].max() - lo) - 1, None), ylabel=ylabel or y,
               xlabel=xlabel or x,
               title=f"{title}{value}" if value is not None else title)
    if axes[-1].get_legend() is not None:
        axes[-1].legend(title=hue, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    return fig
