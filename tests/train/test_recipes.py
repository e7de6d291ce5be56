"""Another pretraining recipe's ranking beside the embedded model's, on the shipped folder."""


import pytest

from vitplast import models
from vitplast.measure import empirical, plasticity
from vitplast.train import recipes

FOLDER = models.pretrained_folder("pretrain_no_weight_decay")  # package data


def test_recipe_rankings_are_each_model_s_own_measurement(tmp_path, monkeypatch):
    """The second recipe's rows are the ranking of ``models.load_pretrained(FOLDER)`` on the
    same pairs, the shipped model's rows the embedded model's (8 pairs, one task)."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    got = recipes.recipe_rankings(FOLDER, ["digits"], protocols=("hidden",), n_pairs=8)
    assert sorted(got["recipe"].unique()) == ["pretrain_no_weight_decay", "shipped"]
    for recipe, model in (("shipped", models.load_model()),
                          ("pretrain_no_weight_decay", models.load_pretrained(FOLDER))):
        pairs = empirical.task_pairs("digits", "fmnist", n_pairs=8, model=model)
        want = plasticity.ranking(plasticity.measure(model, pairs, progress=False))
        mine = got[got["recipe"] == recipe].set_index("component")["plasticity"]
        assert mine.to_dict() == pytest.approx(want.set_index("component")["plasticity"]
                                               .to_dict(), rel=1e-5)


def test_recipe_statistics_are_each_model_s_layer_means_on_the_same_images():
    """The same pair images for both recipes, and each model's token scale on the same
    pretraining-domain images (``tokens.token_images``)."""
    import torch

    from vitplast.measure import stream, tokens

    got = recipes.recipe_statistics(FOLDER, "digits", n_pairs=4)
    images = torch.cat(empirical.task_pairs("digits", "fmnist", n_pairs=4,
                                            model=models.load_model()).tensors())
    for recipe, model in (("shipped", models.load_model()),
                          ("pretrain_no_weight_decay", models.load_pretrained(FOLDER))):
        want = stream.model_statistics(model, images, tokens.token_images(model)).drop(
            columns="layer").mean().rename(stream.SHOWN)
        assert got.loc[recipe].to_dict() == pytest.approx(want.to_dict(), rel=1e-6)
    assert got.loc["pretrain_no_weight_decay", "sigma_ln1"] != got.loc["shipped", "sigma_ln1"]
