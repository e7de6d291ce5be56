"""Notebook 04's findings (``vitplast.report.finetuning_findings``, read as
``finetuning_findings.finetuning``): tasks, not seeds, are the units; declared primaries lead; a row
whose verdict the other tied LR would flip is flagged fragile."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers import tie_runs

from vitplast.experiments import lr_selection, studies
from vitplast.report import finetuning_findings, finetuning_tables
from vitplast.report.finetuning_tables import FinetuningTables
from vitplast.stats import verdicts

TASKS = [f"t{i}" for i in range(7)]


def _main(acc: dict) -> pd.DataFrame:
    """A main_table-like frame from {config: per-task accuracies}."""
    rows = [dict(task=t, config=c, test_acc_mean=v, lr=0.1) for c, vals in acc.items()
            for t, v in zip(TASKS, vals)]
    return pd.DataFrame(rows)


def _tables(rho: dict) -> tuple[FinetuningTables, pd.Series]:
    """Tables where MHA beats LN1 by 3 points on every task, and the plasticity-gain rho is
    ``rho[protocol]`` on every task (MHA least plastic, highest gain under each)."""
    base = 80 + np.random.default_rng(2).normal(0, 2, 7)
    acc = {"MHA": base + 3, "FC1": base + 2, "FC2": base + 1, "LN2": base + 0.5, "LN1": base,
           "full": base + 3.2, "head": base - 4}
    bands = pd.DataFrame([dict(task=t, config=c, delta=1.0, width=1.0, drop_x3=1.0)
                          for t in TASKS for c in ("MHA", "LN1", "LN2")])
    corr = pd.DataFrame([dict(protocol=p, task=t, component=c, spearman=r + 0.01 * i,
                              rank_x=6 - k, rank_y=k) for p, r in rho.items()
                         for i, t in enumerate(TASKS)
                         for k, c in enumerate(["MHA", "FC1", "FC2", "LN2", "LN1"], 1)])
    grads = pd.DataFrame([dict(task=t, config=c, kind=k, grad_norm=1.0) for t in TASKS
                          for c in ("MHA", "LN1", "LN2") for k in ("total", "per parameter")])
    return (FinetuningTables(main=_main(acc), bands=bands, corr=corr, grads=grads),
            pd.Series(base, TASKS))


@pytest.mark.parametrize("declared, other", [("hidden", "embedding"), ("embedding", "hidden")])
def test_the_other_protocol_is_a_sensitivity_row_beside_the_declared_one(declared, other):
    rho = {"hidden": 0.5, "embedding": -0.8}
    t, probe = _tables(rho)
    table = finetuning_findings.finetuning(t, probe, studies.get("main").primaries,
                                           protocol=declared)
    by_claim = table.set_index("claim")
    primary = table[table["family"] == "primary"]
    assert primary["measured"].iloc[2] == pytest.approx(rho[declared] + 0.03)
    sens = table[table["family"] == "sensitivity"].set_index("claim")
    rho_row = ("Spearman(plasticity, gain over head-only) over the five components, within a "
               f"task [{other}]")
    assert sens.loc[rho_row, "measured"] == pytest.approx(rho[other] + 0.03)
    assert not table["claim"].str.endswith(f"task [{declared}]").any()  # it is the primary
    assert all(c.endswith(f"[{other}]") for c in sens.index)
    assert by_claim.loc[f"where MHA sits among the five [{other}] (1 = highest)",
                        "measured"] == "plasticity rank 5.0, gain rank 1.0"
    with pytest.raises(ValueError, match="valid"):
        finetuning_findings.finetuning(t, probe, protocol="output")


def test_finetuning_findings_use_tasks_as_units():
    """Synthetic per-task accuracies where MHA beats LN1 by exactly 3 points on every task
    (plus noise in the others): the table tests over 7 tasks, not 21 seeds."""
    rng = np.random.default_rng(2)
    base = 80 + rng.normal(0, 2, 7)
    acc = {"MHA": base + 3, "FC1": base + 2, "FC2": base + 1, "LN2": base + 0.5, "LN1": base,
           "full": base + 3.2, "head": base - 4}
    bands = pd.DataFrame([dict(task=t, config=c, delta=d, width=w, drop_x3=1.0)
                          for t in TASKS for c, w in (("MHA", 1.5), ("LN1", 1.0), ("LN2", 1.0))
                          for d in (1.0, 2.0)])
    corr = pd.DataFrame([dict(protocol="hidden", task=t, component=c, spearman=0.5,
                              rank_x=r, rank_y=r) for t in TASKS
                         for r, c in enumerate(["MHA", "FC1", "FC2", "LN2", "LN1"], 1)])
    grads = pd.DataFrame([dict(task=t, config=c, kind=k, grad_norm=g) for t in TASKS
                          for c, k, g in (("MHA", "total", 10.0), ("LN1", "total", 1.0),
                                          ("LN2", "total", 1.0), ("MHA", "per parameter", 0.01),
                                          ("LN1", "per parameter", 0.1),
                                          ("LN2", "per parameter", 0.1))])
    probe = pd.Series(base - 10, index=TASKS)
    t = FinetuningTables(main=_main(acc), bands=bands, corr=corr, grads=grads)
    table = finetuning_findings.finetuning(t, probe, studies.get("main").primaries)
    assert (table.loc[table["family"] != "descriptive", "n"] == 7).all()
    by_claim = table.set_index("claim")
    assert by_claim.loc["MHA - FC1, test accuracy", "measured"] == pytest.approx(1.0)
    assert by_claim.loc["LN2 - LN1, test accuracy", "verdict"] == "agrees with the paper"
    grad = by_claim.filter(like="per parameter", axis=0)
    assert grad["measured"].iloc[0] == pytest.approx(-1.0)
    assert grad["verdict"].iloc[0] == "resolved: negative"
    mha = by_claim.filter(like="where MHA sits", axis=0)
    assert mha["verdict"].iloc[0] == "same as the paper"
    primary = table[table["family"] == "primary"].set_index("claim")
    assert len(primary) == 3 and primary.index[1] == "MHA - LN1, test accuracy"
    assert primary["measured"].iloc[0] == pytest.approx((3 + 2 + 1) / 3 - 0.25)
    assert primary["measured"].iloc[2] == pytest.approx(0.5)  # the corr table's rho
    assert not table["claim"].str.contains("high-plasticity").any()


def _ab_findings(t: SimpleNamespace) -> pd.DataFrame:
    main = finetuning_tables.main_table(t.runs)
    acc = main[main["task"] != "average"].pivot_table(index="task", columns="config",
                                                      values="test_acc_mean")
    return verdicts.table([verdicts.paired_test("A - B", acc["A"], acc["B"], paper="x",
                                                expected=1, unit="points")])


@pytest.mark.parametrize("alt_test, fragile", [(0.81, False), (0.40, True)])
def test_a_row_is_fragile_when_the_other_tied_lr_flips_it(alt_test, fragile):
    df = tie_runs(alt_test)
    t = SimpleNamespace(runs=df, ties=lr_selection.lr_ties(df), alternatives=[
        SimpleNamespace(runs=a) for a in lr_selection.tie_alternatives(df)])
    table = finetuning_findings.with_ties(_ab_findings, t).set_index("claim")
    assert table.loc["A - B", "verdict"] == "agrees with the paper"
    assert bool(table.loc["A - B", "fragile"]) is fragile
    ties = table.filter(like="tie-break", axis=0)
    assert ties["n"].iloc[0] == 1 and ties["family"].iloc[0] == "descriptive"


@pytest.mark.parametrize("rho, word", [(0.5, "positive on 7 of 7 tasks"),
                                       (-0.8, "positive on 0 of 7 tasks and negative on 7")])
def test_notebook_04_read_cells_say_what_the_rows_measured(rho, word):
    """The Read cells render rows (``sentences``): flip the data and the words follow; a study
    without a budget check still has the budget rows its Read cell names (measured on 0 tasks)."""
    from vitplast.report import sentences

    t, probe = _tables({"hidden": rho, "embedding": -rho})
    found = finetuning_findings.finetuning(t, probe, studies.get("main").primaries)
    primary = sentences.text(found, studies.get("main").primaries[2].claim)
    assert f"mean rho {rho + 0.03:+.2f}" in primary and word in primary.lower()
    assert ("Resolved, and it agrees" if rho > 0 else "Resolved, and it disagrees") in primary
    other = sentences.text(found, "gain over head-only) over the five components, within a task [")
    assert ("positive on 0 of 7" if rho > 0 else "positive on 7 of 7") in other.lower()
    assert "sensitivity rows" in other
    where = sentences.text(found, "where MHA sits among the five [hidden]")
    assert "plasticity rank 5.0, gain rank 1.0" in where
    budget = sentences.text(found, "order of the seven configurations at 4x", "MHA - LN1 at 4x")
    assert "not measured: no task has runs at 4x the steps" in budget and "n = 0" not in budget
    assert "nothing measured yet (no task)" in budget
