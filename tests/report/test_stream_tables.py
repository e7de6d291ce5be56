"""Notebook 02's stream statistics as shown (``vitplast.report.stream_tables``): the value at
the mean sigma is named a plug-in, never a bound; it is below the per-token bound of Prop. 1."""

import json

import pytest
from helpers import tiny_vit

from vitplast.course import notebooks
from vitplast.measure import bounds, stream
from vitplast.report import stream_tables


def test_the_plugin_is_named_a_plugin_and_is_below_the_per_token_bound(images):
    model = tiny_vit()
    stats = stream.model_statistics(model, images[0]).assign(checkpoint="final", epoch=1.0)
    table = stream_tables.by_checkpoint(stats)
    assert "ln1_plugin" in table and not any("bound" in c for c in table.columns)
    long = stream_tables.long_statistics(stats)
    names = set(long["statistic"])
    assert stream_tables.PLUGIN[0] in names
    assert not any("bound" in n for n in names - {stream_tables.PLUGIN[0]})
    assert "not a bound" in stream_tables.PLUGIN[0]
    assert stream_tables.LABELS[stream_tables.PLUGIN[0]] == "max|gamma| / mean sigma"
    assert set(names) == set(stream_tables.LABELS)
    # the plug-in at the mean sigma is below Prop. 1's bound at the smallest per-token sigma
    from vitplast.measure.rates import component_inputs

    hidden = component_inputs(model.eval(), images[0], "hidden")
    for layer, block in enumerate(model.blocks):
        sigma = bounds.token_sigma(hidden[(layer, "LN1")], block.norm1.eps)
        bound = block.norm1.weight.abs().max().item() / sigma.min().item()
        plugin = block.norm1.weight.abs().max().item() / sigma.mean().item()
        assert stats.loc[layer, "ln1_bound"] == pytest.approx(plugin, rel=1e-5)
        assert plugin <= bound  # the plug-in is at most the bound, and no bound itself


def test_notebook_02_shows_no_plugin_as_a_bound():
    """The issue: 02's ``ln1_bound`` column and its panel "bound on LN1's rate (Prop. 1)" showed
    the plug-in at the mean sigma."""
    nb = json.loads((notebooks.NOTEBOOK_DIR / "02_plasticity.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "stream.long_statistics(" not in code and "stream.by_checkpoint(" not in code
    assert "stream_tables.long_statistics(" in code and "stream_tables.by_checkpoint(" in code
    gauge = json.loads((notebooks.NOTEBOOK_DIR / "02b_gauge.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in gauge["cells"] if c["cell_type"] == "code")
    assert "stream_tables.shown(recipes.recipe_statistics(" in code  # 02b's recipe table too
