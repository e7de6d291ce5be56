"""Figures (pure functions, axes named in words, no global theme) and the findings builders of
notebooks 01, 02 and 06: verdicts from synthetic tables, one agreeing case and one not."""

import inspect
import re

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.patches import Rectangle

from vitplast.measure import definitions
from vitplast.measure.components import COMPONENTS
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER
from vitplast.report import definition_findings, plasticity_findings, plot_style, plots
from vitplast.report.colour_vision import closest_pair
from vitplast.stats import verdicts

TASKS = [f"t{i}" for i in range(8)]


def verdicts_of(table: pd.DataFrame, like: str) -> list[str]:
    return table[table["claim"].str.contains(like, regex=False)]["verdict"].tolist()


# -- notebook 01 -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tables01():
    maps = definitions.maps_1d_table([0.3, 1.0, 3.0], n=500)
    linear = definitions.linear_table(definitions.linear_map(d=16), n=2000)
    modules = {"LayerNorm": torch.nn.LayerNorm(8), "attention": definitions.attention(8, 2)}
    scale = definitions.scale_table(modules, (4, 8), [0.1, 1.0, 10.0], n=64)
    rng = np.random.default_rng(0)
    rates = pd.DataFrame(dict(layer=0, component="MHA", pair=range(512),
                              rate=2 + 0.1 * rng.standard_normal(512)))
    return maps, linear, scale, definitions.convergence(rates, [8, 512])


def test_notebook_01_findings_agree_on_the_real_tables(tables01):
    table = definition_findings.definitions(*tables01)
    assert list(table.columns[:9]) == verdicts.COLUMNS and (table["test"] == "none").all()
    for claim in ("<= Lipschitz constant, 1-D maps", "LayerNorm: slope"):  # the paper's claims
        assert verdicts_of(table, claim) == ["same as the paper (exact check)"]
    assert verdicts_of(table, "sqrt(mean sigma_i^2)") == ["holds (exact check)"]  # Jensen's, ours
    assert verdicts_of(table, "crosses 1")[0].endswith("of 4 maps cross 1")  # objection 1: a result
    assert verdicts_of(table, "95% CI") == ["precise (<= 5%)"]


def test_notebook_01_findings_disagree_when_the_tables_do(tables01):
    maps, linear, scale, conv = (t.copy() for t in tables01)
    maps.loc[0, "max_rate"] = maps.loc[0, "lipschitz"] * 2  # a rate above Lip
    scale.loc[scale["module"] == "LayerNorm", "plasticity"] = 1.0  # scale-free LayerNorm
    conv["ci95"] = conv["plasticity"]  # a CI as wide as the estimate
    table = definition_findings.definitions(maps, linear, scale, conv)
    assert verdicts_of(table, "<= Lipschitz constant") == ["differs from the paper (exact check)"]
    assert verdicts_of(table, "LayerNorm: slope") == ["differs from the paper (exact check)"]
    assert verdicts_of(table, "95% CI") == ["imprecise (> 5%)"]


# -- notebook 02 -------------------------------------------------------------------------------

def _ranked(values: dict, noise: float = 0.05, checkpoint: str = "final", seed: int = 0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([dict(task=t, checkpoint=checkpoint, protocol=p, component=c,
                              plasticity=v * (1 + noise * rng.standard_normal()))
                         for p in ("embedding", "hidden") for t in TASKS
                         for c, v in values.items()])


def test_notebook_02_findings_agree_with_the_papers_order():
    table = plasticity_findings.plasticity_ranking(_ranked(FIG2_PLASTICITY))
    tested = table[table["test"] != "none"]
    assert (tested["n"] == 8).all() and len(tested) == 8  # tasks are the unit
    assert set(tested["verdict"]) == {"agrees with the paper"}
    # rho = +1 on every task: no spread to test, and it is the paper's value
    assert all(v.startswith("agrees with the paper: rho = +1 on every one of the 8 tasks")
               for v in verdicts_of(table, "Spearman"))
    assert set(verdicts_of(table, "above 1")) == {"same as the paper"}
    assert (table["p_holm"].dropna() >= table["p"].dropna()).all()


def test_notebook_02_findings_disagree_with_a_reversed_order():
    reversed_ = dict(zip(PLASTICITY_ORDER, sorted(FIG2_PLASTICITY.values())))
    table = plasticity_findings.plasticity_ranking(_ranked(reversed_))
    tested = table[table["test"] != "none"]
    assert set(tested["verdict"]) == {"disagrees with the paper"}
    assert all(v.startswith("disagrees with the paper: rho = -1")
               for v in verdicts_of(table, "Spearman"))
    assert tested.set_index("claim").loc["MHA - FC1, plasticity [hidden]", "measured"] < 0
    assert set(verdicts_of(table, "above 1")) == {"differs from the paper"}


def test_notebook_02_pretraining_and_scale_rows():
    order = dict(zip(PLASTICITY_ORDER, [5, 4, 3, 2, 1]))
    same = pd.concat([_ranked(order, checkpoint="init"), _ranked(order)], ignore_index=True)
    flipped = pd.concat([_ranked(dict(zip(order, [1, 2, 3, 4, 5])), checkpoint="init"),
                         _ranked(order)], ignore_index=True)
    flat = pd.DataFrame(dict(layer=[0, 0, 1, 1], component="MHA", scale=[0.5, 2.0] * 2,
                             plasticity=[1.0, 1.0, 2.0, 2.0]))
    table = plasticity_findings.plasticity_ranking(_ranked(order), same, flat)
    assert set(verdicts_of(table, "order at init vs at final")) == {"order held"}
    assert verdicts_of(table, "MHA plasticity at input scale") == ["scale-invariant"]
    steep = flat.assign(plasticity=[1.0, 3.0, 2.0, 6.0])
    table = plasticity_findings.plasticity_ranking(_ranked(order), flipped, steep)
    assert set(verdicts_of(table, "order at init")) == {"order changed along pretraining"}
    row = table[table["claim"].str.startswith("MHA plasticity at")].iloc[0]
    assert row["measured"] == pytest.approx(3.0) and row["verdict"] == "depends on the input scale"


# -- figures -----------------------------------------------------------------------------------

def test_importing_and_drawing_leaves_the_global_style_alone():
    before = dict(matplotlib.rcParams)
    fig = plots.lines(pd.DataFrame(dict(x=[1, 2], y=[1.0, 2.0], h="a")), x="x", y="y", hue="h",
                      xlabel="input", ylabel="output")
    plt.close(fig)
    assert dict(matplotlib.rcParams) == before
    with plot_style.theme():
        assert matplotlib.rcParams["axes.grid"]
    assert dict(matplotlib.rcParams) == before


def test_lines_wrap_name_axes_and_keep_narrow_log_ticks_apart():
    df = pd.DataFrame([dict(task=f"task{t}", n_pairs=n, plasticity=0.3 + 0.01 * t, cfg="a")
                       for t in range(7) for n in (8, 64, 512)])
    fig = plots.lines(df, x="n_pairs", y="plasticity", hue="cfg", col="task", logx=True,
                      logy=True)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 7 and fig.axes[0].get_gridspec().ncols == plot_style.MAX_COLS
    ax = visible[0]
    assert ax.get_xlabel() == "number of pairs"
    assert ax.get_ylabel() == "plasticity (mean rate over pairs)"
    fig.canvas.draw()
    assert not [t for t in ax.yaxis.get_minorticklabels() if t.get_text()]
    lo, hi = ax.get_ylim()
    shown = [t.get_text() for t in ax.yaxis.get_majorticklabels()
             if lo <= t.get_position()[1] <= hi]
    assert shown == ["0.1", "0.2", "0.3", "0.5", "1"]  # plain numbers, 1-2-3-5 per decade
    plt.close(fig)


def test_robust_limits_keep_a_spike_from_flattening_the_rest():
    steps = np.arange(50)
    df = pd.concat([pd.DataFrame(dict(step=steps, value=2.0 - 0.01 * steps, config=c))
                    for c in ("a", "b", "c")] + [pd.DataFrame(dict(step=[25], value=[1e4],
                                                                    config="a"))])
    fig = plots.lines(df, x="step", y="value", hue="config", logy=True, robust=True,
                      ylabel="validation loss")
    lo, hi = fig.axes[0].get_ylim()
    assert hi < 10 and lo > 1 and fig.axes[0].get_yscale() == "log"
    plt.close(fig)


def test_findings_forest_plot_reads_the_tables_p_holm():
    rows = [verdicts.mean_test("big", [3.0, 3.1, 2.9, 3.2, 3.0], paper="x", expected=1,
                               unit="points"),
            verdicts.mean_test("noise", [1.0, -1.0, 0.5, -0.4, 0.1], paper="x", expected=1,
                               unit="points")]
    fig = plots.findings(verdicts.table(rows))
    ax = fig.axes[0]
    faces = [line.get_markerfacecolor() for line in ax.lines if line.get_marker() == "o"]
    assert faces[0] != "white" and faces[1] == "white"
    assert "points" in ax.get_xlabel()
    key = [t.get_text() for t in fig.legends[0].get_texts()]  # what fill and bar mean, said
    assert key == ["filled: significant after Holm within its family (Holm p < 0.05)",
                   "hollow: not significant after Holm", "bar: the 95% confidence interval"]
    plt.close(fig)


def test_explorer_figures():
    fig = plots.rate_histogram(np.geomspace(0.5, 2.0, 40), 3.0, "Prop. 2", title="FC1")
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_ylabel() == "number of pairs"
    plt.close(fig)
    visited = pd.DataFrame(dict(c=[0.5, 1.0, 2.0], plasticity=[0.5, 1.0, 2.0], bound=[1, 2, 4.0],
                                diff_preserved=0.0, diff_raw=[0.1, 0.0, 0.2]))
    fig = plots.layernorm_rescale(visited, 2.0, title="LN1")
    assert [ax.get_xlabel() for ax in fig.axes] == ["scale c of gamma and beta"] * 2
    plt.close(fig)
    history = pd.DataFrame(dict(run="r1", step=[0, 1, 0, 1, 1], value=[2.0, 1.0, 1.0, 0.5, 0.6],
                                metric=["loss", "loss", "grad_norm", "grad_norm", "val_acc"]))
    fig = plots.run_curves(history, title="x")
    assert [ax.get_ylabel() for ax in fig.axes] == list(plots.RUN_CURVES.values())
    plt.close(fig)


def test_findings_forest_plot_names_family_and_n_and_marks_descriptive_rows():
    rows = [verdicts.mean_test("big", [3.0, 3.1, 2.9, 3.2, 3.0], paper="x", expected=1,
                               unit="points"),
            verdicts.mean_test("two", [1.0, 2.0], paper="x", expected=1, unit="points")]
    ax = plots.findings(verdicts.table(rows)).axes[0]
    labels = [t.get_text().replace("\n", " ") for t in ax.get_yticklabels()]
    assert labels[0].startswith("[exploratory] big") and "n\u00a0=\u00a05" in labels[0]
    assert labels[1].startswith("[descriptive] two")
    assert [line.get_marker() for line in ax.lines if line.get_marker() in "oD"] == ["o", "D"]
    plt.close("all")
    only = plots.findings(verdicts.table([rows[1]]))  # nothing tested: still drawn
    assert "[descriptive] two" in only.axes[0].get_yticklabels()[0].get_text()
    plt.close("all")


def test_findings_forest_plot_draws_no_interval_below_three_tasks():
    """A row on 2 tasks has no interval (its t interval, +-12.7 sd, once set the plot's
    range): only its diamond is drawn, and the axis spans the tested row's interval."""
    rows = [verdicts.mean_test("big", [3.0, 3.1, 2.9, 3.2, 3.0], paper="x", expected=1,
                               unit="points"),
            verdicts.mean_test("two", [0.0, 10.0], paper="x", expected=1, unit="points")]
    ax = plots.findings(verdicts.table(rows)).axes[0]
    lo, hi = ax.get_xlim()
    assert -3 < lo and hi < 12  # the t interval on two values would run from -59 to +69
    plt.close("all")


def test_a_log_axis_labels_each_plotted_value_when_there_are_few():
    df = pd.DataFrame([dict(c=c, plasticity=c * k, component=comp) for k, comp in
                       ((1, "MHA"), (2, "LN1")) for c in (1, 2, 4, 8)])
    fig = plots.lines(df, x="c", y="plasticity", hue="component", logx=True, xlabel="scale c")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    assert [line.get_color() for line in ax.get_lines()] == [plot_style.PALETTE["MHA"],
                                                             plot_style.PALETTE["LN1"]]


def test_run_curves_draw_the_global_gradient_norm_in_no_component_s_colour():
    h = pd.DataFrame([dict(run="r", step=s, metric=m, value=1.0 + s) for s in range(3)
                      for m in ("loss", "val_acc", "grad_norm", "grad_norm/MHA")])
    ax = plots.run_curves(h).axes[2]
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert colours["MHA"] == plot_style.PALETTE["MHA"]
    assert colours["global, run r"] not in plot_style.PALETTE.values()


# -- every figure: axes in words, bars from zero, one colour per parameter group ------------

def _summary(rng) -> pd.DataFrame:
    return pd.DataFrame([dict(protocol=p, layer=layer, component=c, plasticity=rng.uniform(0.3, 2),
                              ci95=0.05, task=t)
                         for p in ("embedding", "hidden") for layer in range(3)
                         for c in COMPONENTS for t in ("t0", "t1")])


def _history() -> pd.DataFrame:
    groups = [*COMPONENTS, "head", "norm", "embedding", "other"]
    return pd.DataFrame([dict(run="r1", step=s, metric=m, value=0.5 + 0.1 * s)
                         for s in range(3) for m in ("loss", "val_acc", "grad_norm",
                                                     *(f"grad_norm/{g}" for g in groups))])


def _figures() -> dict:
    """One call of every figure function of ``plots`` on a small synthetic table, as the
    notebooks call them (only the labels the tables' columns cannot give passed)."""
    rng = np.random.default_rng(0)
    summary = _summary(rng)
    rates = pd.DataFrame(dict(protocol="hidden", component=list(COMPONENTS) * 20,
                              rate=rng.uniform(0.1, 3, 100)))
    steps = pd.DataFrame([dict(step=s, plasticity=1.0 + s, config=c, task=t)
                          for s in range(3) for c in ("full", "head", "MHA") for t in "ab"])
    bars = pd.DataFrame([dict(component=c, plasticity=v, budget=b, task=t)
                         for c, v in (("MHA", 91.0), ("LN1", 88.5)) for b in ("1x", "4x")
                         for t in ("t0", "t1", "t2", "t3", "t4")])
    forest = pd.DataFrame(dict(label=["MHA - LN1", "FC1 - FC2"], diff_pp=[1.0, -0.5],
                               ci95_pp=[0.5, 0.4], significant=[True, False]))
    rows = [verdicts.mean_test("MHA - LN1", [3.0, 3.1, 2.9, 3.2], paper="x", expected=1,
                               unit="points")]
    bounds = pd.DataFrame([dict(component=c, layer=layer, lipschitz_lower=1.0, lipschitz_upper=3.0,
                                bound=3.0, bound_p4=4.0, plugin=2.0, plasticity=0.5)
                           for c in COMPONENTS for layer in range(3)])
    visited = pd.DataFrame(dict(c=[0.5, 1.0, 2.0], plasticity=[0.5, 1.0, 2.0], bound=[1, 2, 4.0],
                                diff_preserved=0.0, diff_raw=[0.1, 0.0, 0.2]))
    return {
        "plasticity_box": plots.plasticity_box(summary),
        "plasticity_by_layer": plots.plasticity_by_layer(summary),
        "rate_distributions": plots.rate_distributions(rates),
        "lines": plots.lines(steps, x="step", y="plasticity", hue="config", col="task"),
        "scatter": plots.scatter(summary, x="plasticity", y="layer", hue="component", col="task"),
        "differences": plots.differences(forest, "label", significant="significant"),
        "intervals": plots.intervals(bounds),
        "findings": plots.findings(verdicts.table(rows)),
        "paired_bars": plots.paired_bars(bars, x="component", y="plasticity", hue="budget",
                                         col="task"),
        "message": plots.message("nothing to draw"),
        "rate_histogram": plots.rate_histogram(rng.uniform(0.5, 2, 50), 3.0, "Prop. 1",
                                               component="LN1"),
        "layernorm_rescale": plots.layernorm_rescale(visited, 2.0),
        "run_curves": plots.run_curves(_history()),
    }


@pytest.fixture(scope="module")
def figures():
    drawn = _figures()
    yield drawn
    plt.close("all")


def _labelled(ax, which: str) -> bool:
    """An axis names itself in words, or needs no name: its ticks are words (rows of a
    forest plot), or it shares its scale with a panel that names it."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    text = axis.get_label().get_text()
    if text:
        return plot_style.is_words(text)
    ticks = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
    if ticks and all(re.search("[A-Za-z]", t) and not t.startswith("$") for t in ticks):
        return True  # names, not numbers (a number in mathtext starts with $)
    shared = (ax.get_shared_y_axes() if which == "y" else ax.get_shared_x_axes())
    return any((o.get_ylabel() if which == "y" else o.get_xlabel())
               for o in shared.get_siblings(ax) if o is not ax)


def test_every_figure_function_is_drawn_here(figures):
    public = {name for name, fn in inspect.getmembers(plots, inspect.isfunction)
              if fn.__module__ == plots.__name__ and not name.startswith("_")}
    assert set(figures) == public  # a new figure function gets its case in ``_figures``


def test_every_axis_of_every_figure_is_named_in_words(figures):
    for name, fig in figures.items():
        fig.canvas.draw()
        for ax in fig.axes:
            if not ax.get_visible() or not ax.axison:
                continue
            for which in "xy":
                assert _labelled(ax, which), (name, which, ax.get_xlabel(), ax.get_ylabel())


def test_every_bar_starts_at_zero(figures):
    drawn = 0
    for name, fig in figures.items():
        for ax in fig.axes:
            bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height()]
            if ax.get_visible() and bars:
                drawn += 1
                assert ax.get_ylim()[0] <= 0 <= ax.get_ylim()[1], (name, ax.get_ylim())
    assert drawn >= 6  # paired_bars' five panels and the histogram


def test_a_column_not_in_words_needs_its_label():
    bars = pd.DataFrame(dict(config=["MHA", "LN1"], test_acc_mean=[90.0, 88.0], budget="1x"))
    with pytest.raises(ValueError, match="ylabel="):
        plots.paired_bars(bars, x="config", y="test_acc_mean", hue="budget")
    plt.close("all")


def test_run_curves_show_accuracy_in_percent_and_every_group_in_its_own_colour(figures):
    fig = figures["run_curves"]
    acc = fig.axes[1]
    assert acc.get_ylabel() == "validation accuracy (%)"
    assert acc.lines[0].get_ydata().tolist() == pytest.approx([50.0, 60.0, 70.0])
    lines = {line.get_label(): line.get_color() for line in fig.axes[2].get_lines()}
    assert set(lines) == {*COMPONENTS, "head", "norm", "embedding", "other", "global, run r1"}
    closest = closest_pair(lines)
    assert closest[0] >= 15, closest  # norm once took MHA's blue (delta E 1.7)
    assert lines["MHA"] == plot_style.PALETTE["MHA"] and lines["norm"] == plot_style.PALETTE["norm"]


def test_panels_of_different_quantities_each_name_their_own():
    from vitplast.measure import stream

    stats = pd.DataFrame([dict(checkpoint=f"epoch{e}", epoch=e, layer=layer,
                               **{c: 1.0 + e + layer for c in stream.STATISTICS})
                          for e in (0, 1) for layer in (0, 1)])
    long = stream.long_statistics(stats)
    fig = plots.lines(long, x="epoch", y="value", hue="layer", col="statistic", title="",
                      ylabel=stream.STATISTIC_LABELS)
    shown = {ax.get_title(): ax.get_ylabel() for ax in fig.axes if ax.get_visible()}
    assert shown == stream.STATISTIC_LABELS and all(map(plot_style.is_words, shown.values()))
    plt.close(fig)


def test_bars_not_from_zero_show_a_one_point_gap():
    """05_matched drew bars near 80 from zero, hiding 1-point gaps; ``from_zero=False`` spans
    the values."""
    bars = pd.DataFrame(dict(config=["MHA", "LN1"], test_acc_mean=[81.0, 80.0], budget="1x"))
    fig = plots.paired_bars(bars, x="config", y="test_acc_mean", hue="budget",
                            ylabel="test accuracy (%)", from_zero=False)
    lo, hi = fig.axes[0].get_ylim()
    assert 78 < lo < 80 and 81 < hi < 83
    plt.close("all")
