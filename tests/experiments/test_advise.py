"""advise: every rule ranks the five components of the embedded model; the loss drop's SGD
steps, taken by the one training loop, equal a hand-written SGD loop's to the last bit; the LRs
and candidates are read from the component table when used; the rankings are kept beside a
study as a companion, computed once and recomputed when an input changes."""

import copy
import fnmatch
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_vit

from vitplast import models
from vitplast.cached import config_hash
from vitplast.datasets import tasks
from vitplast.experiments import advise, studies
from vitplast.experiments.store import Store
from vitplast.measure import components

SMALL = dict(n_pairs=8, batch_size=8, steps=1)


def test_rank_on_the_embedded_model_gives_every_rule_a_full_ranking():
    threads = torch.get_num_threads()
    ranked = advise.rank("vitplast_fmnist", "digits", **SMALL)
    assert torch.get_num_threads() == threads  # set for the ranking only
    assert set(ranked["rule"]) == set(advise.RULES)
    candidates = advise.candidates()
    for _, g in ranked.groupby("rule"):  # each rule ranks exactly the candidates, 1..n
        assert sorted(g["rank"]) == list(range(1, len(candidates) + 1))
        assert set(g["config"]) == set(candidates)
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
                             for i, c in enumerate(advise.candidates())])

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
    lrs = advise.loss_drop_lrs()
    monkeypatch.setattr(advise, "loss_drop_lrs", lambda: {**lrs, "MHA": 1.0})
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
         for r in rules for i, c in enumerate(advise.candidates())]))
    advise.stored(tmp_path, "vitplast_fmnist", "digits")
    [path] = tmp_path.glob("advise-*.json")
    store = Store(tmp_path)
    saved = store.companion(path.name)
    saved["rows"] = saved["rows"][1:]  # one component of the first rule lost
    store.write_companion(path.name, saved)
    rows = advise.stored(tmp_path, "vitplast_fmnist", "digits")
    assert len(rows) == len(advise.RULES) * len(advise.candidates())
    path.write_text("{}")  # not a companion at all: refused, naming the file
    with pytest.raises(ValueError, match="missing"):
        advise.stored(tmp_path, "vitplast_fmnist", "digits")


def _hand_loss_drop(model, config, train, probe, *, lr, steps, batch_size, seed):
    """The loss drop as a hand-written SGD loop (momentum 0.9, clip 1.0, constant LR, eval
    mode, step k on the images drawn with ``seed + 1 + k``): the independent implementation."""
    m = copy.deepcopy(model).eval()
    with torch.no_grad():
        before = float(F.cross_entropy(m(probe[0]), probe[1]))
    trains = [*components.by_name()[config].patterns, "head.*", "norm.*"]  # and the head
    for n, p in m.named_parameters():
        p.requires_grad_(any(fnmatch.fnmatch(n, pattern) for pattern in trains))
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    for step in range(steps):
        x, y = advise._draw(train, batch_size, seed + 1 + step)
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    with torch.no_grad():
        return before - float(F.cross_entropy(m(probe[0]), probe[1]))


@pytest.mark.parametrize("config", ["LN1", "MHA"])
def test_the_loss_drop_is_a_hand_sgd_loop_s_to_the_last_bit(config):
    """``_loss_drop`` takes its steps in the one training loop (``finetune.run`` with a
    constant schedule and the drawn batches): its score equals the hand loop's exactly, at a
    high LR (a LayerNorm's) and a low one, over three steps; the model given is untouched."""
    t = tasks.load("digits")
    model = models.load_model(num_classes=t.num_classes)
    models.new_head(model, t.num_classes, seed=0)
    probe = advise._draw(t.train, 16, 0)
    kept = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        before = float(F.cross_entropy(model.eval()(probe[0]), probe[1]))
    lr = advise.loss_drop_lrs()[config]
    got = advise._loss_drop(model, config, t.train, probe, before, lr=lr, steps=3,
                            batch_size=8, seed=0)
    want = _hand_loss_drop(model, config, t.train, probe, lr=lr, steps=3, batch_size=8, seed=0)
    assert got == want and math.isfinite(got) and got != 0
    assert all(torch.equal(p, kept[n]) for n, p in model.named_parameters())


def test_the_loss_drop_steps_a_model_with_dropout_in_eval_mode():
    """A model with dropout (a tiny random ViT): the loop's steps are taken in eval mode, as
    the hand loop's, so the drop is the update's alone and equal to the last bit."""
    model = tiny_vit(drop_rate=0.5, proj_drop_rate=0.5, attn_drop_rate=0.5)
    images = torch.randn(40, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    train = [(x, i % 5) for i, x in enumerate(images)]
    probe = advise._draw(train, 8, 0)
    with torch.no_grad():
        before = float(F.cross_entropy(model.eval()(probe[0]), probe[1]))
    got = advise._loss_drop(model, "FC1", train, probe, before, lr=0.1, steps=2,
                            batch_size=4, seed=0)
    assert got == _hand_loss_drop(model, "FC1", train, probe, lr=0.1, steps=2, batch_size=4,
                                  seed=0) and got != 0


def test_the_loss_drop_lrs_and_candidates_are_read_from_the_table_when_used(monkeypatch):
    """The middle of each component's grid in the main study; a component added to the table
    is a candidate at once and gets the middle of the full configuration's grid."""
    grids = studies.get("main").spec.lrs
    assert advise.loss_drop_lrs() == {c: grids[c][len(grids[c]) // 2]
                                      for c in components.names()}
    assert advise.loss_drop_lrs() == dict(LN1=0.3, MHA=0.03, LN2=0.3, FC1=0.03, FC2=0.03)
    row = components.module_component("ATTN_QKV", "linear", "attn.qkv", hidden=None,
                                      embedding=None, bound=None, colour="#000000")
    monkeypatch.setattr(components, "TABLE", components.extended(row))
    assert advise.candidates() == (*components.names(components.TABLE[:5]), "ATTN_QKV")
    assert advise.loss_drop_lrs()["ATTN_QKV"] == grids["full"][len(grids["full"]) // 2]
