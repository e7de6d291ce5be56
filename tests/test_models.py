"""Model loading: the embedded checkpoints (sha256, accuracy), local files, clear errors."""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from vitplast import files, hub, models, weights
from vitplast.datasets import data
from vitplast.train import passes


def test_embedded_checkpoint_matches_its_model_card():
    card = models.embedded_checkpoints()["final"]
    model = models.load_model("vitplast_fmnist")
    x, y = data.fashion_mnist_arrays(train=False)
    test = torch.utils.data.Subset(data.NormalizedTensors(x, y), range(1000))
    _, acc = passes.evaluate(model, test)
    assert acc == pytest.approx(card["test_acc_first1000"], abs=0.002)
    assert card["test_acc"] >= 0.88


def test_the_shipped_model_card_is_written_from_the_manifest():
    from vitplast.train import pretrain

    manifest = json.loads(models.MANIFEST.read_text())
    assert pretrain.model_card(manifest) == (models.DATA_DIR / "README.md").read_text()
    assert "1,199,882 parameters" in pretrain.model_card(manifest)  # counted, not typed


def test_every_embedded_checkpoint_loads_and_has_the_documented_size():
    names = list(models.embedded_checkpoints())
    assert names[0] == "init" and names[-1] == "final" and len(names) >= 4
    model = models.load_model("vitplast_fmnist", checkpoint=names[1])
    assert sum(p.numel() for p in model.parameters()) == 1_199_882
    assert not model.training


def test_tampered_checkpoint_is_refused(tmp_path, monkeypatch):
    card = models.embedded_checkpoints()["init"]
    shutil.copy(models.MANIFEST, tmp_path / "checkpoints.json")
    blob = bytearray((models.DATA_DIR / card["file"]).read_bytes())
    blob[-1] ^= 1
    (tmp_path / card["file"]).write_bytes(bytes(blob))
    monkeypatch.setattr(models, "DATA_DIR", tmp_path)
    monkeypatch.setattr(models, "MANIFEST", tmp_path / "checkpoints.json")
    with pytest.raises(ValueError, match="corrupt or was changed"):
        models.load_model("vitplast_fmnist", checkpoint="init")
    with pytest.raises(ValueError, match="valid: \\["):
        models.load_model("vitplast_fmnist", checkpoint="epoch99")


def test_missing_manifest_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "MANIFEST", tmp_path / "checkpoints.json")
    with pytest.raises(FileNotFoundError, match="python -m vitplast pretrain"):
        models.load_model("vitplast_fmnist")


def test_random_init_and_new_head():
    model = models.load_model("vitplast_fmnist", pretrained=False, num_classes=3)
    assert model.head.out_features == 3


def test_local_weights_file_adapts_the_head(tmp_path):
    source = models.load_model("test_vit", pretrained=False)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    with pytest.warns(UserWarning, match="head of 1000 classes; 'test_vit' asks for 3"):
        model = models.load_model("test_vit", weights_file=path, num_classes=3)
    assert model.head.out_features == 3
    for (name, p), q in zip(model.named_parameters(), source.parameters()):
        if not name.startswith("head"):
            assert torch.equal(p, q), name


def test_unknown_names_and_offline_hub(monkeypatch):
    with pytest.raises(ValueError, match="close matches: \\['vit_base_patch16_224"):
        models.load_model("vit_base_patch16_22")
    with pytest.raises(ValueError, match="not a timm VisionTransformer"):
        models.load_model("test_resnet", pretrained=False)
    with pytest.raises(FileNotFoundError):
        models.load_model("test_vit", weights_file="/nonexistent.safetensors")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="weights_file=PATH"):
        models.load_model("test_vit", pretrained=True)
    with pytest.raises(RuntimeError, match="weights_file=PATH"):  # timm's hf-hub: source
        models.load_model("hf-hub:timm/vit_tiny_patch16_224.augreg_in21k")


def test_names_are_checked_with_timms_parser():
    models.check_name("vit_base_patch16_224.orig_in21k")  # the paper's model: valid
    with pytest.raises(ValueError, match="unknown pretrained tag 'orig_in22k'.*'orig_in21k'"):
        models.load_model("vit_base_patch16_224.orig_in22k")
    with pytest.raises(ValueError, match="hf-hub:org/model"):  # a repo id without its source
        models.load_model("org/model")
    with pytest.raises(ValueError, match="valid sources: hf-hub, local-dir"):
        models.load_model("s3:bucket/model")
    with pytest.raises(FileNotFoundError, match="config.json"):
        models.load_model("local-dir:/nonexistent")


def test_local_dir_in_the_hub_layout(tmp_path):
    from timm.models import save_for_hf

    source = models.load_model("test_vit", pretrained=False)
    save_for_hf(source, str(tmp_path), safe_serialization=True)
    model = models.load_model(f"local-dir:{tmp_path}", num_classes=3)
    assert model.head.out_features == 3 and not model.training
    for (name, p), q in zip(model.named_parameters(), source.parameters()):
        if not name.startswith("head"):
            assert torch.equal(p, q), name


def test_bad_weights_files_are_named(tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a tensor file" * 4)
    with pytest.raises(ValueError, match=f"weights_file {junk} is not a safetensors file"):
        models.load_model("test_vit", weights_file=junk)
    pickle = tmp_path / "junk.pth"
    pickle.write_bytes(b"not a pickle" * 4)
    with pytest.raises(ValueError, match=f"weights_file {pickle} is not a safetensors"):
        models.load_model("test_vit", weights_file=pickle)
    other = tmp_path / "other.safetensors"  # a real file of another architecture
    embedded = models.load_model("vitplast_fmnist", pretrained=False)
    save_file({k: v.contiguous() for k, v in embedded.state_dict().items()}, str(other))
    with pytest.raises(ValueError, match=f"weights_file {other} does not fit 'test_vit'.*size"):
        models.load_model("test_vit", weights_file=other)


def test_device_none_picks_cuda_when_present(monkeypatch):
    assert models.load_model("test_vit", pretrained=False).head.weight.device.type == "cpu"
    picked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, device: picked.append(device) or self)
    models.load_model("test_vit", pretrained=False)
    models.load_model("test_vit", pretrained=False, device="cpu")  # explicit device wins
    assert [str(d) for d in picked] == ["cuda", "cpu"]


def test_manifest_lists_sha256_of_each_file():
    manifest = json.loads(models.MANIFEST.read_text())
    for entry in manifest["checkpoints"].values():
        assert files.sha256(models.DATA_DIR / entry["file"]) == entry["sha256"]


def test_a_model_spec_carries_its_weights_to_every_load(tmp_path):
    """The notebooks' ``weights_file`` and ``model_args`` parameters: a value the setup cell
    returns (``model_spec``), read by every ``load_model(spec)``; the plain name is untouched
    (no state kept anywhere)."""
    import copy
    import dataclasses
    import pickle

    source = models.load_model("test_vit", pretrained=False, img_size=32, patch_size=8)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    spec = models.model_spec("test_vit", path, {"img_size": 32, "patch_size": 8})
    assert isinstance(spec, weights.ModelSpec) and not isinstance(spec, str)  # one typed value
    assert (spec.name, spec.weights_file, dict(spec.model_args)) == (
        "test_vit", path, {"img_size": 32, "patch_size": 8})
    assert spec != "test_vit" and weights.name_of(spec) == str(spec) == "test_vit"
    assert json.dumps({"model": spec}, default=str) == '{"model": "test_vit"}'  # a cache key's
    model = models.load_model(spec)  # no hub access: the local file, its architecture
    assert torch.equal(model.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)
    assert model.patch_embed.img_size == (32, 32)
    random = models.load_model(spec, pretrained=False)  # random init, same architecture
    assert random.patch_embed.img_size == (32, 32)
    assert not torch.equal(random.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)
    assert models.load_model(spec, pretrained=False, img_size=64).patch_embed.img_size == (
        64, 64)  # an explicit argument wins
    assert models.load_model("test_vit", pretrained=False).patch_embed.img_size == (160, 160)
    rebuilt = weights.ModelSpec(spec.name, spec.weights_file, spec.model_args)
    for same in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec), rebuilt,
                 dataclasses.replace(spec)):
        assert (same, same.weights_file, same.model_args) == (spec, path, spec.model_args)
        assert hash(same) == hash(spec)
    assert dataclasses.asdict(spec) == {"name": "test_vit", "weights_file": path,
                                        "model_args": {"img_size": 32, "patch_size": 8}}
    renamed = dataclasses.replace(spec, name="vit_tiny_patch16_224")
    assert (renamed.name, renamed.model_args) == ("vit_tiny_patch16_224", spec.model_args)
    with pytest.raises(AttributeError):  # frozen
        spec.weights_file = None
    with pytest.raises(AttributeError):
        spec.model_args = {}
    spec.model_args["img_size"] = 64  # each read is a copy: the spec keeps its own
    weights.own(spec)["model_args"]["img_size"] = 64
    assert spec.model_args == {"img_size": 32, "patch_size": 8}
    assert models.weights_id(spec) != models.weights_id("test_vit") == "test_vit"
    plain = models.model_spec("test_vit", "", {})  # empty: the name itself
    assert plain == "test_vit" and models.weights_id(plain) == "test_vit"
    with pytest.raises(ValueError, match="ship with vitplast"):
        models.model_spec("vitplast_fmnist", path)
    with pytest.raises(ValueError, match="model_args was given for 'vitplast_fmnist'"):
        models.model_spec("vitplast_fmnist", "", {"img_size": 32})
    with pytest.raises(ValueError, match="model_args takes a dict of timm keyword arguments"):
        models.model_spec("test_vit", "", [("img_size", 32)])
    with pytest.raises(FileNotFoundError):
        models.model_spec("test_vit", tmp_path / "missing.safetensors")
    assert models.model_spec("vitplast_fmnist", "", {}) == models.EMBEDDED_NAME  # the default


def test_the_no_weight_decay_model_ships_beside_the_embedded_one():
    """Package data, by name: its manifest's final checkpoint loads (sha256 checked) in the
    embedded architecture; an unknown name names the shipped ones."""
    folder = models.pretrained_folder("pretrain_no_weight_decay")
    assert folder.parent == models.DATA_DIR and (folder / "README.md").is_file()
    assert list(models.shipped_pretrained()) == ["pretrain_no_weight_decay"]
    model = models.load_pretrained("pretrain_no_weight_decay", device="cpu")
    assert sum(p.numel() for p in model.parameters()) == 1199882
    assert not torch.equal(model.head.weight, models.load_model(device="cpu").head.weight)
    with pytest.raises(FileNotFoundError, match=r"shipped with vitplast: \['pretrain_no_weight"):
        models.load_pretrained("pretrain_no_such_recipe")


@pytest.mark.parametrize("name", ["hf-hub:timm/vit_tiny_patch16_224.augreg_in21k",
                                  "vit_base_patch16_224.orig_in21k"])
def test_an_unreachable_hub_fails_in_seconds_naming_the_fix(name, monkeypatch, tmp_path):
    """No HF_HUB_OFFLINE set and a hub that does not answer: the error comes in under 5 s
    (not after the hub client's retries, nor after building a ViT-B), naming weights_file."""
    import time

    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # an empty cache
    assert not hub.hub_reachable()
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="unreachable.*weights_file=PATH"):
        models.load_model(name, device="cpu")
    assert time.perf_counter() - start < 5
