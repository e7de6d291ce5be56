"""Notebook 05's findings (``vitplast.confound_findings``, read as ``findings.confounds``):
task-level paired tests with their counts, Holm within the family, declared primaries leading,
and a per-layer row left descriptive where plasticity is monotone in depth."""

import numpy as np
import pandas as pd
import pytest
from helpers import acc_table
from scipy import stats

from vitplast import confounds, findings, studies


def test_confound_findings_are_task_level_paired_tests_with_their_counts():
    """MHA sparse beats LN1 by 5, 4, 6, 5, 5 points on five tasks: agrees with the paper after
    Holm; FC1 - FC2 sparse has a single task: never resolved; counts are stated."""
    acc = acc_table(**{"MHA sparse": [80.0, 74, 86, 90, 65], "LN1": [75.0, 70, 80, 85, 60],
                       "FC1 sparse": [80.0, 74, 86, 90, 65], "FC2 sparse": [70.0] + [np.nan] * 4,
                       "MHA": [81.0, 75, 87, 90, 66]})
    counts = {"MHA sparse": 1536, "LN1": 1536, "FC1 sparse": 1536, "FC2 sparse": 1536,
              "MHA": 396288, **{f"LN1 block {k}": 256 for k in range(6)}}
    layers = pd.DataFrame(dict(task=["t0", "t1", "t2"], component="LN1", spearman=[0.9, 0.8, 1.0],
                               spearman_depth=[0.5, 0.6, 0.7], plasticity_depth=[0.2, 0.3, 0.1],
                               n_blocks=6))
    layers["partial"] = [confounds.partial_correlation(*r) for r in layers[
        ["spearman", "plasticity_depth", "spearman_depth"]].to_numpy()]
    grads = pd.DataFrame(columns=["task", "config", "kind", "grad_norm"])
    t = dict(acc=acc, counts=counts, corr=layers, grads=grads)
    table = findings.confounds(t).set_index("claim")
    first = table.loc["MHA - LN1 at LN1's count (sparse MHA)"]
    diffs = np.array([5.0, 4, 6, 5, 5])
    assert first["n"] == 5 and first["measured"] == pytest.approx(diffs.mean())
    assert first["p"] == pytest.approx(stats.ttest_1samp(diffs, 0).pvalue)
    assert first["counts"] == "1,536 vs 1,536" and first["verdict"] == "agrees with the paper"
    same = table.loc["MHA - FC1 at LN1's count (sparse)"]  # identical columns: no difference
    assert same["measured"] == 0 and same["verdict"].startswith("not resolved")
    lone = table.loc["FC1 - FC2 at LN1's count (sparse)"]
    assert lone["n"] == 1 and lone["family"] == "descriptive"  # never in a test family
    rho = table.loc["LN1 of one block: Spearman(plasticity, test accuracy) over the blocks, "
                    "partial on the block index"]
    assert rho["n"] == 3 and rho["measured"] == pytest.approx(layers["partial"].mean())
    assert rho["counts"] == "256 per block"  # one count over the blocks: the design's point
    depth = table.loc["one block at a time, mean over components: Spearman(earlier block, test "
                      "accuracy) over the blocks"]
    assert depth["n"] == 3 and depth["measured"] == pytest.approx(0.6)
    assert table.loc["MHA - LN1 under AdamW", "n"] == 0  # no runs yet: stated, not dropped
    ps = table["p"].dropna()
    assert table.loc[ps.index, "p_holm"].tolist() == pytest.approx(
        list(findings.holm(ps.to_numpy())))
    # declared primaries: the MHA - LN1 contrast leads as one, and is not repeated
    declared = findings.confounds(t, primaries=studies.get("confounds").primaries)
    p2 = declared.set_index("claim").loc["MHA at LN1's count (sparse) - LN1, test accuracy"]
    assert p2["family"] == "primary" and p2["measured"] == 5.0 and p2["level"] == 0.025
    assert "MHA - LN1 at LN1's count (sparse MHA)" not in set(declared["claim"])


def test_monotone_plasticity_leaves_the_per_layer_row_descriptive():
    layers = pd.DataFrame(dict(task=["t0", "t1", "t2"], component="LN1", spearman=0.9,
                               spearman_depth=0.5, plasticity_depth=1.0, partial=np.nan,
                               n_blocks=6))
    t = dict(acc=acc_table(LN1=[70.0, 71, 72, 73, 74]), counts={}, corr=layers,
             grads=pd.DataFrame(columns=["task", "config", "kind", "grad_norm"]))
    row = findings.confounds(t).set_index("claim").filter(like="LN1 of one block", axis=0)
    assert row["verdict"].iloc[0] == "cannot be told from depth (untested)"
