"""The figures' look (``vitplast.report.plot_style``): one colour per configuration and its variants
(dashed), all of them apart to normal and colour-blind eyes, never a component's colour for
other lines; axes labelled in words; a log axis labelled at the plotted values when they are
few; ``theme`` restores the global settings; ``save`` writes only when asked."""

import itertools

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import pytest
import seaborn as sns

from vitplast.measure.components import COMPONENTS
from vitplast.report import plot_style
from vitplast.report.colour_vision import closest_pair, delta_e
from vitplast.report.plot_style import OTHERS, PALETTE

#: Drawn together in most figures: the five components, full finetuning and head-only.
TOGETHER = [*COMPONENTS, "full", "head"]
#: A delta E (CIEDE2000) at which two categories read as different at a glance.
APART = 20


@pytest.mark.parametrize("vision", ["normal", "deuteranopia", "protanopia"])
def test_components_full_and_head_look_apart_also_to_colour_blind_readers(vision):
    together = {name: PALETTE[name] for name in TOGETHER}
    assert closest_pair(together, vision)[0] >= APART
    # the bar is not one any palette clears: seaborn's "colorblind" colours as the components
    # once took them (FC1 orange, LN2 vermillion) do not
    old = dict(zip(["MHA", "FC1", "FC2", "LN2", "LN1"], sns.color_palette("colorblind", 5)))
    assert closest_pair(old, vision)[0] < APART


@pytest.mark.parametrize("vision", ["normal", "deuteranopia"])
def test_every_palette_colour_looks_apart_from_every_other(vision):
    """The parameter groups drawn beside the components in a run's gradient norms (the final
    ``norm``, the ``embedding``) included."""
    assert {"norm", "embedding"} <= set(PALETTE)
    assert closest_pair(PALETTE, vision)[0] >= 15


def test_other_lines_look_apart_from_each_other_and_from_the_palette():
    assert closest_pair(dict(enumerate(OTHERS)))[0] >= APART
    assert min(delta_e(a, b) for a, b in itertools.product(OTHERS, PALETTE.values())) >= APART


def test_an_axis_label_is_words_or_the_figure_asks_for_one():
    assert plot_style._label("plasticity") == plot_style.LABELS["plasticity"]
    assert plot_style._label("test accuracy") == "test accuracy"  # a column named in words
    assert plot_style._label("value", "norm of the gradient") == "norm of the gradient"
    for column in ("test_acc_mean", "value", "y"):
        with pytest.raises(ValueError, match="ylabel="):
            plot_style._label(column)
    per_panel = {"a": "first quantity", "b": "second quantity"}
    assert plot_style._label("value", per_panel, "b") == "second quantity"
    with pytest.raises(ValueError, match="panel 'c'"):
        plot_style._label("value", per_panel, "c")
    assert not any(map(plot_style.is_words, ("", "value of the panel's statistic", "gain_pp")))


def test_a_variant_takes_its_component_s_colour_dashed():
    assert plot_style.style("MHA") == dict(color=PALETTE["MHA"], ls="-")
    assert plot_style.style("MHA sparse") == dict(color=PALETTE["MHA"], ls="--")
    assert plot_style.style("ReLU") == dict(color=None, ls="-")
    assert plot_style.PALETTE is PALETTE  # re-exported where the figures are drawn


def test_lines_that_are_not_configurations_never_take_a_component_s_colour():
    names = ["MHA", "LayerNorm", "linear", "LN1 sparse", "ReLU", "x^2", "tanh", "GELU"]
    got = plot_style.colours(names)
    assert got["MHA"] == PALETTE["MHA"] and got["LN1 sparse"] == PALETTE["LN1"]
    others = [got[n] for n in names if n not in ("MHA", "LN1 sparse")]
    assert not set(others) & set(PALETTE.values()) and len(set(others)) == 5
    layers = plot_style.colours(range(6))  # numbers: a sequential map, one colour each
    assert len(set(layers.values())) == 6 and not set(layers.values()) & set(PALETTE.values())


def test_a_log_axis_shows_the_plotted_values_as_plain_numbers():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 8], [1, 2, 3, 4])
    plot_style.log_axis(ax, "x", values=[1, 2, 4, 8])
    fig.canvas.draw()
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    plt.close(fig)


def test_theme_restores_the_global_style_and_save_writes_only_when_asked(tmp_path):
    before = dict(matplotlib.rcParams)
    with plot_style.theme():
        assert matplotlib.rcParams["axes.grid"]
    assert dict(matplotlib.rcParams) == before
    fig, axes, cols = plot_style._grid(pd.DataFrame(dict(t=[3, 1, 2, 4, 5])), "t")
    assert cols == [1, 2, 3, 4, 5] and len(axes) == 5
    assert fig.axes[0].get_gridspec().ncols == plot_style.MAX_COLS  # wrapped onto two rows
    assert plot_style.save(fig, "", "f") is None and not list(tmp_path.iterdir())
    assert plot_style.save(fig, tmp_path / "figs", "f") == tmp_path / "figs" / "f.png"
    assert (tmp_path / "figs" / "f.png").stat().st_size > 0
    plt.close(fig)
