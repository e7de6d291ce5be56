"""`python -m vitplast pretrain` end to end on fake Fashion-MNIST files: checkpoints, manifest,
model card, and loading them back through the sha256 check."""

import json

import torch

from vitplast import models, pretrain


def test_pretrain_writes_loadable_checkpoints(fake_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrain, "CHECKPOINT_EPOCHS", (1,))
    manifest = pretrain.pretrain(tmp_path / "out", epochs=2, train_limit=256, root=fake_fmnist,
                                 progress=False)
    assert list(manifest["checkpoints"]) == ["init", "epoch1", "final"]
    assert manifest["recipe"]["steps"] == 4
    on_disk = json.loads((tmp_path / "out" / "checkpoints.json").read_text())
    assert on_disk["checkpoints"] == manifest["checkpoints"]
    card = (tmp_path / "out" / "README.md").read_text()
    for entry in manifest["checkpoints"].values():
        assert entry["sha256"] in card and 0.0 <= entry["test_acc"] <= 1.0
    assert not list((tmp_path / "out").glob("*.tmp"))
    monkeypatch.setattr(models, "DATA_DIR", tmp_path / "out")
    monkeypatch.setattr(models, "MANIFEST", tmp_path / "out" / "checkpoints.json")
    init = models.load_model("vitplast_fmnist", checkpoint="init")
    final = models.load_model("vitplast_fmnist", checkpoint="final")
    assert not torch.equal(init.blocks[0].attn.qkv.weight, final.blocks[0].attn.qkv.weight)
