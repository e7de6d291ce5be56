"""What sets the ranking: attention entropy, the per-layer statistics, the ranking tables and
their findings rows (synthetic tables: exact verdicts)."""

import math

import pandas as pd
import pytest
import torch
from helpers import tiny_vit

from vitplast import findings, stream
from vitplast.measure.gauge import RATE_FACTORS
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
    from vitplast import gauge

    model = tiny_vit()
    stats = stream.model_statistics(model, images[0])
    assert list(stats.columns) == ["layer", "r_embedding", "sigma_ln1", "sigma_ln2", "ln1_bound",
                                   "entropy_hidden", "entropy_embedding"]
    assert len(stats) == 2 and stats["entropy_hidden"].between(0, 1).all()
    gauged = stream.model_statistics(gauge.gauge(tiny_vit(), 4.0, scale_eps=True), images[0])
    torch.testing.assert_close(torch.tensor(gauged["r_embedding"].values),
                               torch.tensor(4 * stats["r_embedding"].values), rtol=1e-4, atol=0)
    torch.testing.assert_close(torch.tensor(gauged["entropy_hidden"].values),  # LN1's output
                               torch.tensor(stats["entropy_hidden"].values), rtol=1e-4, atol=0)


def _ranked(values_by_c: dict, protocol: str = "hidden", tasks=("a", "b", "c")) -> pd.DataFrame:
    rows = [dict(task=t, protocol=protocol, component=comp, plasticity=v * (1 + 0.01 * i), c=c)
            for c, values in values_by_c.items() for i, t in enumerate(tasks)
            for comp, v in values.items()]
    return pd.DataFrame(rows)


def test_ranking_findings_state_each_order_and_check_the_factors():
    paper = dict(FIG2_PLASTICITY)
    reverse = {c: 1 / v for c, v in paper.items()}
    c8 = {c: v * RATE_FACTORS["hidden"][c](8.0) for c, v in reverse.items()}  # as derived
    gauged = _ranked({1.0: reverse, 8.0: c8})
    scaled = (_ranked({1.0: reverse, 8.0: paper}, protocol="embedding")
              .rename(columns={"c": "scale"}))
    table = findings.table(stream.ranking_findings(gauged, scaled))
    verdict = table.set_index("claim")["verdict"]
    assert verdict["order at gauge c = 1 [hidden]"] == "differs from the paper (untested)"
    assert table.set_index("claim").loc["order at gauge c = 1 [hidden]", "measured"] == \
        " > ".join(reversed(PLASTICITY_ORDER))
    assert verdict["rate factors of the gauge (LN / c, FC1 x 1, FC2 x c, MHA x c): largest "
                   "relative deviation [hidden]"] == "as derived"
    assert verdict["order with the embedding times 8 [embedding]"] == "the paper's order"
    near = findings.table(stream.ranking_findings(None, scaled, token_ratio=5.0))
    assert list(near["verdict"]) == ["not the paper's order", "the paper's order; s = 8 is the "
                                     "scale nearest ViT-B's tokens (x5.00)"]
    early = findings.table(stream.ranking_findings(gauged, tested=False))
    assert (early["family"] == "descriptive").all() and len(early) == len(table) - 2 - 2
    rho = table.set_index("claim").loc["Spearman(measured, Fig. 2) at gauge c = 1 [hidden]"]
    assert rho["measured"] == pytest.approx(-1.0) and rho["n"] == 3
    merged = stream.findings_table(table.iloc[:2], stream.ranking_findings(gauged, scaled))
    assert len(merged) == 2 + len(table)


def test_beside_fig2_puts_the_paper_first():
    ranked = _ranked({1.0: FIG2_PLASTICITY})
    wide = stream.beside_fig2(ranked)
    assert list(wide.index) == list(PLASTICITY_ORDER)
    assert list(wide.columns) == ["paper (Fig. 2)", "hidden, c = 1"]
    assert wide.loc["MHA", "paper (Fig. 2)"] == 7.5


def test_invariance_findings_read_same_and_different_trajectories():
    inv = pd.DataFrame([dict(config="LN1", vs_original=2e-5, max_grad_norm=3.0),
                        dict(config="MHA", vs_original=0.07, max_grad_norm=4.9,
                             vs_lr_scaled_clip=0.02, vs_lr_scaled_noclip=8e-4)])
    table = findings.table(stream.invariance_findings(inv)).set_index("claim")["verdict"]
    same, different = "same trajectory (within LayerNorm's eps)", "different trajectory"
    assert table.tolist() == [same, different, different, same]
    assert table.index[3] == ("MHA-only finetuning, gauged vs the LR / c^2 run, no clip: largest "
                              "|loss difference|")

