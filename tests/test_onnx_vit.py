"""The conversion of an ONNX DINOv2 graph (Hugging Face names) to a timm state dict
(``vitplast.onnx_vit``), on a tiny graph with the real one's names and structure that
the test builds itself (``tiny_dinov2_graph``): every parameter lands where timm's own is, the
converted model computes the graph's features, and a graph that changed is refused by name."""

import sys

import numpy as np
import pytest
import timm
import tiny_dinov2_graph as tiny
import torch
from fake_cuda import FakeCuda, on_fake_cuda
from onnx import numpy_helper

from vitplast import fetched, onnx_vit

IMAGES = np.random.default_rng(1).standard_normal((2, 3, tiny.IMG_SIZE, tiny.IMG_SIZE)).astype(
    np.float32)


@pytest.fixture(scope="module")
def graph():
    return tiny.build()


def _timm(num_heads=tiny.HEADS):
    kwargs = dict(tiny.KWARGS, num_heads=num_heads)
    return timm.create_model(tiny.ARCH, pretrained=False, img_size=tiny.IMG_SIZE, **kwargs)


def test_the_converted_state_is_timms_own(graph):
    """Every parameter of the timm model the graph was made from, at the graph's input size,
    comes back under timm's name: exactly, but the position embedding, which the graph
    interpolates (bicubic) and torch's bicubic matches to float precision; it loads strictly
    and computes the graph's features."""
    state = onnx_vit.backbone_state(graph.model)
    expected = tiny.timm_at(graph.source).state_dict()
    assert sorted(state) == sorted(expected)
    differ = [k for k in expected if k != "pos_embed" and not torch.equal(state[k], expected[k])]
    assert differ == []
    assert state["pos_embed"].shape == (1, 1 + (tiny.IMG_SIZE // tiny.PATCH) ** 2, tiny.DIM)
    torch.testing.assert_close(state["pos_embed"], expected["pos_embed"], atol=1e-6, rtol=0)
    model = _timm()
    model.load_state_dict(state, strict=True)
    diff = onnx_vit.verify(graph.model, model, IMAGES, atol=1e-4)
    assert diff <= 1e-5  # float32 rounding only


def test_verify_moves_the_images_to_the_models_device(graph):
    """The converted model on a (simulated) GPU: ``verify`` moves the images there and brings
    the features back, with the CPU's numbers."""
    model = _timm()
    model.load_state_dict(onnx_vit.backbone_state(graph.model), strict=True)
    expected = onnx_vit.verify(graph.model, model, IMAGES, atol=1e-4)
    with FakeCuda():
        assert onnx_vit.verify(graph.model, on_fake_cuda(model), IMAGES, atol=1e-4) == expected


def test_qkv_is_query_then_key_then_value_transposed(graph):
    """timm's qkv rows are q, k, v; the graph stores them [in, out] and in the order k, v, q,
    so a conversion by order, or without the transpose, would be caught here."""
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.model.graph.initializer}
    state = onnx_vit.backbone_state(graph.model)
    d = tiny.DIM
    for n in range(tiny.DEPTH):
        layer = f"backbone.encoder.layer.{n}.attention.attention."
        order = [int(graph.matmuls[layer + p + ".weight"].rsplit("_", 1)[1])
                 for p in ("key", "value", "query")]
        assert order == sorted(order)  # the graph holds them k, v, q
        qkv_w, qkv_b = state[f"blocks.{n}.attn.qkv.weight"], state[f"blocks.{n}.attn.qkv.bias"]
        for i, part in enumerate(("query", "key", "value")):
            stored = arrays[graph.matmuls[layer + part + ".weight"]]  # [in, out]
            assert torch.equal(qkv_w[i * d:(i + 1) * d], torch.tensor(stored.T))
            bias = arrays[layer + part + ".bias"]
            assert torch.equal(qkv_b[i * d:(i + 1) * d], torch.tensor(bias))
        fc1 = arrays[graph.matmuls[f"backbone.encoder.layer.{n}.mlp.fc1.weight"]]
        assert fc1.shape == (d, 4 * d)
        assert torch.equal(state[f"blocks.{n}.mlp.fc1.weight"], torch.tensor(fc1.T))


@pytest.mark.parametrize("old, missing", [
    ("backbone.encoder.layer.1.norm2.weight", ["backbone.encoder.layer.1.norm2.weight"]),
    # a linear's bias renamed: its unnamed weight is found through that bias, so both are lost
    ("backbone.encoder.layer.0.attention.attention.value.bias",
     ["backbone.encoder.layer.0.attention.attention.value.weight",
      "backbone.encoder.layer.0.attention.attention.value.bias"]),
    ("backbone.embeddings.cls_token", ["backbone.embeddings.cls_token"])])
def test_a_graph_whose_names_changed_is_refused_naming_what_is_missing(graph, old, missing):
    changed = tiny.renamed(graph.model, old, old.replace("backbone.", "encoder_v2.", 1))
    with pytest.raises(ValueError, match="names changed") as err:
        onnx_vit.backbone_state(changed)
    assert all(name in str(err.value) for name in missing), str(err.value)
    assert "Dinov2Model" in str(err.value)


def test_a_model_that_computes_otherwise_fails_the_proof(graph):
    """The head count is not in the parameters (12 = 2 x 6 = 3 x 4): a wrong one loads strictly
    and is caught only by the features; so is one changed LayerScale gamma."""
    state = onnx_vit.backbone_state(graph.model)
    wrong_heads = _timm(num_heads=3)
    wrong_heads.load_state_dict(state, strict=True)
    with pytest.raises(ValueError, match=r"differ from the graph's by .* allowed: 0.0001"):
        onnx_vit.verify(graph.model, wrong_heads, IMAGES)
    model = _timm()
    model.load_state_dict(dict(state, **{"blocks.1.ls2.gamma": state["blocks.1.ls2.gamma"] * 1.01}))
    with pytest.raises(ValueError, match="differ from the graph's"):
        onnx_vit.verify(graph.model, model, IMAGES)


def test_the_backbone_output_is_the_final_layernorm_not_the_graphs_output(graph):
    name = onnx_vit.features_tensor(graph.model)
    assert name not in [o.name for o in graph.model.graph.output]
    features, out = onnx_vit.evaluate(graph.model, IMAGES, [name, "output_importance"])
    assert features.shape == (2, 5, tiny.DIM) and out.shape == (2, 1)
    assert onnx_vit.input_size(graph.model) == (3, tiny.IMG_SIZE, tiny.IMG_SIZE)


def test_without_onnxruntime_the_reference_evaluator_gives_the_same_features(graph, monkeypatch):
    name = onnx_vit.features_tensor(graph.model)
    with torch.no_grad():
        timm_features = tiny.timm_at(graph.source).forward_features(torch.from_numpy(IMAGES))
    try:
        import onnxruntime  # noqa: F401
        runtime = onnx_vit.evaluate(graph.model, IMAGES, [name])[0]
    except ImportError:
        runtime = None
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    with pytest.raises(ImportError):
        import onnxruntime  # noqa: F401
    reference = onnx_vit.evaluate(graph.model, IMAGES, [name])[0]
    np.testing.assert_allclose(reference, timm_features.numpy(), atol=1e-5, rtol=0)
    if runtime is not None:
        np.testing.assert_allclose(reference, runtime, atol=1e-5, rtol=0)
    assert "reference evaluator" in fetched._evaluator()
