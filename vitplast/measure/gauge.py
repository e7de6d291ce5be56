"""The residual-stream gauge: the same pre-norm ViT with its residual stream c times larger.

Paper: not in the paper; it bears on Takeaways 2-3 (issue 28). A pre-norm block computes
``x + ls1(attn(norm1(x)))`` then ``x + ls2(mlp(norm2(x)))``: every branch reads the stream
through a LayerNorm, and LayerNorm removes a positive scale. Multiply by c > 0

- the embedding (``patch_embed.proj`` weight and bias, ``pos_embed``, ``cls_token``,
  ``reg_token``, ``dist_token``): the first stream x_0 becomes c x_0;
- the output of every residual branch (``attn.proj`` and ``mlp.fc2``, weight and bias): if
  the stream is c x_l, each LayerNorm gives the branch the same input, the branch returns c
  times its output (LayerScale, dropout and drop-path are linear: they commute), so the
  stream stays c x_{l+1};

and the final norm (``norm``, or ``fc_norm`` after a positively homogeneous pooling) removes c
before the head. This is ``rescale_stream``.

**Why it is exact only up to eps.** LayerNorm divides by sqrt(var + eps):
``LN(c x; eps) = (x - mean) / sqrt(var + eps / c^2) = LN(x; eps / c^2)``. So the gauged model
IS the original with the eps of every LayerNorm that reads the stream (norm1, norm2, the final
norm; not a qk-norm inside a branch) divided by c^2 (exactly, in exact arithmetic), and
``rescale_stream(..., scale_eps=True)`` (eps times c^2) is exactly the same function. With eps
kept, the difference is f(eps / c^2) - f(eps) = -(1 - c^-2) eps df/deps + O(eps^2): to first
order, (1 - c^-2) times the change that removing eps altogether makes, f(0) - f(eps); each
LayerNorm's output moves by a relative 1 - sqrt((s^2 + eps/c^2)/(s^2 + eps)) <=
(1 - c^-2) eps / (2 s^2) for a token of variance s^2 (``layernorm_shift``). That is the
tolerance of the tests (``tests/measure/test_gauge.py``).

**What plasticity does** (``RATE_FACTORS``). Under the ``hidden`` protocol a LayerNorm's input
is c times larger and its output the same: its rate is divided by c. MHA and FC2 read the
same input and write c times their output: rates times c. FC1 reads LN2's output and writes
into GELU: unchanged. Under the ``embedding`` protocol every component reads c times the
embedding: LayerNorms / c, FC1 unchanged (affine: the bias cancels), FC2 times c (linear in its
input and its weight); MHA's is not derived (attention is not scale-invariant).

**What finetuning does** (``vitplast.train.invariance.finetuning_equivalence``). Write
theta' = S theta (S multiplies the gauged parameters by c). The loss is the same function,
L'(theta') = L(S^-1 theta'), so grad' = S^-1 grad: parameters the gauge does not scale (qkv,
fc1, the LayerNorms, the final norm, the head) get the same gradient, the scaled ones (proj,
fc2, the embedding) grad / c.
- A configuration that trains no scaled parameter (head, LN1, LN2, FC1, and the head and
  final norm that train in every configuration) follows the SAME trajectory at every c, under
  the whole recipe: SGD with momentum, the global-norm clip (its norm is over identical
  gradients), warm-up and cosine schedule, even weight decay.
- A configuration that trains scaled parameters (MHA through ``proj``, FC2, the embedding,
  full): with SGD (any momentum, it is linear in the steps) and weight decay 0, a step of lr
  grad / c on c theta is a step of lr grad / c^2 on theta: the gauged run IS the original run
  with those parameters' LR divided by c^2 (``train(lr_scales=...)``), step for step; the
  others (qkv in MHA; qkv, fc1, the norms and the head in full) keep their LR. The
  global-norm clip breaks it whenever it acts: the gauged run's norm counts the scaled
  gradients divided by c, the original's does not, so their clip factors differ (when neither
  exceeds the clip, nothing changes). Under Adam the update is scale-free (up to its eps): an
  LR change of 1 / c, not 1 / c^2. Weight decay on a scaled parameter becomes c^2 times
  stronger relative to the gradient.

Sweep interface: a run with ``prepare="gauge"`` and ``ablation=dict(c=8.0)`` (optional
``scale_eps=False``) trains the gauged model (``ablations.PREPARE["gauge"]``, applied after the
new head).
"""

from __future__ import annotations

import copy
import fnmatch
import math

import torch
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn

from vitplast.inputs import to_model
from vitplast.measure.components import check_supported, rate_factors

#: Parameter-name patterns the gauge multiplies by c (those present in a model).
GAUGED = ["patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed", "cls_token",
          "reg_token", "dist_token", "blocks.*.attn.proj.weight", "blocks.*.attn.proj.bias",
          "blocks.*.mlp.fc2.weight", "blocks.*.mlp.fc2.bias"]
#: The embedding's parameters among ``GAUGED`` (``scale_embedding``).
EMBEDDING = GAUGED[:6]
#: Derived factor of each component's rate under the gauge, per protocol, as a function of c
#: (None: not derived): a view of ``components.TABLE`` (``Component.gauge``).
RATE_FACTORS = rate_factors()
#: Pooling of the final tokens that commutes with a positive scale (needed when the final
#: norm comes after it, as ``fc_norm``).
_HOMOGENEOUS_POOLS = ("token", "avg", "max", "avgmax")


def _refuse(reason: str) -> None:
    raise TypeError(f"the residual-stream gauge is not function-preserving here: {reason}")


def _is_layernorm(m: nn.Module) -> bool:
    return isinstance(m, nn.LayerNorm)


def _check_final_norm(model: nn.Module) -> None:
    if _is_layernorm(getattr(model, "norm", None)):
        return
    if not isinstance(getattr(model, "norm", None), nn.Identity):
        _refuse(f"final norm is {type(model.norm).__name__}, not a LayerNorm")
    pool = getattr(model, "global_pool", "")
    if _is_layernorm(getattr(model, "fc_norm", None)) and pool in _HOMOGENEOUS_POOLS \
            and getattr(model, "attn_pool", None) is None:
        return
    _refuse("no final LayerNorm (norm, or fc_norm after token/avg/max pooling): the head "
            "would read c times the features")


def check_gauge(model: nn.Module) -> None:
    """Raise ``TypeError``, with the reason, unless ``gauge`` preserves ``model``'s function.

    Supported: timm ``VisionTransformer`` (and subclasses such as DeiT-distilled) with pre-norm
    ``Block``s whose norm1 / norm2 are LayerNorms, LayerScale or not (it is linear), qk-norm or
    not (inside the branch), and a final LayerNorm. Refused: post-norm blocks
    (``ResPostBlock``: the branch reads the raw stream), parallel or other block types, a
    LayerNorm before the blocks (``norm_pre``) or inside the patch embedding (it would
    remove the scale before the stream), non-LayerNorm norms, a missing final norm, EVA.
    """
    name = type(model).__name__
    if name == "Eva" or "eva" in str(getattr(model, "pretrained_cfg", {}).get("architecture", "")):
        _refuse("timm's EVA (rotary embeddings, SwiGLU, its own block) is not a derived case")
    if not isinstance(model, VisionTransformer):
        _refuse(f"{name} is not a timm VisionTransformer")
    for i, block in enumerate(model.blocks):
        if not isinstance(block, Block) or type(block).forward is not Block.forward:
            _refuse(f"blocks[{i}] is {type(block).__name__}: only the pre-norm Block "
                    "(x + ls(branch(norm(x)))) is derived; post-norm branches read the raw stream")
    try:
        check_supported(model)
    except TypeError as err:
        _refuse(str(err))
    if not isinstance(model.norm_pre, nn.Identity):
        _refuse("norm_pre (a LayerNorm before the blocks) would remove the embedding's scale")
    if not isinstance(getattr(model.patch_embed, "norm", nn.Identity()), nn.Identity):
        _refuse("the patch embedding ends in a norm, which would remove its scale")
    for i, block in enumerate(model.blocks):
        for norm in ("norm1", "norm2"):
            if not _is_layernorm(getattr(block, norm)):
                _refuse(f"blocks[{i}].{norm} is {type(getattr(block, norm)).__name__}, not a "
                        "LayerNorm")
        if not isinstance(block.mlp.fc2, nn.Linear):
            _refuse(f"blocks[{i}].mlp has no fc2 linear")
    _check_final_norm(model)


def gauged_names(model: nn.Module, patterns: list[str] = GAUGED) -> list[str]:
    """Names of ``model``'s parameters the gauge multiplies by c (of ``patterns``)."""
    return [n for n, _ in model.named_parameters()
            if any(fnmatch.fnmatch(n, pat) for pat in patterns)]


def _scale(model: nn.Module, c: float, patterns: list[str]) -> None:
    if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
        raise ValueError(f"gauge scale c must be a finite number > 0, got {c!r}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in gauged_names(model, patterns):
            params[n].mul_(c)


def rescale_stream(model: nn.Module, c: float, *, scale_eps: bool = False) -> nn.Module:
    """Multiply the residual stream of a pre-norm ViT by ``c``, in place (module docstring).

    Paper: none (issue 28); the plasticity of its components moves by ``RATE_FACTORS``.

    Args:
        c: the scale (> 0); ``rescale_stream(rescale_stream(m, c), 1 / c)`` is ``m`` up to
            round-off.
        scale_eps: also multiply the eps of every LayerNorm that reads the stream by c^2, so
            the function is exactly the same (else it is the original with those eps / c^2:
            equal within LayerNorm's eps).

    Raises:
        TypeError: an architecture where the gauge is not function-preserving (``check_gauge``).
        ValueError: c not a finite number > 0.
    """
    check_gauge(model)
    _scale(model, c, GAUGED)
    if scale_eps:
        for m in _stream_norms(model):
            m.eps *= c * c
    return model


def _stream_norms(model: nn.Module) -> list[nn.LayerNorm]:
    """The LayerNorms that read the residual stream (norm1, norm2 of every block, the final
    norm): not those inside a branch (qk-norm, scale-norm), which see unscaled inputs."""
    norms = [b.norm1 for b in model.blocks] + [b.norm2 for b in model.blocks]
    return norms + [m for m in (model.norm, getattr(model, "fc_norm", None)) if _is_layernorm(m)]


def scale_embedding(model: nn.Module, c: float) -> nn.Module:
    """Multiply only the embedding (patch embedding, positions, CLS and other tokens) by ``c``,
    in place: NOT function-preserving (the branches' outputs keep their scale), but what the
    ``embedding`` protocol sees of the gauge."""
    check_gauge(model)
    _scale(model, c, EMBEDDING)
    return model


def layernorm_shift(sigma: float, eps: float, c: float) -> float:
    """Relative change of a LayerNorm's output on a token of std ``sigma`` (sqrt of its
    variance, without eps) when its input is multiplied by c: 1 - sqrt((s^2 + eps/c^2) /
    (s^2 + eps)), which is at most (1 - c^-2) eps / (2 s^2)."""
    s2 = sigma * sigma
    return 1.0 - math.sqrt((s2 + eps / (c * c)) / (s2 + eps))


@torch.no_grad()
def function_gap(model: nn.Module, images: torch.Tensor, c: float) -> dict:
    """How far ``rescale_stream(model, c)`` is from ``model`` on ``images`` (``model`` untouched):
    ``max_logit_diff``; ``first_order``, the derived size (1 - c^-2) max|f_eps=0 - f| (module
    docstring); ``same_predictions``, the fraction of equal argmax."""
    model, images = model.eval(), to_model(model, images)
    f = model(images)
    gauged = rescale_stream(copy.deepcopy(model), c)(images)
    no_eps = copy.deepcopy(model)
    for m in _stream_norms(no_eps):
        m.eps = 0.0
    d0 = (no_eps(images) - f).abs().max().item()
    return dict(c=c, max_logit_diff=(gauged - f).abs().max().item(),
                first_order=(1 - c ** -2) * d0,
                same_predictions=(gauged.argmax(1) == f.argmax(1)).float().mean().item())


def prepare(model: nn.Module, run: dict) -> None:
    """The sweep's ``prepare`` for ``prepare="gauge"``: ``rescale_stream(model, **run["ablation"])``
    (keys ``c``, optional ``scale_eps``)."""
    a = dict(run["ablation"])
    unknown = set(a) - {"c", "scale_eps"}
    if "c" not in a or unknown:
        raise ValueError(f"ablation of prepare='gauge' takes c (and scale_eps), got {sorted(a)}")
    rescale_stream(model, float(a["c"]), scale_eps=bool(a.get("scale_eps", False)))


__all__ = ["GAUGED", "EMBEDDING", "RATE_FACTORS", "check_gauge", "gauged_names", "rescale_stream",
           "scale_embedding", "layernorm_shift", "function_gap", "prepare"]
