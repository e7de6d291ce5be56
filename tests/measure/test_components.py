"""Components (``vitplast.measure.components``): exact parameter counts of a tiny ViT, the group of
every parameter, and unsupported models failing clearly (what a configuration trains:
``tests/train/test_configurations.py``)."""

import pytest
import torch
from helpers import tiny_vit

from vitplast.measure import components


def test_parameter_counts_of_a_tiny_vit_are_exact():
    """2 blocks, width 32, MLP 128: LN 2 x (32 + 32); MHA qkv 32 x 96 + 96 and proj 32 x 32
    + 32 per block; FC1 32 x 128 + 128; FC2 128 x 32 + 32."""
    model = tiny_vit()
    counts = {c: components.count_parameters(model, c) for c in components.COMPONENTS}
    assert counts == {"LN1": 128, "MHA": 2 * (3168 + 1056), "LN2": 128, "FC1": 2 * 4224,
                      "FC2": 2 * 4128}
    with pytest.raises(ValueError):
        components.count_parameters(model, "attention")


def test_every_parameter_has_one_group():
    assert [components.component_of(n) for n in (
        "blocks.1.norm1.weight", "blocks.0.attn.qkv.bias", "blocks.0.mlp.fc2.weight",
        "blocks.1.ls1.gamma", "head.weight", "norm.bias", "pos_embed")] == [
        "LN1", "MHA", "FC2", "other", "head", "norm", "embedding"]


def test_unsupported_architectures_fail_clearly():
    import timm

    eva = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, patch_size=14)
    with pytest.raises(TypeError, match="EVA"):
        components.component_modules(eva)
    with pytest.raises(TypeError, match="no `blocks`"):
        components.component_modules(torch.nn.Linear(2, 2))
