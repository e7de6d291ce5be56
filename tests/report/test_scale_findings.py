"""Notebook 02b's rows on the residual stream's scale: the orders under the gauge and with the
embedding rescaled, the gauge's rate factors, and finetuning a gauged network
(``vitplast.report.scale_findings``)."""

import pandas as pd
import pytest
from helpers import ranked_rows

from vitplast.measure.gauge import RATE_FACTORS
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER
from vitplast.report import scale_findings
from vitplast.stats import verdicts


def test_ranking_findings_state_each_order_and_check_the_factors():
    paper = dict(FIG2_PLASTICITY)
    reverse = {c: 1 / v for c, v in paper.items()}
    c8 = {c: v * RATE_FACTORS["hidden"][c](8.0) for c, v in reverse.items()}  # as derived
    gauged = ranked_rows({1.0: reverse, 8.0: c8})
    scaled = (ranked_rows({1.0: reverse, 8.0: paper}, protocol="embedding")
              .rename(columns={"c": "scale"}))
    table = verdicts.table(scale_findings.ranking_findings(gauged, scaled))
    verdict = table.set_index("claim")["verdict"]
    assert verdict["order at gauge c = 1 [hidden]"] == "differs from the paper"
    assert table.set_index("claim").loc["order at gauge c = 1 [hidden]", "measured"] == \
        " > ".join(reversed(PLASTICITY_ORDER))
    assert verdict["rate factors of the gauge (LN / c, FC1 x 1, FC2 x c, MHA x c): largest "
                   "relative deviation [hidden]"] == "as derived"
    assert verdict["order with the embedding times 8 [embedding]"] == "the paper's order"
    near = verdicts.table(scale_findings.ranking_findings(None, scaled, token_ratio=5.0))
    assert list(near["verdict"]) == ["not the paper's order", "the paper's order; s = 8 is the "
                                     "scale nearest ViT-B's tokens (x5.00)",
                                     "at s = 8, the scale nearest ViT-B's tokens (x5.00)"]
    early = verdicts.table(scale_findings.ranking_findings(gauged, tested=False))
    assert (early["family"] == "descriptive").all() and len(early) == len(table) - 2 - 2
    rho = table.set_index("claim").loc["Spearman(measured, Fig. 2) at gauge c = 1 [hidden]"]
    assert rho["measured"] == pytest.approx(-1.0) and rho["n"] == 3
    orders = [c for c in table["claim"] if c.startswith("order at gauge")]
    assert orders == [c for c in scale_findings.gauge_order_claims((8.0, 4.0, 1.0))
                      if c.endswith("[hidden]")]  # the rows 02b shows and the synthesis reads
    merged = scale_findings.findings_table(
        table.iloc[:2], scale_findings.ranking_findings(gauged, scaled))
    assert len(merged) == 2 + len(table)


def test_invariance_findings_read_same_and_different_trajectories():
    inv = pd.DataFrame([dict(config="LN1", vs_original=2e-5, max_grad_norm=3.0),
                        dict(config="MHA", vs_original=0.07, max_grad_norm=4.9,
                             vs_lr_scaled_clip=0.02, vs_lr_scaled_noclip=8e-4)])
    table = verdicts.table(scale_findings.invariance_findings(inv)).set_index("claim")["verdict"]
    same, different = "same trajectory (within LayerNorm's eps)", "different trajectory"
    assert table.tolist() == [same, different, different, same]
    assert table.index[3] == ("MHA-only finetuning, gauged vs the LR / c^2 run, no clip: largest "
                              "|loss difference|")


def test_the_scales_where_the_papers_order_appears_name_the_one_nearest_vit_b():
    """02b section 2: the paper's order at s = 8 only, not at s = 4, the scale nearest ViT-B's
    tokens (x4.67)."""
    import pandas as pd

    from vitplast.paper import PLASTICITY_ORDER
    from vitplast.report import scale_findings

    good = {c: 5.0 - i for i, c in enumerate(PLASTICITY_ORDER)}  # the paper's order
    bad = {c: 1.0 + i for i, c in enumerate(PLASTICITY_ORDER)}  # reversed
    scaled = pd.DataFrame([dict(protocol="embedding", task=t, scale=s, component=c,
                                plasticity=(good if s == 8 else bad)[c])
                           for t in ("a", "b") for s in (1.0, 4.0, 8.0) for c in PLASTICITY_ORDER])
    rows = scale_findings.ranking_findings(None, scaled, token_ratio=4.67)
    row = next(r for r in rows if r["claim"].startswith("embedding scales s at which"))
    assert row["measured"] == "8" and row["verdict"] == (
        "not at s = 4, the scale nearest ViT-B's tokens (x4.67); the paper's order at s = 8 only")


def test_recipe_findings_state_each_recipe_s_order_and_its_fig2_correlation():
    """Per protocol one row: both orders (the paper's order gives Spearman +1, its reverse
    -1)."""
    paper = ["MHA", "FC1", "FC2", "LN2", "LN1"]
    rows = [dict(task=t, protocol="hidden", recipe=r, component=c, plasticity=v)
            for t in ("a", "b") for r, values in (("shipped", [5, 4, 3, 2, 1]),
                                                  ("other", [1, 2, 3, 4, 5]))
            for c, v in zip(paper, values)]
    (row,) = scale_findings.recipe_findings(pd.DataFrame(rows))
    assert row["measured"] == ("shipped: MHA > FC1 > FC2 > LN2 > LN1; "
                               "other: LN1 > LN2 > FC2 > FC1 > MHA")
    assert row["verdict"].endswith("shipped +1.00, other -1.00") and row["n"] == 2
