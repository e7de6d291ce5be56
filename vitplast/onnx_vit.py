"""An ONNX graph of a DINOv2 ViT (Hugging Face ``Dinov2Model`` names) read into a timm
``VisionTransformer``, and the proof that the two compute the same features.

How the graph holds the backbone (as ``torch.onnx.export`` wrote it from a Hugging Face model):

- LayerNorms, biases, LayerScale gammas, the CLS token and the patch embedding are named
  initializers (``backbone.encoder.layer.N.norm1.weight``, ``...attention.attention.query.bias``,
  ``...layer_scale1.lambda1``...).
- Every linear weight is an unnamed ``MatMul`` initializer (``onnx::MatMul_2065``), stored
  [in, out]; it is found through the ``Add`` that adds its named bias to the ``MatMul``'s output,
  and transposed for torch's (out, in). q, k and v concatenate (in that order) to timm's ``qkv``.
- The position embedding is two unnamed initializers that the graph interpolates to its input
  size; rather than redo that interpolation, ``backbone_state`` evaluates the graph and reads the
  tensor it adds to the token sequence, so the timm model gets exactly the graph's embedding at
  the graph's input size.

``verify`` evaluates the graph with onnxruntime (when installed) or onnx's reference evaluator
and compares the output of the graph's final backbone LayerNorm with timm's ``forward_features``.

Used by ``vitplast.fetched`` (``vitplast weights get``).
"""

from __future__ import annotations

import re

import numpy as np
import torch

from vitplast.inputs import to_model

#: The graph's names of a block's parameters -> timm's (``{n}`` is the block index). The three
#: attention projections go to ``attn.qkv`` by concatenation (``_QKV``).
BLOCK_NAMES = {
    "norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias",
    "attention.output.dense.weight": "attn.proj.weight",
    "attention.output.dense.bias": "attn.proj.bias",
    "layer_scale1.lambda1": "ls1.gamma", "layer_scale2.lambda1": "ls2.gamma",
    "norm2.weight": "norm2.weight", "norm2.bias": "norm2.bias",
    "mlp.fc1.weight": "mlp.fc1.weight", "mlp.fc1.bias": "mlp.fc1.bias",
    "mlp.fc2.weight": "mlp.fc2.weight", "mlp.fc2.bias": "mlp.fc2.bias"}
_QKV = ("query", "key", "value")
#: The graph's names of the parameters outside the blocks -> timm's.
OUTER_NAMES = {"embeddings.cls_token": "cls_token",
               "embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
               "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
               "layernorm.weight": "norm.weight", "layernorm.bias": "norm.bias"}


def _onnx():
    try:
        import onnx
    except ImportError as err:
        raise ImportError("reading an ONNX graph needs the onnx package: pip install "
                          "'vitplast[real]' (or pip install onnx onnxruntime)") from err
    return onnx


def load_graph(path):
    """The ONNX model at ``path`` (an ``onnx.ModelProto``)."""
    return _onnx().load(str(path))


def input_size(graph) -> tuple[int, int, int]:
    """(C, H, W) of the graph's image input (its batch dimension is free)."""
    dims = [d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or not all(dims[1:]):
        raise ValueError(f"the graph's input {graph.graph.input[0].name!r} is not a fixed-size "
                         f"image batch (B, C, H, W): {dims}")
    return tuple(dims[1:])


def _initializers(graph, prefix: str) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in graph.graph.initializer
            if t.name.startswith(prefix) or t.name.startswith("onnx::")}


def _producers_and_consumers(graph):
    made, used = {}, {}
    for node in graph.graph.node:
        for name in node.output:
            made[name] = node
        for name in node.input:
            used.setdefault(name, []).append(node)
    return made, used


def _linear_weights(graph, arrays: dict, prefix: str) -> dict[str, np.ndarray]:
    """Named bias -> its linear's weight (out, in): the ``MatMul`` initializer whose output the
    ``Add`` of that bias adds to."""
    made, used = _producers_and_consumers(graph)
    weights = {}
    for name in arrays:
        if not (name.startswith(prefix) and name.endswith(".bias")):
            continue
        for add in used.get(name, []):
            other = [i for i in add.input if i != name]
            matmul = made.get(other[0]) if add.op_type == "Add" and other else None
            if matmul is not None and matmul.op_type == "MatMul" and matmul.input[1] in arrays:
                weights[name[:-len("bias")] + "weight"] = arrays[matmul.input[1]].T
    return weights


def _pos_embed_tensor(graph, prefix: str) -> str:
    """The name of the tensor the graph adds to the token sequence (CLS token and patches):
    the position embedding at the graph's input size."""
    made, used = _producers_and_consumers(graph)
    cls = prefix + "embeddings.cls_token"
    for expand in used.get(cls, []):
        for concat in used.get(expand.output[0], []):
            for add in used.get(concat.output[0], []):
                if concat.op_type == "Concat" and add.op_type == "Add":
                    return next(i for i in add.input if i != concat.output[0])
    raise ValueError(f"the graph's structure changed: no Add of a position embedding to the "
                     f"sequence that starts with {cls!r} (expected Expand -> Concat -> Add)")


def features_tensor(graph, prefix: str = "backbone.") -> str:
    """The name of the backbone's output: the ``Add`` of the final LayerNorm's bias."""
    _, used = _producers_and_consumers(graph)
    adds = [n for n in used.get(prefix + "layernorm.bias", []) if n.op_type == "Add"]
    if len(adds) != 1:
        raise ValueError(f"the graph's structure changed: {prefix}layernorm.bias is added "
                         f"{len(adds)} times, expected once (the backbone's output)")
    return adds[0].output[0]


def evaluate(graph, images: np.ndarray, outputs: list[str]) -> list[np.ndarray]:
    """The graph's tensors ``outputs`` on ``images`` (float32, (B, C, H, W)): onnxruntime when
    installed, else onnx's reference evaluator (pure numpy: slow, exact)."""
    onnx = _onnx()
    model = onnx.ModelProto()
    model.CopyFrom(graph)
    del model.graph.output[:]
    for name in outputs:  # any intermediate tensor can be an output; shapes are left free
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            name, onnx.TensorProto.FLOAT, None))
    feeds = {model.graph.input[0].name: images.astype(np.float32)}
    try:
        import onnxruntime
    except ImportError:
        from onnx.reference import ReferenceEvaluator
        return list(ReferenceEvaluator(model).run(None, feeds))
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the unused decoder's shape warnings
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)


def backbone_state(graph, prefix: str = "backbone.") -> dict[str, torch.Tensor]:
    """The backbone of ``graph`` as a timm ``VisionTransformer`` state dict, its position
    embedding the graph's own at the graph's input size.

    Raises:
        ValueError: a parameter the conversion needs is missing from the graph (its names or
            structure changed), naming the first ones missing.
    """
    arrays = _initializers(graph, prefix)
    arrays.update(_linear_weights(graph, arrays, prefix))
    depth = 1 + max((int(m.group(1)) for n in arrays
                     if (m := re.match(re.escape(prefix) + r"encoder\.layer\.(\d+)\.", n))),
                    default=-1)
    wanted = {prefix + k: v for k, v in OUTER_NAMES.items()}
    for n in range(depth):
        layer = f"{prefix}encoder.layer.{n}."
        wanted.update({layer + k: f"blocks.{n}.{v}" for k, v in BLOCK_NAMES.items()})
        wanted.update({f"{layer}attention.attention.{p}.{w}": None for p in _QKV
                       for w in ("weight", "bias")})
    missing = [k for k in wanted if k not in arrays]
    if depth == 0 or missing:
        raise ValueError(f"the graph's names changed: {len(missing) or 'all'} backbone "
                         f"parameters not found, e.g. {missing[:4] or [prefix + 'encoder...']}; "
                         "the conversion reads Hugging Face Dinov2Model names")
    state = {timm: torch.tensor(arrays[k])
             for k, timm in wanted.items() if timm is not None}
    for n in range(depth):
        layer = f"{prefix}encoder.layer.{n}.attention.attention."
        for w in ("weight", "bias"):
            state[f"blocks.{n}.attn.qkv.{w}"] = torch.cat(
                [torch.tensor(arrays[f"{layer}{p}.{w}"]) for p in _QKV])
    c, h, w = input_size(graph)
    pos = evaluate(graph, np.zeros((1, c, h, w), np.float32), [_pos_embed_tensor(graph, prefix)])
    state["pos_embed"] = torch.tensor(pos[0])
    return state


@torch.no_grad()
def verify(graph, model: torch.nn.Module, images: np.ndarray, *, atol: float = 1e-4,
           prefix: str = "backbone.") -> float:
    """The largest absolute difference between the graph's backbone output and
    ``model.forward_features`` on ``images`` (moved to the model's device); ``ValueError``
    when it exceeds ``atol``."""
    expected = evaluate(graph, images, [features_tensor(graph, prefix)])[0]
    x = to_model(model, torch.from_numpy(images.astype(np.float32)))  # (N, C, H, W)
    got = model.eval().forward_features(x).float().cpu().numpy()  # (N, 1 + patches, D)
    if got.shape != expected.shape:
        raise ValueError(f"the converted model's features have shape {got.shape}, the graph's "
                         f"{expected.shape}")
    diff = float(np.abs(got - expected).max())
    if not diff <= atol:
        raise ValueError(f"the converted model's features differ from the graph's by {diff:.3g} "
                         f"(max abs) on {len(images)} fixed images; allowed: {atol:g}")
    return diff
