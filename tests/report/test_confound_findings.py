"""Notebook 05's findings (``vitplast.report.confound_findings``, read as
``confound_findings.confounds``): task-level paired tests with their counts, Holm within the family,
declared primaries leading, and a per-layer row left descriptive where plasticity is monotone in
depth."""

import numpy as np
import pandas as pd
import pytest
from helpers import acc_table, tiny_vit
from scipy import stats

from vitplast.experiments import confound_variants, studies
from vitplast.report import confound_findings, confound_tables
from vitplast.report.confound_tables import ConfoundTables
from vitplast.stats import verdicts


def _fields(**renamed) -> pd.DataFrame:
    """The fields of every variant of a 6-block ViT (``confound_variants.catalogue``), some
    renamed."""
    table = confound_variants.all_variants(tiny_vit(depth=6), {"LN1": 2.0})
    return confound_variants.catalogue(table).rename(index=renamed)


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
    layers["partial"] = [confound_tables.partial_correlation(*r) for r in layers[
        ["spearman", "plasticity_depth", "spearman_depth"]].to_numpy()]
    grads = pd.DataFrame(columns=["task", "config", "kind", "grad_norm"])
    t = ConfoundTables(acc=acc, counts=counts, corr=layers, grads=grads, fields=_fields())
    table = confound_findings.confounds(t).set_index("claim")
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
                    "partial on the block index [hidden]"]
    assert rho["n"] == 3 and rho["measured"] == pytest.approx(layers["partial"].mean())
    assert rho["counts"] == "256 per block"  # one count over the blocks: the design's point
    depth = table.loc["one block at a time, mean over components: Spearman(earlier block, test "
                      "accuracy) over the blocks"]
    assert depth["n"] == 3 and depth["measured"] == pytest.approx(0.6)
    assert table.loc["MHA - LN1 under AdamW", "n"] == 0  # no runs yet: stated, not dropped
    ps = table["p"].dropna()
    assert table.loc[ps.index, "p_holm"].tolist() == pytest.approx(
        list(verdicts.holm(ps.to_numpy())))
    # declared primaries: the MHA - LN1 contrast leads as one, and is not repeated
    declared = confound_findings.confounds(t, primaries=studies.get("confounds").primaries)
    p2 = declared.set_index("claim").loc["MHA at LN1's count (sparse) - LN1, test accuracy"]
    assert p2["family"] == "primary" and p2["measured"] == 5.0 and p2["level"] == 0.025
    assert "MHA - LN1 at LN1's count (sparse MHA)" not in set(declared["claim"])
    assert not (declared["family"] == "sensitivity").any()  # no embedding rows: none beside
    sign = declared.set_index("claim").loc[
        "sign of (MHA at LN1's count (sparse) - LN1, test accuracy) against the paper's gap at "
        "full counts"]
    assert sign["verdict"] == "the same sign as the paper's gap at full counts"


def _corr(partial: dict) -> pd.DataFrame:
    """``layer_correlations`` rows: per protocol, three tasks of MHA with these partial rho."""
    return pd.DataFrame([dict(protocol=p, task=f"t{i}", component="MHA", spearman=v,
                              spearman_depth=0.5, plasticity_depth=0.2, partial=v, n_blocks=6)
                         for p, values in partial.items() for i, v in enumerate(values)])


def test_the_other_protocol_stands_beside_the_declared_one_as_sensitivity_rows():
    """The declared protocol (hidden) feeds the primary; the embedding protocol's rows are the
    same statistics in the "sensitivity" family (own Holm), and changing them moves no
    primary; the matched-count primaries' sign against the paper's is stated."""
    acc = acc_table(**{"MHA sparse": [70.0, 70, 70, 70, 70], "LN1": [72.0, 71, 73, 72, 71],
                       "FC1 sparse": [70.0] * 5, "FC2 sparse": [70.0] * 5, "LN2": [71.0] * 5})
    grads = pd.DataFrame(columns=["task", "config", "kind", "grad_norm"])
    primaries = studies.get("confounds").primaries
    tables = {}
    for sign in (1, -1):
        corr = _corr(dict(hidden=[0.5, 0.6, 0.7], embedding=[sign * 0.8, sign * 0.9, sign]))
        t = ConfoundTables(acc=acc, counts={}, corr=corr, grads=grads, fields=_fields())
        tables[sign] = confound_findings.confounds(t, primaries=primaries).set_index("claim")
    up, down = tables[1], tables[-1]
    primary = up[up["family"] == "primary"]
    assert primary.drop(columns="fragile").equals(
        down[down["family"] == "primary"].drop(columns="fragile"))
    assert primary.filter(like="partial on the block index", axis=0)["measured"].iloc[0] == \
        pytest.approx(0.6)
    sens = up[up["family"] == "sensitivity"]
    assert sorted(sens.index) == [
        "MHA of one block: Spearman(plasticity, test accuracy) over the blocks, partial on the "
        "block index [embedding]", "one block at a time, mean over components: Spearman("
        "plasticity, test accuracy) over the blocks, partial on the block index [embedding]"]
    assert sens["measured"].tolist() == pytest.approx([0.9, 0.9])
    assert sens["p_holm"].tolist() == pytest.approx(list(verdicts.holm(sens["p"].to_numpy())))
    assert down.loc[sens.index, "measured"].tolist() == pytest.approx([-0.9, -0.9])
    reversed_ = up.filter(like="against the paper's gap at full counts", axis=0)
    assert reversed_["verdict"].tolist() == [
        "reversed: the other sign from the paper's gap at full counts"] * 2
    assert reversed_["paper"].str.startswith("not studied at matched counts").all()


def test_the_rescale_check_reads_as_a_result_of_objection_3():
    check = pd.DataFrame(dict(component=["LN1", "LN2"], c=[1.63, 1.55], ratio=[1.63, 1.55],
                              max_output_change_preserved=[2e-6, 1e-6],
                              max_output_change_raw=[4.3, 2.4]))
    rows = confound_findings.rescale_check(check).set_index("claim")
    assert rows["verdict"].tolist() == ["holds (exact check)"] * 2
    assert rows["paper"].str.startswith("not in the paper").all()
    bad = confound_findings.rescale_check(
        check.assign(ratio=[1.63, 1.0], max_output_change_raw=0.0))
    assert bad["verdict"].tolist() == ["fails (exact check)"] * 2


def test_monotone_plasticity_leaves_the_per_layer_row_descriptive():
    layers = pd.DataFrame(dict(task=["t0", "t1", "t2"], component="LN1", spearman=0.9,
                               spearman_depth=0.5, plasticity_depth=1.0, partial=np.nan,
                               n_blocks=6))
    t = ConfoundTables(acc=acc_table(LN1=[70.0, 71, 72, 73, 74]), counts={}, corr=layers,
                       grads=pd.DataFrame(columns=["task", "config", "kind", "grad_norm"]),
                       fields=_fields())
    row = confound_findings.confounds(t).set_index("claim").filter(like="LN1 of one block", axis=0)
    assert row["verdict"].iloc[0] == ("plasticity is monotone in depth on all 3 tasks: it cannot "
                                      "be told from depth, so there is nothing to test")
    from vitplast.report import sentences  # an observation: no "n = 0", no "untested"

    said = sentences.text(row.reset_index())
    assert "n = 0" not in said and "untested" not in said and said.endswith("nothing to test.")


def test_findings_find_their_variants_by_fields_not_names():
    """Renamed variants are still the ones compared: sparse MHA under any name is the matched
    MHA, a plain configuration under AdamW is the one with optimizer adamw, a preserved rescale
    is compared with the control of its component and c; a name alone selects nothing."""
    fields = _fields(**{"MHA sparse": "attention at LN1's count",
                        "LN1 lr/c^2 (c=2)": "the LN1 control"}).assign(optimizer="sgd")
    adamw = _fields().loc[["MHA", "LN1"]].rename(index=lambda n: f"{n}, AdamW")
    fields = pd.concat([fields, adamw.assign(optimizer="adamw")])
    acc = acc_table(**{"attention at LN1's count": [80.0, 74, 86], "LN1": [75.0, 70, 80],
                       "MHA, AdamW": [70.0, 71, 72], "LN1, AdamW": [60.0, 61, 62],
                       "LN1 x 2 (preserved)": [75.0, 70, 81], "the LN1 control": [75.0, 70, 80],
                       "MHA sparse": [0.0, 0, 0], "MHA (AdamW)": [0.0, 0, 0]})
    t = ConfoundTables(acc=acc, counts={"attention at LN1's count": 1536, "LN1": 1536},
                       fields=fields, corr=pd.DataFrame(columns=[
                           "task", "component", "partial", "plasticity_depth"]),
                       grads=pd.DataFrame(columns=["task", "config", "kind", "grad_norm"]))
    table = confound_findings.confounds(t).set_index("claim")
    sparse = table.loc["MHA - LN1 at LN1's count (sparse MHA)"]
    assert (sparse["n"], sparse["measured"], sparse["counts"]) == (3, 5.0, "1,536 vs 1,536")
    adam = table.loc["MHA - LN1 under AdamW"]
    assert (adam["n"], adam["measured"]) == (3, 10.0)
    control = table.loc["LN1 x 2 (preserved) - its lr/c^2 control, gradient clipping on"]
    assert control["n"] == 3 and control["measured"] == pytest.approx(1 / 3)
    assert table.loc["MHA - LN1 finetuned from the random init checkpoint", "n"] == 0


def test_the_read_cells_words_follow_the_matched_count_numbers():
    """Section 2's Read cell (``sentences.read`` of the primary and its sign row): MHA sparse
    5 points above LN1 on every task reads positive and the paper's sign; 5 below reads
    negative and reversed."""
    from vitplast.report import sentences

    claims = ("MHA at LN1's count (sparse) - LN1, test accuracy", "sign of (MHA")
    words = {}
    for sign in (1, -1):
        base = np.array([75.0, 70, 80, 85, 60])
        acc = acc_table(**{"MHA sparse": base + sign * np.array([5.0, 4, 6, 5, 5]), "LN1": base})
        t = ConfoundTables(acc=acc, counts={}, corr=_corr(dict(hidden=[0.1, 0.2, 0.3])),
                           fields=_fields(),
                           grads=pd.DataFrame(columns=["task", "config", "kind", "grad_norm"]))
        table = confound_findings.confounds(t, primaries=studies.get("confounds").primaries)
        words[sign] = sentences.text(table, *claims)
    # the matched-count primary cites no claim (Table 1 compares full counts only): it reads as
    # a result; its sign beside the paper's full-count gap is the descriptive row's
    assert words[1].startswith("- MHA at LN1's count (sparse) - LN1, test accuracy: Resolved "
                               "(the paper makes no claim on it). MHA sparse came out above LN1 "
                               "on 5 of 5 tasks (mean over all 5: +5 points)")
    assert "the same sign as the paper's gap" in words[1]
    assert "LN1 came out above MHA sparse on 5 of 5 tasks (mean over all 5: -5 points)" in words[-1]
    assert "Resolved (the paper makes no claim on it)" in words[-1]
    assert "reversed: the other sign" in words[-1]


def test_the_block_rows_say_which_tasks_and_components_they_leave_out():
    """05: the FC1 row dropped 2 tasks as monotone in depth without saying so; the third
    primary's "mean over components" was MHA alone on 2 of 3 tasks."""
    from vitplast.report import sentences

    layers = pd.DataFrame(dict(
        task=["t0", "t1", "t2"] * 3, component=["LN1"] * 3 + ["MHA"] * 3 + ["FC1"] * 3,
        spearman=0.5, spearman_depth=0.5,
        plasticity_depth=[1.0] * 3 + [0.5] * 3 + [0.5, 1.0, 1.0],
        partial=[np.nan] * 3 + [0.2, 0.4, 0.6] + [0.1, np.nan, np.nan], n_blocks=6))
    t = ConfoundTables(acc=acc_table(LN1=[70.0, 71, 72]), counts={}, corr=layers,
                       grads=pd.DataFrame(columns=["task", "config", "kind", "grad_norm"]),
                       fields=_fields())
    table = confound_findings.confounds(t).set_index("claim")
    mean_of = table.loc["components the block mean averages, per task [hidden]"]
    assert mean_of["measured"] == "t0: FC1, MHA; t1: MHA; t2: MHA"
    assert mean_of["verdict"].startswith("the 'mean over components' is MHA alone on 2 of 3")
    fc1 = [c for c in table.index if c.startswith("FC1 of one block") and "[hidden]" in c]
    said = sentences.text(table.reset_index(), fc1[0])
    assert "2 of 3 tasks left out: plasticity (2) or accuracy (0) monotone in depth" in said
