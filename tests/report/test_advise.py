"""advise: every rule ranks the five components of the embedded model; the rankings are kept
beside a study as a companion, computed once and recomputed when an input changes."""

import pandas as pd
import pytest
import torch

from vitplast.cached import config_hash
from vitplast.experiments.store import Store
from vitplast.report import advise

SMALL = dict(n_pairs=8, batch_size=8, steps=1)


def test_rank_on_the_embedded_model_gives_every_rule_a_full_ranking():
    threads = torch.get_num_threads()
    ranked = advise.rank("vitplast_fmnist", "digits", **SMALL)
    assert torch.get_num_threads() == threads  # set for the ranking only
    assert set(ranked["rule"]) == set(advise.RULES)
    for _, g in ranked.groupby("rule"):
        assert sorted(g["rank"]) == [1, 2, 3, 4, 5] and set(g["config"]) == set(advise.CANDIDATES)
    mha = ranked[ranked["rule"] == "paper: MHA"].set_index("config")
    assert mha.loc["MHA", "rank"] == 1 and mha["seconds"].max() == 0
    with pytest.raises(ValueError, match="unknown rules"):
        advise.rank("vitplast_fmnist", "digits", rules=["astrology"])


def test_the_gauge_moves_what_it_scales_and_leaves_the_rest():
    """Under c = 2 (the same function), hidden plasticity of MHA and FC2 doubles, the
    LayerNorms' halves, FC1's stays (``gauge.RATE_FACTORS``); relative plasticity and the
    gradient on LN1 stay."""
    rules = ["plasticity [hidden]", "relative plasticity [hidden]", "gradient norm"]
    plain = advise.rank("vitplast_fmnist", "digits", rules=rules, **SMALL)
    gauged = advise.rank("vitplast_fmnist", "digits", rules=rules, c=2.0, **SMALL)
    ratio = (gauged.set_index(["rule", "config"])["score"]
             / plain.set_index(["rule", "config"])["score"])["plasticity [hidden]"]
    assert ratio.to_dict() == pytest.approx(dict(MHA=2, FC2=2, FC1=1, LN1=0.5, LN2=0.5),
                                            rel=1e-3)
    ratios = gauged.set_index(["rule", "config"])["score"] / plain.set_index(["rule", "config"])[
        "score"]
    assert ratios["gradient norm"]["LN1"] == pytest.approx(1.0, rel=1e-4)
    assert ratios["relative plasticity [hidden]"].to_numpy() == pytest.approx(1.0, rel=1e-3)


def test_rankings_are_stored_once_validated_and_recomputed_when_an_input_changes(
        tmp_path, monkeypatch):
    calls = []

    def fake_rank(model_name, task, *, rules, **kwargs):
        calls.append((task, tuple(rules), kwargs.get("n_pairs")))
        return pd.DataFrame([dict(task=task, rule=r, config=c, score=float(i), rank=5 - i,
                                  seconds=0.5) for r in rules
                             for i, c in enumerate(advise.CANDIDATES)])

    monkeypatch.setattr(advise, "rank", fake_rank)
    first = advise.stored(tmp_path, "vitplast_fmnist", "digits")
    assert len(calls) == 1 and set(first["rule"]) == set(advise.RULES)
    again = advise.stored(tmp_path, "vitplast_fmnist", "digits")
    assert len(calls) == 1 and again.equals(first)  # read, not computed
    [path] = tmp_path.glob("advise-*.json")
    saved = Store(tmp_path).companion(path.name)
    assert saved["provenance"][0]["rules"] == list(advise.RULES) and saved["c"] == 1.0
    advise.stored(tmp_path, "vitplast_fmnist", "digits", n_pairs=16)  # another input
    assert calls[-1] == ("digits", tuple(advise.RULES), 16) and len(calls) == 2
    monkeypatch.setattr(advise, "LOSS_DROP_LR", {**advise.LOSS_DROP_LR, "MHA": 1.0})
    advise.stored(tmp_path, "vitplast_fmnist", "digits")  # the loss drop's LR changed
    assert len(calls) == 3 and len(list(tmp_path.glob("advise-*.json"))) == 3
    monkeypatch.setattr(advise, "RULES", (*advise.RULES, "a new rule"))
    monkeypatch.setitem(advise.PLASTICITY_RULES, "a new rule", ("hidden", "plasticity"))
    rows = advise.stored(tmp_path, "vitplast_fmnist", "digits", rules=advise.RULES)
    assert calls[-1][1] == ("a new rule",) and set(rows["rule"]) == set(advise.RULES)
    name = f"advise-{config_hash(advise.settings('vitplast_fmnist', 'digits'))}.json"
    saved = Store(tmp_path).companion(name)
    assert [p["rules"] for p in saved["provenance"]] == [list(advise.RULES[:-1]), ["a new rule"]]


def test_a_stored_ranking_that_is_not_a_full_one_is_computed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(advise, "rank", lambda m, t, *, rules, **kw: pd.DataFrame(
        [dict(task=t, rule=r, config=c, score=float(i), rank=i + 1, seconds=0.1)
         for r in rules for i, c in enumerate(advise.CANDIDATES)]))
    advise.stored(tmp_path, "vitplast_fmnist", "digits")
    [path] = tmp_path.glob("advise-*.json")
    store = Store(tmp_path)
    saved = store.companion(path.name)
    saved["rows"] = saved["rows"][1:]  # one component of the first rule lost
    store.write_companion(path.name, saved)
    rows = advise.stored(tmp_path, "vitplast_fmnist", "digits")
    assert len(rows) == len(advise.RULES) * len(advise.CANDIDATES)
    path.write_text("{}")  # not a companion at all: refused, naming the file
    with pytest.raises(ValueError, match="missing"):
        advise.stored(tmp_path, "vitplast_fmnist", "digits")
