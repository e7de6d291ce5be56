"""Plasticity findings (``vitplast.report.plasticity_findings``): the layer summaries, the
ranking's rows, the token scale's row and the task as the unit of a correlation. The verdict
machinery: ``test_verdicts.py``; each notebook family's builders: ``test_bound_findings``,
``test_finetuning_findings``, ``test_confound_findings``, ``test_teaching.py``."""

import numpy as np
import pandas as pd
import pytest

from vitplast.measure import plasticity
from vitplast.report import finetuning_tables, plasticity_findings


def test_within_task_correlation_never_pools_tasks():
    """Two tasks whose components order perfectly within each (rho = +1 each) but whose
    pooled points anti-correlate: within tasks gives +1."""
    rows = []
    for task, offset in (("a", 0.0), ("b", 10.0)):
        for i, comp in enumerate(["MHA", "FC1", "FC2", "LN2", "LN1"]):
            rows.append(dict(protocol="hidden", task=task, component=comp,
                             plasticity=5 - i + offset, gain_pp=5 - i - 3 * offset))
    corr = finetuning_tables.within_task_correlation(pd.DataFrame(rows))
    assert corr.drop_duplicates("task")["spearman"].tolist() == pytest.approx([1.0, 1.0])
    assert corr.set_index(["task", "component"]).loc[("a", "MHA"), "rank_x"] == 1




def _per_layer(values: dict, layer0: dict | None = None, tasks=8, noise=0.02, seed=0):
    """Per (task, protocol, layer, component) plasticity: ``values`` in layers 1-3 and
    ``layer0`` (default ``values``) in layer 0, with per-task noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return pd.DataFrame([dict(task=f"t{t}", protocol="hidden", layer=layer, component=c,
                              plasticity=((layer0 or values) if layer == 0 else values)[c]
                              * (1 + noise * rng.standard_normal()))
                         for t in range(tasks) for layer in range(4) for c in values])


def test_layer_summaries_say_which_neighbours_are_noise():
    """Layer 0 puts MHA last in the mean; the median and the mean without layer 0 put it
    first. Two components 0.1% apart are noise (their CI over tasks holds 0); the rows say
    both, and a change of the data changes the words."""
    values = dict(MHA=2.2, FC1=2.0, FC2=1.0, LN2=0.500, LN1=0.4995)
    rows = pd.DataFrame(plasticity_findings.layer_summaries(_per_layer(
        values, layer0=dict(values, MHA=0.01)))).set_index("claim")
    assert (rows["family"] == "descriptive").all()
    mean = rows.loc["order by the layer mean [hidden]"]
    assert mean["measured"].startswith("FC1 ") and "> MHA" in mean["measured"]
    median = rows.loc["order by the layer median [hidden]", "verdict"]
    assert "; neighbours within noise (95% CI over tasks includes 0): LN" in median
    assert ("LN2 - LN1" in median or "LN1 - LN2" in median) and "FC1 - FC2" not in median
    assert rows.loc["order by the layer median [hidden]", "measured"].startswith("MHA 2.")
    rows = pd.DataFrame(plasticity_findings.layer_summaries(_per_layer(
        dict(values, LN1=0.3)))).set_index("claim")
    assert rows.loc["order by the layer median [hidden]", "verdict"] == (
        "the paper's order; every neighbour separated (95% CI over tasks excludes 0)")


def test_descriptive_additions_leave_the_tested_rows_holm_p_unchanged():
    """The Read cells of notebook 02 read a table built before sections 6-8: the rows added
    later are descriptive, so every tested row keeps its Holm p."""
    import numpy as np

    rng = np.random.default_rng(0)
    ranked = pd.DataFrame([dict(task=f"t{t}", protocol=p, component=c,
                                plasticity=v * (1 + 0.3 * rng.standard_normal()))
                           for p in ("embedding", "hidden") for t in range(6)
                           for c, v in dict(MHA=3, FC1=2, FC2=1, LN2=0.5, LN1=0.4).items()])
    early = plasticity_findings.plasticity_ranking(ranked)
    full = plasticity_findings.plasticity_ranking(
        ranked, per_layer=_per_layer(dict(MHA=3, FC1=2, FC2=1, LN2=0.5, LN1=0.4)),
        precision=pd.DataFrame([dict(protocol="hidden", pairs=256, median_relative_ci95=0.01,
                                     max_relative_ci95=0.2)]),
        token=dict(r=4.0, paper_r=19.4, ratio=4.85, n_images=256))
    tested = early[early["family"] != "descriptive"].set_index("claim")["p_holm"]
    assert len(full) > len(early) and len(tested) > 0
    pd.testing.assert_series_equal(full.set_index("claim").loc[tested.index, "p_holm"], tested)
    prec = full.set_index("claim").loc["95% CI half-width of a per-layer estimate, relative to "
                                       "it, median over (task, layer, component) [hidden]"]
    assert prec["verdict"] == "largest 20.0%: imprecise somewhere (> 5%)"


def test_token_findings_says_how_many_times_larger():
    row = plasticity_findings.token_findings(dict(r=4.0, paper_r=19.4, ratio=4.85, n_images=256))
    assert row["measured"] == 4.0 and row["n"] == 256
    assert row["verdict"] == "ViT-B's tokens are 4.85 times larger than this model's"
    row = plasticity_findings.token_findings(dict(r=40.0, paper_r=19.4, ratio=0.485, n_images=8))
    assert row["verdict"] == "this model's tokens are 2.06 times larger than ViT-B's"
    row = plasticity_findings.token_findings(dict(r=19.4, paper_r=19.4, ratio=1.0, n_images=8))
    assert row["verdict"] == "this model's tokens have ViT-B's scale"


def test_the_spread_rows_name_the_neighbours_within_their_spreads_per_protocol():
    """``plasticity.spread``: 5/50/95% per-pair rates per component in the medians' order; one
    row per protocol counts the neighbours whose median gap lies below both their spreads."""
    rng = np.random.default_rng(0)
    rows = [dict(protocol=p, component=c, rate=m * v)
            for p, gaps in (("embedding", (10.0, 1.05)), ("hidden", (1.1, 1.05)))
            for c, m in zip("ABC", (1.0, gaps[0], gaps[0] * gaps[1]))
            for v in rng.uniform(0.5, 1.5, 400)]
    table = plasticity.spread(pd.DataFrame(rows))
    assert list(table.loc["embedding"].index) == ["A", "B", "C"]
    assert table.loc[("embedding", "B"), "median / the next lower"] == pytest.approx(10, rel=0.15)
    assert table["95% / 5%"].max() < 3
    embedding, hidden = plasticity_findings.spread_rows(table)
    assert embedding["claim"].endswith("[embedding]") and hidden["claim"].endswith("[hidden]")
    assert (embedding["measured"], embedding["n"], hidden["measured"], hidden["n"]) == (1, 2, 2, 2)
    assert embedding["verdict"].startswith("within the spread: C/B 1.0")
    assert "apart: B/A 9." in embedding["verdict"] and "apart" not in hidden["verdict"]
