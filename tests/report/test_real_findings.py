"""The real model's findings rows on synthetic tables: verdicts follow the numbers."""

import numpy as np
import pandas as pd

from vitplast import paper
from vitplast.experiments.study_specs import REAL_PRIMARIES
from vitplast.report import real_findings
from vitplast.stats import verdicts

ORDER = list(paper.PLASTICITY_ORDER)


def layers_with(values: dict, sources=("photos", "fmnist")) -> pd.DataFrame:
    rows = []
    for source in sources:
        for protocol in ("hidden", "embedding"):
            for layer in range(3):
                for c, v in values.items():
                    rows.append(dict(source=source, protocol=protocol, layer=layer,
                                     component=c, plasticity=v, relative_plasticity=1 / v,
                                     lipschitz_upper=2 * v, bound_holds=True))
    return pd.DataFrame(rows)


STREAM = pd.DataFrame(dict(source=["photos", "fmnist"], layer=[0, 0], r_embedding=[2.0, 3.0],
                           sigma_ln1=[0.1, 0.2]))


def test_the_paper_order_is_the_same_and_its_reverse_differs():
    # One model's blocks are no independent units: no test, so "same as", never "agrees"
    same = real_findings.measurement_rows(layers_with(paper.FIG2_PLASTICITY), STREAM)
    assert same[0]["measured"] == 1.0 and same[0]["verdict"].startswith("same as the paper")
    assert same[2]["measured"] == 5 and same[2]["verdict"] == "same as the paper"
    reverse = {c: 1 / v for c, v in paper.FIG2_PLASTICITY.items()}
    rows = real_findings.measurement_rows(layers_with(reverse), STREAM)
    assert rows[0]["measured"] == -1.0 and rows[0]["verdict"].startswith("differs from")
    assert not any("agrees" in r["verdict"] for r in rows)
    assert "LN1 > LN2 > FC2 > FC1 > MHA" in rows[0]["verdict"]
    assert rows[2]["measured"] == 0 and "MHA" in rows[2]["verdict"]
    assert rows[5]["claim"].endswith("[fmnist, embedding]") and rows[5]["measured"] == -1.0


def test_bound_token_and_relative_rows_read_the_tables():
    rows = real_findings.measurement_rows(layers_with(paper.FIG2_PLASTICITY), STREAM)
    assert rows[3]["measured"] == 2 * 2 * 3 * 5 and rows[3]["verdict"].startswith("holds")
    assert rows[6]["measured"] == 1.0  # bounds twice plasticity: the same order
    assert rows[4]["measured"] == 2.0 and rows[4]["verdict"].startswith(
        "ViT-B's tokens are 9.70 times larger than this model's")
    assert "sigma of 0.1 " in rows[4]["verdict"]
    assert rows[7]["measured"] == -1.0  # relative = 1 / absolute: the reverse order
    assert len(rows) == 12
    assert rows[8]["claim"].endswith("[fmnist, hidden]") and rows[9]["claim"].endswith(
        "[photos, hidden]")
    for hidden, embedding in ((rows[6], rows[10]), (rows[7], rows[11])):  # both protocols
        assert hidden["claim"].endswith("[photos, hidden]")
        assert embedding["claim"] == hidden["claim"].replace("hidden]", "embedding]").replace(
            "(gauge-invariant)", "(not gauge-invariant under it)")
    assert rows[11]["measured"] == -1.0
    verdicts.table(rows)  # a table the notebook renders


def test_orders_beside_puts_the_paper_first():
    t = real_findings.orders_beside({"m": layers_with(paper.FIG2_PLASTICITY)})
    assert t.iloc[0]["model"] == "ViT-B (paper)"
    assert (t["rho_fig2"] == 1.0).all() and len(t) == 1 + 4


def test_task_statistics_are_per_task_spearman_of_gain_and_plasticity():
    acc = pd.DataFrame({"head": [50.0, 60.0], "MHA": [55, 61], "FC1": [54, 62], "FC2": [53, 63],
                        "LN2": [52, 64], "LN1": [51, 65]}, index=["t1", "t2"])
    plast = pd.DataFrame([dict(task=t, protocol=p, component=c, plasticity=v,
                               relative_plasticity=-v)
                          for t in ("t1", "t2") for p in ("embedding", "hidden")
                          for c, v in paper.FIG2_PLASTICITY.items()])
    s = real_findings.task_statistics(acc, plast)
    np.testing.assert_allclose(s["spearman(plasticity, gain)"].loc[["t1", "t2"]], [1.0, -1.0])
    np.testing.assert_allclose(s["spearman(relative plasticity, gain)"], [-1.0, 1.0])
    rows = real_findings.study_rows(REAL_PRIMARIES, acc, plast)
    assert [r["family"] for r in rows] == ["primary"] * 3 + ["sensitivity"] * 2 + [
        "exploratory"]
    assert rows[2]["measured"] == np.mean([55 - 51, 61 - 65])  # MHA - LN1, per task
    assert "hidden protocol" in rows[3]["claim"] and rows[3]["measured"] == 0.0
    assert rows[4]["claim"].endswith("(plasticity: hidden protocol)")
    assert rows[5]["claim"].startswith("MHA - LN1 (the real model's most - least plastic, "
                                       "measured: embedding and hidden protocols)")
    least_first = plast.assign(plasticity=1 / plast["plasticity"])  # LN1 most, MHA least
    rows = real_findings.study_rows(REAL_PRIMARIES, acc, least_first)
    assert rows[5]["claim"].startswith("LN1 - MHA") and rows[5]["measured"] == -rows[2]["measured"]


def test_the_most_least_plastic_pair_is_measured_under_each_protocol():
    # The protocols name different pairs: one exploratory row each, naming its protocol
    acc = pd.DataFrame({c: [50.0 + i, 60.0 - i, 55.0 + i * i]
                        for i, c in enumerate(["head", *ORDER])}, index=["t1", "t2", "t3"])
    plast = pd.DataFrame([dict(task=t, protocol=p, component=c, relative_plasticity=-v,
                               plasticity=v if p == "embedding" else 1 / v)
                          for t in acc.index for p in ("embedding", "hidden")
                          for c, v in paper.FIG2_PLASTICITY.items()])
    rows = real_findings.study_rows(REAL_PRIMARIES, acc, plast)
    explored = [r["claim"] for r in rows if r["family"] == "exploratory"]
    assert explored == [
        "MHA - LN1 (the real model's most - least plastic, measured: embedding protocol), "
        "test accuracy",
        "LN1 - MHA (the real model's most - least plastic, measured: hidden protocol), "
        "test accuracy"]

