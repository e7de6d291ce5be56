"""A local weights file loads unresampled into the model asked for, or is refused naming why."""

import pytest
import torch
from safetensors.torch import save_file

from vitplast import models, weights


def _save(model, path):
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


@pytest.fixture
def tiny32(tmp_path):
    """A 32 px, patch-4, 10-class ViT of one's own (timm's vit_tiny architecture)."""
    torch.manual_seed(0)
    source = models.load_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
                               patch_size=4, num_classes=10, depth=2, device="cpu")
    return source, _save(source, tmp_path / "tiny32.safetensors")


def test_own_weights_load_exactly_with_the_kwargs_they_were_saved_with(tiny32):
    source, path = tiny32
    model = models.load_model("vit_tiny_patch16_224", weights_file=path, img_size=32,
                              patch_size=4, num_classes=10, depth=2, device="cpu")
    for (name, p), q in zip(model.state_dict().items(), source.state_dict().values()):
        assert torch.equal(p, q), name  # the head too: timm alone would drop it (1000 != 10)


def test_another_patch_or_image_size_is_refused_naming_the_kwargs_that_fit(tiny32):
    _, path = tiny32
    with pytest.raises(ValueError, match=r"another patch size.*patch_embed.proj.weight.*"
                       r"patch_size=4, in_chans=3, img_size=32 .*-p model_args "
                       r"'\{\"patch_size\": 4, \"in_chans\": 3, \"img_size\": 32\}'"):
        models.load_model("vit_tiny_patch16_224", weights_file=path, num_classes=10, depth=2)
    with pytest.raises(ValueError, match=r"another image size.*pos_embed.*img_size=32"):
        models.load_model("vit_tiny_patch16_224", weights_file=path, num_classes=10, depth=2,
                          patch_size=4, img_size=64)


def test_a_replaced_head_is_announced_with_classes_saved_and_asked(tiny32):
    source, path = tiny32
    with pytest.warns(UserWarning, match="head of 10 classes; .* asks for 3"):
        model = models.load_model("vit_tiny_patch16_224", weights_file=path, img_size=32,
                                  patch_size=4, num_classes=3, depth=2, device="cpu")
    assert model.head.out_features == 3
    assert torch.equal(model.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)


def test_a_file_that_does_not_load_names_the_keys_that_differ(tiny32):
    _, path = tiny32
    with pytest.raises(ValueError, match=r"keys that differ in size: .*head.weight: file "
                       r"\(10, 192\), model \(1000, 192\).*num_classes=10"):
        models.load_model("vit_tiny_patch16_224", weights_file=path, img_size=32,
                          patch_size=4, depth=2)


def test_differing_keys_lists_shapes_then_keys_only_one_side_has():
    saved = {"a": torch.zeros(2), "b": torch.zeros(3), "c": torch.zeros(1)}
    own = {"a": torch.zeros(2), "b": torch.zeros(4), "d": torch.zeros(1)}
    assert weights.differing_keys(saved, own) == [
        "b: file (3,), model (4,)", "d: only in the model", "c: only in the file"]
