"""The figures' look (``vitplast.report.plot_style``): one colour per configuration and its variants
(dashed), never a component's colour for other lines; a log axis labelled at the plotted values
when they are few; ``theme`` restores the global settings; ``save`` writes only when asked."""

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from vitplast.report import plot_style
from vitplast.report.plot_style import PALETTE


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
