"""What sets the ranking: attention entropy, the per-layer statistics, the ranking tables and
their findings rows (synthetic tables: exact verdicts)."""

import math

import pytest
import torch
from helpers import ranked_rows, tiny_vit

from vitplast.measure import stream
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER


def test_attention_entropy_is_log_n_when_uniform_and_falls_with_scale(images):
    model = tiny_vit()
    attn, x = model.blocks[0].attn, torch.randn(3, 17, 32)
    with torch.no_grad():
        saved = attn.qkv.weight.clone()
        attn.qkv.weight.zero_()
        attn.qkv.bias.zero_()
    torch.testing.assert_close(stream.attention_entropy(attn, x),
                               torch.full((3, 4, 17), math.log(17)))
    with torch.no_grad():
        attn.qkv.weight.copy_(saved)
    low, high = (stream.attention_entropy(attn, s * x).mean() for s in (1.0, 10.0))
    assert high < low  # larger tokens, more peaked softmax


def test_model_statistics_columns_and_the_gauge_on_them(images):
    from vitplast.measure import gauge

    model = tiny_vit()
    stats = stream.model_statistics(model, images[0])
    assert list(stats.columns) == ["layer", "r_embedding", "sigma_ln1", "sigma_ln2", "ln1_bound",
                                   "entropy_hidden", "entropy_embedding"]
    assert len(stats) == 2 and stats["entropy_hidden"].between(0, 1).all()
    rescaled = gauge.rescale_stream(tiny_vit(), 4.0, scale_eps=True)
    gauged = stream.model_statistics(rescaled, images[0])
    torch.testing.assert_close(torch.tensor(gauged["r_embedding"].values),
                               torch.tensor(4 * stats["r_embedding"].values), rtol=1e-4, atol=0)
    torch.testing.assert_close(torch.tensor(gauged["entropy_hidden"].values),  # LN1's output
                               torch.tensor(stats["entropy_hidden"].values), rtol=1e-4, atol=0)


def test_beside_fig2_puts_the_paper_first():
    ranked = ranked_rows({1.0: FIG2_PLASTICITY})
    wide = stream.beside_fig2(ranked)
    assert list(wide.index) == list(PLASTICITY_ORDER)
    assert list(wide.columns) == ["paper (Fig. 2)", "hidden, c = 1"]
    assert wide.loc["MHA", "paper (Fig. 2)"] == 7.5


def test_the_plugin_is_named_a_plugin_and_is_below_the_per_token_bound(images):
    """Stream statistics as tables and figures show them: max|gamma| / mean sigma is named
    Prop. 1's plug-in, never a bound (``SHOWN``, ``STATISTICS``), and it is at most the
    per-token bound at the smallest sigma."""
    from vitplast.measure import bounds
    from vitplast.measure.rates import component_inputs

    model = tiny_vit()
    stats = stream.model_statistics(model, images[0]).assign(checkpoint="final", epoch=1.0)
    table = stream.by_checkpoint(stats)
    assert "ln1_plugin" in table and not any("bound" in c for c in table.columns)
    names = set(stream.long_statistics(stats)["statistic"])
    plugin = stream.STATISTICS["ln1_bound"][0]
    assert "not a bound" in plugin and plugin in names
    assert not any("bound" in n for n in names - {plugin})
    assert not any("bound" in label for label in stream.STATISTIC_LABELS.values())
    hidden = component_inputs(model.eval(), images[0], "hidden")
    for layer, block in enumerate(model.blocks):
        sigma = bounds.token_sigma(hidden[(layer, "LN1")], block.norm1.eps)
        bound = block.norm1.weight.abs().max().item() / sigma.min().item()
        value = block.norm1.weight.abs().max().item() / sigma.mean().item()
        assert stats.loc[layer, "ln1_bound"] == pytest.approx(value, rel=1e-5)
        assert value <= bound  # the plug-in is at most the bound, and no bound itself
