"""advise: rules ranked on the embedded model, and scored exactly against the oracle."""

import pandas as pd
import pytest
import torch

from vitplast import advise

#: Per task, per candidate: (validation accuracy, test accuracy), one LR, two seeds.
ACC = {"t0": {"LN1": (0.70, 0.71), "MHA": (0.90, 0.88), "LN2": (0.60, 0.60),
              "FC1": (0.80, 0.86), "FC2": (0.50, 0.50)},
       "t1": {"LN1": (0.95, 0.93), "MHA": (0.90, 0.90), "LN2": (0.60, 0.60),
              "FC1": (0.80, 0.80), "FC2": (0.50, 0.50)}}


def _runs() -> pd.DataFrame:
    return pd.DataFrame([dict(task=t, config=c, lr=0.1, seed=s, status="ok", best_val_acc=v,
                              best_val_loss=1.0, test_acc=a)
                         for t, accs in ACC.items() for c, (v, a) in accs.items()
                         for s in (0, 1)])


def _advice(first: dict) -> pd.DataFrame:
    """A rule "r" whose first choice per task is ``first[task]``; the rest ranked after."""
    return pd.DataFrame([dict(task=t, rule="r", config=c, score=0.0, seconds=1.5,
                              rank=1 if c == first[t] else 2 + i)
                         for t in ACC for i, c in enumerate(advise.CANDIDATES)])


def test_the_oracle_is_the_best_validation_accuracy():
    o = advise.oracle(_runs())
    assert o[o["best"]].set_index("task")["config"].to_dict() == {"t0": "MHA", "t1": "LN1"}
    assert o.set_index(["task", "config"]).loc[("t0", "FC1"), "test"] == pytest.approx(86.0)


def test_regret_is_the_oracles_test_accuracy_minus_the_picks():
    per_task = advise.regret(_advice({"t0": "FC1", "t1": "LN1"}), _runs())
    rule = per_task[per_task["rule"] == "r"].set_index("task")
    # t0: the oracle (MHA, 88) minus FC1 (86) = 2, a miss; t1: a hit, regret 0
    assert rule["regret"].tolist() == pytest.approx([2.0, 0.0])
    assert rule["hit"].tolist() == [False, True]
    rand = per_task[per_task["rule"] == "random pick"].set_index("task")["regret"]
    assert rand["t0"] == pytest.approx(88 - (71 + 88 + 60 + 86 + 50) / 5)
    table = advise.regret_table(per_task).set_index("rule")
    assert table.loc["r", "mean regret"] == pytest.approx(1.0)
    assert table.loc["r", "top-1 hit rate"] == pytest.approx(0.5)
    assert table.loc["r", "seconds per task"] == pytest.approx(1.5)
    assert table.loc["r", "tasks"] == 2 and table.index[0] == "r"  # best rule first


def test_rank_on_the_embedded_model_gives_every_rule_a_full_ranking():
    threads = torch.get_num_threads()
    ranked = advise.rank("vitplast_fmnist", "digits", n_pairs=8, batch_size=8, steps=1)
    assert torch.get_num_threads() == threads  # set for the ranking only
    assert set(ranked["rule"]) == set(advise.RULES)
    for _, g in ranked.groupby("rule"):
        assert sorted(g["rank"]) == [1, 2, 3, 4, 5] and set(g["config"]) == set(advise.CANDIDATES)
    mha = ranked[ranked["rule"] == "paper: MHA"].set_index("config")
    assert mha.loc["MHA", "rank"] == 1 and mha["seconds"].max() == 0
    with pytest.raises(ValueError, match="unknown rules"):
        advise.rank("vitplast_fmnist", "digits", rules=["astrology"])
