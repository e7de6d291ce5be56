"""Relative plasticity: equal to its definition recomputed by hand, measured in the estimator's
one pass, unchanged by the residual-stream gauge under ``hidden`` (tiny random ViT and the
embedded model) while plasticity moves by the derived factors, and moved under ``embedding``
where attention's logits scale by c^2 (its findings rows: ``test_relative_findings``)."""

import copy

import pytest
import torch
from helpers import tiny_vit

from vitplast import files, models
from vitplast.measure import gauge, plasticity, rates, relative
from vitplast.measure.components import COMPONENTS, component_modules
from vitplast.measure.pairs import Pairs


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
        kept = files.require_results(files.results_root(p["measured_dir"]))
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

    def kept_table(name, key, compute, root=None, **kw):
        keys.append((name, key))

    monkeypatch.setattr(cached, "kept_table", kept_table)
    monkeypatch.setattr(intervals, "kept_table", kept_table)  # its own name: it has a ``cached``
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
