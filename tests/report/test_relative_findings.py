"""Notebook 02b's rows on relative plasticity (``vitplast.report.relative_findings``) on
synthetic tables: what the gauge moved and what it left within ``relative.UNCHANGED``, each
network's order beside the paper's, and each network against the trained one."""

import pandas as pd

from vitplast.measure import gauge
from vitplast.measure.components import COMPONENTS
from vitplast.report import relative_findings
from vitplast.stats import verdicts


def _check(rel_hidden: float, mha_embedding: float):
    rows = []
    for protocol in ("hidden", "embedding"):
        for comp in COMPONENTS:
            factor = gauge.RATE_FACTORS[protocol][comp]
            rows.append(dict(protocol=protocol, component=comp, c=8.0,
                             relative_difference=(rel_hidden if protocol == "hidden" else
                                                  mha_embedding if comp == "MHA" else 1e-5),
                             plasticity_difference=0.0,
                             plasticity_ratio=factor(8.0) if factor else 30.0))
    return pd.DataFrame(rows)


def test_gauge_findings_say_what_moved_and_change_with_the_data():

    rows = verdicts.table(relative_findings.gauge_findings(_check(2e-5, 0.9))).set_index("claim")
    hidden = rows.loc["relative plasticity, gauge c = 8 vs c = 1: largest relative difference "
                      "over layers and components [hidden]"]
    assert hidden["verdict"] == "unchanged within 0.001 for every component"
    emb = rows.loc["relative plasticity, gauge c = 8 vs c = 1: largest relative difference over "
                   "layers and components [embedding]"]
    assert emb["measured"] == 0.9 and emb["verdict"].startswith("moved: MHA 0.9; unchanged")
    ratio = rows.loc["plasticity, gauge c = 8 over c = 1, median over layers [hidden]"]
    assert ratio["measured"].startswith("LN1 x0.125, MHA x8") and ratio["verdict"].startswith(
        "as derived")
    embedding = rows.loc["plasticity, gauge c = 8 over c = 1, median over layers [embedding]"]
    assert "MHA x30 (no factor derived)" in embedding["measured"]  # never read "as derived"
    assert embedding["verdict"] == ("as derived for LN1, LN2, FC1, FC2 (largest deviation 0); "
                                    "MHA: no factor derived, measured only")
    moved = verdicts.table(relative_findings.gauge_findings(_check(0.05, 0.9))).set_index("claim")
    assert moved["verdict"].iloc[0].startswith("moved: LN1 0.05")


def test_a_ratio_past_as_derived_reads_not_as_derived():
    check = _check(2e-5, 0.9)
    fc2 = (check["protocol"] == "hidden") & (check["component"] == "FC2")
    for off, word in ((0.9 * verdicts.AS_DERIVED, "as derived"),
                      (1.5 * verdicts.AS_DERIVED, "not as derived")):
        c = check.assign(plasticity_ratio=check["plasticity_ratio"].where(~fc2, 8.0 * (1 + off)))
        hidden = relative_findings.gauge_findings(c)[1]
        assert hidden["verdict"].startswith(word + " for"), hidden["verdict"]


def test_ranking_findings_compare_each_models_order_with_the_papers():

    paper = dict(MHA=5.0, FC1=4.0, FC2=3.0, LN2=2.0, LN1=1.0)
    df = pd.DataFrame([dict(model=m, task=t, protocol="hidden", layer=0, component=c,
                            relative_plasticity=(v if m == "a" else 1 / v))
                       for m in ("a", "b") for t in ("t1", "t2", "t3") for c, v in paper.items()])
    rows = verdicts.table(relative_findings.ranking_findings(df)).set_index("claim")
    assert rows.loc["order of relative plasticity, a [hidden]", "verdict"] == (
        "the paper's order of plasticity")
    b = rows.loc["order of relative plasticity, b [hidden]"]
    assert b["verdict"] == "not the paper's order of plasticity"
    assert b["measured"].startswith("LN1 1 > LN2 0.5") and b["n"] == 3


def test_ranking_findings_compare_random_init_with_the_trained_model():
    """Section 4's question (random init vs trained) is a row: Kendall's tau between the two
    orders, and the components that change place; the same order reads as such."""
    trained = dict(MHA=5.0, FC1=4.0, FC2=3.0, LN2=2.0, LN1=1.0)
    init = dict(trained, MHA=0.5)  # MHA falls from first to last
    df = pd.DataFrame([dict(model=m, task=t, protocol=p, layer=0, component=c,
                            relative_plasticity=vals[c])
                       for m, vals in (("embedded (final)", trained), ("random init", init),
                                       ("no weight decay", trained))
                       for p in ("hidden", "embedding") for t in ("t1", "t2") for c in vals])
    rows = verdicts.table(relative_findings.ranking_findings(df)).set_index("claim")
    moved = rows.loc["order of relative plasticity, random init vs embedded (final) [hidden]"]
    assert moved["measured"] == "Kendall tau 0.20" and moved["n"] == 5
    assert moved["verdict"] == ("another order (place in the trained model -> in this one): "
                                "MHA 1 -> 5, FC1 2 -> 1, FC2 3 -> 2, LN2 4 -> 3, LN1 5 -> 4")
    same = rows.loc["order of relative plasticity, no weight decay vs embedded (final) [embedding]"]
    assert same["measured"] == "Kendall tau 1.00" and same["verdict"] == "the same order"
    tie = df.assign(relative_plasticity=df["relative_plasticity"].where(
        ~((df["model"] == "random init") & (df["component"] == "LN1")), 2.0))  # LN1 = LN2
    tied = verdicts.table(relative_findings.ranking_findings(tie)).set_index("claim").loc[
        "order of relative plasticity, random init vs embedded (final) [hidden]", "verdict"]
    assert tied.endswith("LN1 5 -> 3 (tied)") and "LN2 4 -> 3 (tied)" in tied
