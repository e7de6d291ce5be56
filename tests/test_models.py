"""Model loading: the embedded checkpoints (sha256, accuracy), local files, clear errors."""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from vitplast import data, finetune, models


def test_embedded_checkpoint_matches_its_model_card():
    card = models.embedded_checkpoints()["final"]
    model = models.load_model("vitplast_fmnist")
    x, y = data.fashion_mnist_arrays(train=False)
    test = torch.utils.data.Subset(data.NormalizedTensors(x, y), range(1000))
    _, acc = finetune.evaluate(model, test)
    assert acc == pytest.approx(card["test_acc_first1000"], abs=0.002)
    assert card["test_acc"] >= 0.88


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


def test_manifest_lists_sha256_of_each_file():
    manifest = json.loads(models.MANIFEST.read_text())
    for entry in manifest["checkpoints"].values():
        assert models.sha256(models.DATA_DIR / entry["file"]) == entry["sha256"]
