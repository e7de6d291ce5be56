"""Relative plasticity: equal to its definition recomputed by hand, measured in the estimator's
one pass, unchanged by the residual-stream gauge under ``hidden`` (tiny random ViT and the
embedded model) while plasticity moves by the derived factors, and moved under ``embedding``
where attention's logits scale by c^2."""

import copy

import pandas as pd
import pytest
import torch
from helpers import tiny_vit

from vitplast import models
from vitplast.measure import gauge, plasticity, rates, relative
from vitplast.measure.components import COMPONENTS, component_modules
from vitplast.measure.pairs import Pairs
from vitplast.stats import verdicts


def test_relative_plasticity_is_its_definition_recomputed(images):
    """R = mean rate x sqrt(mean ||x||^2) / sqrt(mean ||f(x)||^2), the means over all 2N
    images, each component on its real input (``hidden``)."""
    model, (x, y) = tiny_vit(), images
    got = relative.measure(model, x, y, batch_size=7).set_index(["layer", "component"])
    both = torch.cat([x, y])
    inputs = rates.component_inputs(model, both)
    for key, module in component_modules(model).items():
        inp = inputs[key].double()
        with torch.no_grad():
            out = module(inputs[key]).double()
        rate = ((out[:24] - out[24:]).flatten(1).norm(dim=1)
                / (inp[:24] - inp[24:]).flatten(1).norm(dim=1)).mean()
        s_in, s_out = inp.flatten(1).norm(dim=1).pow(2).mean().sqrt(), out.flatten(1).norm(
            dim=1).pow(2).mean().sqrt()
        row = got.loc[key]
        assert row["s_in"] == pytest.approx(s_in.item(), rel=1e-5)
        assert row["s_out"] == pytest.approx(s_out.item(), rel=1e-5)
        assert row["relative_plasticity"] == pytest.approx((rate * s_in / s_out).item(),
                                                           rel=1e-4)
        assert row["n"] == 24


def test_relative_plasticity_costs_no_extra_pass(images):
    """One forward of the network per batch of pairs: the scales come from the same hooks."""
    model, (x, y) = tiny_vit(), images
    calls = []
    handle = model.patch_embed.register_forward_hook(lambda *a: calls.append(1))
    try:
        relative.measure(model, x, y, batch_size=len(x))
    finally:
        handle.remove()
    assert len(calls) == 1


@pytest.mark.parametrize("c", [8.0, 2.0])
def test_gauge_leaves_relative_plasticity_unchanged_under_hidden(c, images):
    """Every component, c = 1 vs c: relative plasticity equal within 1e-3 relative, while
    plasticity moves by the derived factor (LN / c, MHA and FC2 x c): the test is not
    vacuous."""
    check = relative.gauge_check(tiny_vit(), Pairs(*images, n_pairs=24), c,
                                 protocols=("hidden",)).set_index("component")
    assert list(check.index) == list(COMPONENTS)
    assert (check["relative_difference"] <= 1e-3).all(), check
    for comp in COMPONENTS:
        factor = gauge.RATE_FACTORS["hidden"][comp](c)
        assert check.loc[comp, "plasticity_difference"] == pytest.approx(abs(factor - 1),
                                                                         abs=1e-3)


def test_gauge_leaves_relative_plasticity_unchanged_on_the_embedded_model():
    """The same check on the embedded model, on pairs of Fashion-MNIST and digits images."""
    from vitplast.measure import empirical

    model = models.load_model()
    pairs = empirical.task_pairs("digits", n_pairs=8, model=model)
    check = relative.gauge_check(model, pairs, 8.0, protocols=("hidden",))
    assert (check["relative_difference"] <= 1e-3).all(), check
    assert check.set_index("component").loc["MHA", "plasticity_difference"] == pytest.approx(
        7.0, abs=1e-2)


def test_embedding_protocol_moves_attention_but_not_the_layernorms(images):
    """Under ``embedding`` every component reads c times the embedding: the LayerNorms keep
    their relative plasticity (scale-free up to eps), attention's moves (logits x c^2)."""
    check = relative.gauge_check(tiny_vit(), Pairs(*images, n_pairs=24), 8.0,
                                 protocols=("embedding",)).set_index("component")
    assert check.loc["LN1", "relative_difference"] <= 1e-3
    assert check.loc["LN2", "relative_difference"] <= 1e-3
    assert check.loc["MHA", "relative_difference"] > 1e-2


def test_a_component_scaled_at_its_output_keeps_its_relative_plasticity(images):
    """FC2's weight and bias times 5 (its output times 5, nothing else it reads changes in
    the ``embedding`` protocol): plasticity x 5, relative plasticity unchanged."""
    model, (x, y) = tiny_vit(), images
    scaled = copy.deepcopy(model)
    with torch.no_grad():
        for b in scaled.blocks:
            b.mlp.fc2.weight.mul_(5)
            b.mlp.fc2.bias.mul_(5)
    a = relative.measure(model, x, y, protocol="embedding").set_index(["layer", "component"])
    b = relative.measure(scaled, x, y, protocol="embedding").set_index(["layer", "component"])
    fc2 = (slice(None), "FC2")
    torch.testing.assert_close(torch.tensor(b.loc[fc2, "plasticity"].values),
                               5 * torch.tensor(a.loc[fc2, "plasticity"].values), rtol=1e-5,
                               atol=0)
    torch.testing.assert_close(torch.tensor(b.loc[fc2, "relative_plasticity"].values),
                               torch.tensor(a.loc[fc2, "relative_plasticity"].values),
                               rtol=1e-5, atol=0)


def test_ranking_orders_components_by_their_layer_mean(images):
    df = relative.measure(tiny_vit(), *images, meta=dict(task="toy"))
    ranked = relative.ranking(df)
    means = df.groupby("component", observed=True)["relative_plasticity"].mean()
    assert ranked["relative_plasticity"].tolist() == sorted(means.tolist(), reverse=True)
    assert ranked["rank"].tolist() == [1, 2, 3, 4, 5]
    assert relative.order(ranked) == " > ".join(means.sort_values(ascending=False).index)


def test_bad_protocol_names_the_valid_ones(images):
    with pytest.raises(ValueError, match="hidden"):
        relative.measure(tiny_vit(), *images, protocol="residual")


def test_measurement_without_scales_has_none(images):
    assert plasticity.measurement(tiny_vit(), *images, progress=False).scales is None


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

    rows = verdicts.table(relative.gauge_findings(_check(2e-5, 0.9))).set_index("claim")
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
    moved = verdicts.table(relative.gauge_findings(_check(0.05, 0.9))).set_index("claim")
    assert moved["verdict"].iloc[0].startswith("moved: LN1 0.05")


def test_ranking_findings_compare_each_models_order_with_the_papers():

    paper = dict(MHA=5.0, FC1=4.0, FC2=3.0, LN2=2.0, LN1=1.0)
    df = pd.DataFrame([dict(model=m, task=t, protocol="hidden", layer=0, component=c,
                            relative_plasticity=(v if m == "a" else 1 / v))
                       for m in ("a", "b") for t in ("t1", "t2", "t3") for c, v in paper.items()])
    rows = verdicts.table(relative.ranking_findings(df)).set_index("claim")
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
    rows = verdicts.table(relative.ranking_findings(df)).set_index("claim")
    moved = rows.loc["order of relative plasticity, random init vs embedded (final) [hidden]"]
    assert moved["measured"] == "Kendall tau 0.20" and moved["n"] == 5
    assert moved["verdict"] == ("another order (place in the trained model -> in this one): "
                                "MHA 1 -> 5, FC1 2 -> 1, FC2 3 -> 2, LN2 4 -> 3, LN1 5 -> 4")
    same = rows.loc["order of relative plasticity, no weight decay vs embedded (final) [embedding]"]
    assert same["measured"] == "Kendall tau 1.00" and same["verdict"] == "the same order"
    tie = df.assign(relative_plasticity=df["relative_plasticity"].where(
        ~((df["model"] == "random init") & (df["component"] == "LN1")), 2.0))  # LN1 = LN2
    tied = verdicts.table(relative.ranking_findings(tie)).set_index("claim").loc[
        "order of relative plasticity, random init vs embedded (final) [hidden]", "verdict"]
    assert tied.endswith("LN1 5 -> 3 (tied)") and "LN2 4 -> 3 (tied)" in tied


def test_notebook_02b_reads_every_measurement_of_its_profiles_from_the_shipped_companions(
        monkeypatch):
    """A fresh clone measures none of 02b's tables (sections 1-6) in the default and smoke
    profiles: each is a companion in data/gauge (``cached.kept_table``) for exactly the
    settings the notebook asks for, read without computing (computing here fails the test)."""
    from pathlib import Path

    from vitplast import cached
    from vitplast.course import notebooks
    from vitplast.measure import stream
    from vitplast.train import invariance, recipes

    def computed(*args, **kwargs):
        raise AssertionError("not stored: the notebook would measure it on a fresh clone")

    monkeypatch.setattr(cached, "_as_kept", computed)
    for profile in ("default", "smoke"):
        p = {**notebooks.notebook_parameters("02b_gauge"),
             **notebooks.PROFILES[profile].get("02b_gauge", {})}
        kept = models.require_results(models.results_root(p["measured_dir"]))
        folder = models.pretrained_folder(p["recipe_folder"])
        where = dict(source=p["source"], data_root=p["data_root"])
        c = max(p["gauge_cs"])
        tables = [
            stream.gauge_rankings(p["model_name"], p["gauge_tasks"], p["gauge_cs"],
                                  n_pairs=p["n_pairs"], root=kept, **where),
            stream.embedding_scale_rankings(p["model_name"], p["gauge_tasks"],
                                            p["embedding_scales"], n_pairs=p["n_pairs"],
                                            root=kept, **where),
            relative.embedded_gauge_check(p["gauge_tasks"][0], c, source=p["source"],
                                          n_pairs=p["relative_pairs"], root=kept),
            relative.model_rankings(p["gauge_tasks"], folder, n_pairs=p["relative_pairs"],
                                    root=kept, **where),
            invariance.finetuning_invariance(steps=p["invariance_steps"], c=c, root=kept),
            recipes.recipe_rankings(folder, p["gauge_tasks"], n_pairs=p["n_pairs"], root=kept,
                                    **where)]
        assert all(len(t) for t in tables) and Path(kept).name == "gauge"


def test_two_model_args_of_one_timm_name_give_two_keys_to_every_measured_table(monkeypatch):
    """Issue 43: the keys of ``stream_statistics``, ``gauge_rankings``,
    ``embedding_scale_rankings``, ``mha_scale_curve``, ``plasticity_study`` and
    ``intervals.cached`` carry the model's weights file and ``model_args``
    (``models.weights_id``), so one's own model never reads the table of another
    architecture under the same timm name; with neither, the name alone as before."""
    from vitplast import cached, weights
    from vitplast.measure import empirical, intervals, stream

    keys = []
    monkeypatch.setattr(cached, "kept_table",
                        lambda name, key, compute, root=None, **kw: keys.append((name, key)))
    name = "vit_tiny_patch16_224"

    def tables(name):
        keys.clear()
        stream.stream_statistics(name, "digits", ["final"])
        stream.gauge_rankings(name, ["digits"])
        stream.embedding_scale_rankings(name, ["digits"])
        empirical.mha_scale_curve(name, "digits", [1.0])
        empirical.plasticity_study(name, ["digits"])
        intervals.cached("intervals", dict(model=name, checkpoint="final"), None)
        return list(keys)

    plain = tables(name)
    assert all(key["weights"] == name for _, key in plain)
    small = tables(weights.ModelSpec(name, "", {"img_size": 32, "patch_size": 4}))
    large = tables(weights.ModelSpec(name, "", {"img_size": 64, "patch_size": 8}))
    assert len(plain) == len(small) == len(large) == 6
    for (table, a), (_, b), (_, c) in zip(plain, small, large):
        hashes = {cached.config_hash(k) for k in (a, b, c)}
        assert len(hashes) == 3, table
        assert '"img_size": 32' in b["weights"] and '"img_size": 64' in c["weights"]
