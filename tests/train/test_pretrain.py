"""`python -m vitplast pretrain` end to end on fake Fashion-MNIST files, with a tiny
architecture (seconds): checkpoints, manifest, model card, resume at stage boundaries, and
loading them back (in the manifest's architecture) through the sha256 check."""

import json

import pytest
import torch

from vitplast import models
from vitplast.train import pretrain

STAGES = ((2, 1e-3, 0), (1, 5e-4, 1))
#: A one-block ViT of the embedded model's input format: the recipe runs as is, in seconds.
TINY_ARCH = dict(models.EMBEDDED_ARCH, patch_size=7, embed_dim=32, depth=1, num_heads=2)


def test_pretrain_writes_loadable_checkpoints(fake_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrain, "CHECKPOINT_EPOCHS", (1, 2))
    out = tmp_path / "out"
    manifest = pretrain.pretrain(out, stages=STAGES, train_limit=256, arch=TINY_ARCH,
                                 root=fake_fmnist, progress=False)
    assert list(manifest["checkpoints"]) == ["init", "epoch1", "epoch2", "final"]
    assert [c["step"] for c in manifest["checkpoints"].values()] == [0, 2, 4, 6]
    on_disk = json.loads((out / "checkpoints.json").read_text())
    assert on_disk["checkpoints"] == manifest["checkpoints"]
    card = (out / "README.md").read_text()
    for entry in manifest["checkpoints"].values():
        assert entry["sha256"] in card and 0.0 <= entry["test_acc"] <= 1.0
    assert not list(out.glob("*.tmp"))
    monkeypatch.setattr(models, "DATA_DIR", out)
    monkeypatch.setattr(models, "MANIFEST", out / "checkpoints.json")
    init = models.load_model("vitplast_fmnist", checkpoint="init")
    final = models.load_model("vitplast_fmnist", checkpoint="final")
    assert len(final.blocks) == 1 and final.embed_dim == 32  # the manifest's architecture
    assert f"{sum(p.numel() for p in final.parameters()):,} parameters" in card
    assert not torch.equal(init.blocks[0].attn.qkv.weight, final.blocks[0].attn.qkv.weight)
    from_folder = models.load_pretrained(out, "final", device="cpu")  # no monkeypatch needed
    assert all(torch.equal(a, b) for a, b in zip(from_folder.state_dict().values(),
                                                 final.state_dict().values()))

    # Resume: with the final checkpoint gone, only the last stage runs again, to the same bits.
    (out / final_file(manifest)).unlink()
    del on_disk["checkpoints"]["final"]
    (out / "checkpoints.json").write_text(json.dumps(on_disk))
    calls = []
    monkeypatch.setattr(pretrain.finetune, "train", counting(pretrain.finetune.train, calls))
    again = pretrain.pretrain(out, stages=STAGES, train_limit=256, arch=TINY_ARCH,
                              root=fake_fmnist, progress=False)
    assert len(calls) == 1 and calls[0]["seed"] == 1
    assert again["checkpoints"]["final"]["sha256"] == manifest["checkpoints"]["final"]["sha256"]


def final_file(manifest):
    return manifest["checkpoints"]["final"]["file"]


def counting(fn, calls):
    def wrapper(*args, **kwargs):
        calls.append(kwargs)
        return fn(*args, **kwargs)
    return wrapper


def test_weight_decay_and_stages_reach_the_optimizer_manifest_and_command(fake_fmnist, tmp_path,
                                                                           monkeypatch):
    """A second recipe (no weight decay, one stage) trains with it, says so in the manifest and
    the command that remakes it, and does not resume from the shipped recipe's checkpoints."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(pretrain.finetune, "train", counting(pretrain.finetune.train, calls))
    out = tmp_path / "out"
    pretrain.pretrain(out, stages=STAGES, train_limit=128, arch=TINY_ARCH, root=fake_fmnist,
                      progress=False)
    assert [c["weight_decay"] for c in calls] == [pretrain.RECIPE["weight_decay"]] * 2
    calls.clear()
    manifest = pretrain.pretrain(out, stages=((1, 2e-3, 0),), weight_decay=0.0, train_limit=128,
                                 arch=TINY_ARCH, root=fake_fmnist, progress=False)
    assert [(c["weight_decay"], c["lr"]) for c in calls] == [(0.0, 2e-3)]  # started over
    assert manifest["recipe"]["weight_decay"] == 0.0
    assert manifest["command"] == "python -m vitplast pretrain --weight-decay 0 --stages 1:0.002:0"
    assert "weight decay 0.0" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match=r"valid: \['init', 'final'\]"):
        models.load_pretrained(out, "epoch9")
    (out / manifest["checkpoints"]["final"]["file"]).write_bytes(b"changed")
    with pytest.raises(ValueError, match="sha256"):
        models.load_pretrained(out)
