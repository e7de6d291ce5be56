"""Plot style: how every figure looks, whatever it shows.

One colour per configuration and component in every notebook (``PALETTE``, colour-blind safe
and checked with ``colour_vision``; a variant takes its component's colour, dashed: ``style``;
other lines ``OTHERS``: ``colours``), axes named in words (``LABELS``; a figure asks for a
label when a column's name is not words: ``is_words``), legends beside the panels
(``legend_beside``), log axes with plain, non-overlapping ticks (``log_axis``), one panel per
value of a column (``_grid``), figures drawn inside ``theme()`` and saved by ``save``. Importing
it sets no global style. ``vitplast.report.plots`` draws its figures with these; notebooks
import them from here (``plot_style.PALETTE``, ``plot_style.save``, ...).
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

from vitplast.measure.components import TABLE
from vitplast.train.configurations import CONFIG_ORDER

#: One colour per configuration, component and parameter group, the same in every notebook.
#: The five components take colours of two published colour-blind-safe schemes, chosen to
#: stay apart as a deuteranope or a protanope sees them, full finetuning black, head-only grey:
#: any two of these seven differ by a CIEDE2000 delta E of at least 20 in normal vision and
#: under simulated deuteranopia and protanopia (``colour_vision``; seaborn's
#: "colorblind" orange and vermillion, FC1 and LN2 before, differ by 17, and by 9 to a
#: deuteranope). The other groups of ``components.component_of`` (the final ``norm``, the
#: ``embedding``), drawn beside them in a run's gradient norms, differ from every colour here
#: by at least 15 in normal vision and under deuteranopia.
#: The components' colours are theirs in ``components.TABLE`` (``Component.colour``), in the
#: order of ``configurations.CONFIG_ORDER``, which holds every row of the table (a row the
#: paper does not have comes after its five).
PALETTE = {**{c.name: c.colour for c in sorted(TABLE, key=lambda c: CONFIG_ORDER.index(c.name))},
           "full": "#000000", "head": "#949494",  # black, grey
           "norm": "#332288",  # indigo
           "embedding": "#8C564B"}  # brown


def component_palette(components=TABLE) -> dict[str, str]:
    """``PALETTE`` with the colours of the rows of ``components`` (a ``components.extended``
    table's new rows too)."""
    return {**PALETTE, **{c.name: c.colour for c in components}}


#: Colours for lines and bars that are not configurations (functions, modules, runs, budgets),
#: in the order they are handed out: each differs from the others and from every ``PALETTE``
#: colour by a delta E of at least 20 (normal vision), so that no such line passes for a
#: component.
OTHERS = ("#555555", "#117733", "#EE3377", "#44AA99", "#CA9161")
#: At most this many panels per row; more wrap onto new rows.
MAX_COLS = 4
#: Axis labels in words for the column names the figures plot most.
LABELS = {"plasticity": "plasticity (mean rate over pairs)", "layer": "layer (block index)",
          "component": "component", "rate": "rate per pair ||f(x) - f(y)|| / ||x - y||",
          "n_pairs": "number of pairs", "step": "training step", "lr": "learning rate",
          "epoch": "pretraining epoch", "scale": "input scale"}


@contextlib.contextmanager
def theme():
    """Seaborn's whitegrid style for the figures drawn inside the block; the global
    matplotlib settings are restored after it (nothing is set on import)."""
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):
        yield


def _themed(fn):
    """Draw ``fn``'s figure inside ``theme()``."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with theme():
            return fn(*args, **kwargs)
    return wrapper


#: Axis labels that say nothing of what is plotted.
GENERIC = {"value", "values", "x", "y", "data", "metric", "statistic", "number", "count",
           "value of the panel's statistic"}


def is_words(text: str) -> bool:
    """True for an axis label in words: a word of three letters or more, no column-name
    underscores, and not a ``GENERIC`` label."""
    text = str(text).strip()
    return (bool(re.search(r"[A-Za-z]{3}", text)) and "_" not in text
            and text.lower() not in GENERIC)


def _label(name: str | None, given=None, panel=None) -> str:
    """An axis label: ``given`` (a string, or a mapping from panel value to label: one label
    per panel), else ``LABELS``'s for the column ``name``, else the column name when it is
    words (``is_words``); otherwise a ValueError asking for the label. Wrapped past 42
    characters, so that the labels of panels side by side do not run into each other."""
    if isinstance(given, Mapping):
        if panel not in given:
            raise ValueError(f"no axis label for the panel {panel!r}; the labels given are "
                             f"for {list(given)}")
        given = given[panel]
    if not (given or name in LABELS or is_words(name or "")):
        raise ValueError(f"the column {name!r} does not name its axis in words: pass xlabel= "
                         f"or ylabel= (known names: {sorted(LABELS)})")
    return textwrap.fill(str(given or LABELS.get(name, name)), 42, break_long_words=False)


def legend_beside(fig, ax, title: str | None = None, **kw) -> None:
    """Lay ``fig`` out, then put ``ax``'s legend beside it, to the right. Laid out first, so
    that the legend does not widen the gaps between every column of panels (it lands in an
    unused panel, or past the figure's edge, which ``save`` keeps)."""
    fig.tight_layout()
    ax.legend(title=title, bbox_to_anchor=(1.02, 1), loc="upper left", **kw)


def log_axis(ax, which: str = "y", values=None) -> None:
    """A log axis whose tick labels never overlap: plain numbers (0.3, 2, 10), no labels on
    minor ticks; majors at the plotted ``values`` when there are at most 8 of them (c = 1, 2,
    4, 8 shows 8), else at 1, 2, 3 and 5 per decade when the axis spans less than 1.5
    decades, at 1, 2 and 5 below 2 decades, else one per decade."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    lo, hi = (ax.get_ylim() if which == "y" else ax.get_xlim())
    decades = math.log10(hi / lo) if lo > 0 else math.inf
    subs = (1.0, 2.0, 3.0, 5.0) if decades < 1.5 else (1.0, 2.0, 5.0) if decades < 2 else (1.0,)
    shown = sorted({float(v) for v in values if v > 0}) if values is not None else []
    axis.set_major_locator(FixedLocator(shown) if 1 < len(shown) <= 8
                           else LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def robust_ylim(ax, values, q: float = 0.02, log: bool = False) -> None:
    """Y limits from the ``q`` and ``1 - q`` quantiles of ``values`` (padded by 10%), so that
    one spiking curve does not flatten the others; the spike leaves the frame."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if not len(v):
        return
    lo, hi = np.quantile(np.log10(v) if log else v, [q, 1 - q])
    pad = 0.1 * (hi - lo) or 0.05
    lo, hi = lo - pad, hi + pad
    ax.set_ylim(*((10 ** lo, 10 ** hi) if log else (lo, hi)))


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
    (fig, the used axes in order, the values, sorted). Unused panels are hidden."""
    values = list(dict.fromkeys(df[col])) if col else []
    try:  # sorted: the same panel order in every figure, whatever order the rows came in
        cols = sorted(values) or [None]
    except TypeError:  # values of mixed types: as they come
        cols = values or [None]
    ncols = min(len(cols), MAX_COLS)
    aspect = aspect * 1.4 if ncols == 1 else aspect  # room for a legend beside one panel
    nrows = math.ceil(len(cols) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(height * aspect * ncols, height * nrows),
                             squeeze=False, sharey=kw.pop("sharey", True))
    axes = axes.ravel()
    for ax in axes[len(cols):]:
        ax.set_visible(False)
    return fig, axes[:len(cols)], cols


def style(name) -> dict:
    """Line keywords of a configuration or variant: ``PALETTE``'s colour of its first word
    (None when it has none) and a dashed line unless it is a plain configuration."""
    word = str(name).split()[0] if str(name).split() else ""
    return dict(color=PALETTE.get(word), ls="-" if str(name) in PALETTE or word not in PALETTE
                else "--")


def colours(names) -> dict:
    """A colour per name: ``PALETTE``'s for configurations and their variants (``style``);
    for the others, in order, a sequential map when they are all numbers (layers, seeds),
    else ``OTHERS`` in turn: never a component's colour."""
    names = list(dict.fromkeys(names))
    rest = [n for n in names if style(n)["color"] is None]
    numeric = all(isinstance(n, numbers.Number) for n in rest)
    ramp = sns.color_palette("viridis", len(rest)).as_hex() if numeric and len(rest) > 1 else []
    out = {n: ramp[i] if ramp else OTHERS[i % len(OTHERS)] for i, n in enumerate(rest)}
    return {n: out.get(n) or style(n)["color"] for n in names}


def _config_rank(item) -> int:
    """Sort key of a (hue value, group) pair: ``CONFIG_ORDER`` first, in its order, then the
    others."""
    key = str(item[0])
    return CONFIG_ORDER.index(key) if key in CONFIG_ORDER else len(CONFIG_ORDER)

