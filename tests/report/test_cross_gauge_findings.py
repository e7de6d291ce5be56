"""The cross-gauge study's findings rows (``vitplast.report.cross_gauge_findings``) on synthetic
tables: what agreeing losses leave apart, and the rows of the per-parameter-LR identity."""

import pandas as pd

from vitplast.report import cross_gauge_findings


def test_agreeing_losses_name_the_pair_with_the_largest_test_gap():
    pairs = pd.DataFrame(dict(task=["a", "b", "c"], config=["LN1", "LN1", "head"],
                              lr=[0.03, 0.01, 1.0], max_loss_diff=[5.5e-5, 2e-4, 0.5],
                              test_diff=[-1.95, 0.5, 9.0]))
    row = cross_gauge_findings.agreeing_losses(pairs)
    assert (row["measured"], row["n"]) == (-1.95, 2)  # the 0.5-apart pair is not counted
    assert row["verdict"].startswith("a / LN1 / LR 0.03: loss histories 5.5e-05 apart, test "
                                     "accuracies 1.95 points apart")
    assert cross_gauge_findings.agreeing_losses(pairs.iloc[2:])["verdict"] == (
        "no pair's loss histories agree")
    # 07: "1.95 points apart" needs the test set's size: on 359 test images, 7 images
    sized = cross_gauge_findings.agreeing_losses(pairs, test_size={"a": 359}.get)
    assert "1.95 points apart (about 7 of its 359 test images): the same loss" in sized["verdict"]


def test_identity_rows_read_the_derived_trajectory_the_clip_and_the_unreachable_lrs():
    ident = pd.DataFrame(dict(task=["a", "a"], config=["MHA", "FC2"], lr=[0.1, 0.3],
                              gauged=["attn.proj", "mlp.fc2"], derived_lr=[0.1 / 64, 0.3 / 64],
                              noclip=[2e-4, 6e-4], clip=[1e-4, 0.05], shared=[0.3, 0.2]))
    same, clip, reach = cross_gauge_findings.identity_findings(ident)
    assert same["measured"] == 6e-4 and same["verdict"].startswith("the same trajectory")
    assert clip["verdict"] == "not the same: the clip acts on the two runs differently"
    assert reach["measured"] == ("MHA on a: attn.proj at 0.0016, the rest at 0.1; FC2 on a: "
                                 "mlp.fc2 at 0.0047, the rest at 0.3")
    assert reach["verdict"].startswith("the gauged parameters train at 1/64 of the rest's LR")
    parted = cross_gauge_findings.identity_findings(ident.assign(noclip=[2e-4, 0.01]))[0]
    assert parted["verdict"].startswith("not the same within 0.001 for FC2 on a at LR 0.3 "
                                        "(0.01): the gauge is exact only up to")
