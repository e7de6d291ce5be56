"""Components: the five parts of a pre-norm ViT block, as named selectors over a timm model.

Paper: section 3, the components LN1, MHA, LN2, FC1, FC2 of every block.

=========  ======================  =============================================
component  timm module (block i)   what it computes
=========  ======================  =============================================
LN1        ``blocks.i.norm1``      LayerNorm before attention
MHA        ``blocks.i.attn``       multi-head self-attention incl. output projection
LN2        ``blocks.i.norm2``      LayerNorm before the MLP
FC1        ``blocks.i.mlp.fc1``    first MLP linear (d -> 4d)
FC2        ``blocks.i.mlp.fc2``    second MLP linear (4d -> d)
=========  ======================  =============================================

A component's output is its module's own output: before LayerScale (``ls1``/``ls2`` in
DINOv2-style models), dropout and the residual connection.

Finetuning configurations (``CONFIGS``) name the parameters each configuration trains; the
new head and the final norm (``ALWAYS_TRAINED``) train in every configuration, as in the paper.
"""

from __future__ import annotations

import contextlib
import fnmatch
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a model is used, so that the names and groups
    from torch import nn  # above import without it (the findings, ``results``)

#: Paper name -> module path inside a block, in block order.
COMPONENTS = {"LN1": "norm1", "MHA": "attn", "LN2": "norm2", "FC1": "mlp.fc1", "FC2": "mlp.fc2"}
#: The two groups the paper's gap is between (Table 1, Takeaway 3): attention and the MLP
#: linears (~28M parameters each on ViT-B), and the LayerNorms (18K each).
LINEARS = ("MHA", "FC1", "FC2")
NORMS = ("LN1", "LN2")

#: Finetuning configuration -> parameter-name patterns (fnmatch) it trains.
CONFIGS = {
    "full": ["*"],
    "head": [],
    **{c: [f"blocks.*.{path}.*"] for c, path in COMPONENTS.items()},
    "embedding": ["patch_embed.*", "cls_token", "reg_token", "pos_embed"],
}
#: The paper's seven finetuning configurations (section 5), in the order of its grid.
PAPER_CONFIGS = ("full", "head", "LN1", "MHA", "LN2", "FC1", "FC2")
#: The order tables and figures list configurations in: full, head-only, then the components
#: in the order of the paper's Table 1 (others follow as they come).
CONFIG_ORDER = ("full", "head", "MHA", "FC1", "FC2", "LN2", "LN1")
#: Parameters that train in every configuration (the new head and the final norm).
ALWAYS_TRAINED = ["head.*", "norm.*", "fc_norm.*", "head_norm.*"]


def check_supported(model: nn.Module) -> None:
    """Raise a clear error unless ``model`` has hookable ViT blocks with the five components.

    timm's EVA, for example, applies its qkv projection functionally inside ``attn`` and has
    no ``norm1 -> attn(qkv, proj)`` layout that hooks can observe the same way.
    """
    from torch import nn

    name = type(model).__name__
    if name == "Eva" or "eva" in str(getattr(model, "pretrained_cfg", {}).get("architecture", "")):
        raise TypeError("timm's EVA applies qkv functionally (with rotary embeddings), so "
                        "component hooks would not see the same computation; use a "
                        "VisionTransformer (vit_*, deit_*, vit_*_dinov2)")
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, (nn.Sequential, nn.ModuleList)) or len(blocks) == 0:
        raise TypeError(f"{name} has no `blocks` sequence: vitplast supports timm "
                        "VisionTransformer models (ViT, DeiT, DINOv2-style with LayerScale)")
    for i, block in enumerate(blocks):
        for comp in COMPONENTS:
            module = _get(block, COMPONENTS[comp])
            if module is None:
                raise TypeError(f"{name}.blocks[{i}] has no `{COMPONENTS[comp]}` ({comp}); "
                                f"expected a pre-norm ViT block with {list(COMPONENTS.values())}")
        attn = block.attn
        if not (isinstance(getattr(attn, "qkv", None), nn.Linear)
                and isinstance(getattr(attn, "proj", None), nn.Linear)):
            raise TypeError(f"{name}.blocks[{i}].attn ({type(attn).__name__}) has no fused "
                            "`qkv` and `proj` linears: MHA bounds and counts need them")


def _get(root: nn.Module, path: str):
    for part in path.split("."):
        root = getattr(root, part, None)
        if root is None:
            return None
    return root


def check_component(component: str) -> str:
    """Return ``component`` if valid, else raise naming the valid ones."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; valid: {list(COMPONENTS)}")
    return component


def component_modules(model: nn.Module) -> dict[tuple[int, str], nn.Module]:
    """(layer, component) -> module, for every block of a supported model."""
    check_supported(model)
    return {(i, c): _get(block, path) for i, block in enumerate(model.blocks)
            for c, path in COMPONENTS.items()}


def component_of(param_name: str) -> str:
    """The group a parameter belongs to: a component name, ``head``, ``norm``, or ``other``."""
    for comp, path in COMPONENTS.items():
        if fnmatch.fnmatch(param_name, f"blocks.*.{path}.*"):
            return comp
    if param_name.startswith("head"):
        return "head"
    if param_name.startswith(("norm.", "fc_norm.")):
        return "norm"
    if fnmatch.fnmatch(param_name, "blocks.*"):
        return "other"  # LayerScale, ...
    return "embedding"


def count_parameters(model: nn.Module, component: str) -> int:
    """Number of parameters of ``component`` summed over all blocks (exact)."""
    check_component(component)
    return sum(p.numel() for n, p in model.named_parameters() if component_of(n) == component)


def trainable_names(model: nn.Module, config: str | list[str], *, train_head: bool = True
                    ) -> list[str]:
    """Names of the parameters a finetuning configuration trains.

    Args:
        config: a name in ``CONFIGS`` or a list of fnmatch patterns over parameter names.
        train_head: also train the head and final norm (the paper always does).

    Raises:
        ValueError: an unknown configuration name; patterns that select no parameter (a typo
            would otherwise train the head alone); nothing to train. The message names the
            patterns and some of the model's parameter names.
    """
    patterns = _patterns(config)
    names = [n for n, _ in model.named_parameters()]
    chosen = [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]
    if not chosen and (patterns or not train_head):
        examples = [n for n in names if n.startswith(("blocks.0.", "patch_embed."))][:6]
        what = ("only the head and final norm would train" if train_head
                else "nothing would train")
        raise ValueError(f"configuration {config!r} selects no parameter of "
                         f"{type(model).__name__} ({what}); its parameter names look like "
                         f"{examples}: use a configuration of {list(CONFIGS)} or patterns "
                         "matching such names")
    if train_head:
        chosen = [n for n in names if any(fnmatch.fnmatch(n, p)
                                          for p in patterns + ALWAYS_TRAINED)]
    return chosen


def _patterns(config) -> list[str]:
    """The patterns of a configuration name or a list of patterns."""
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"unknown configuration {config!r}; valid: {list(CONFIGS)} "
                             "or a list of parameter-name patterns")
        return list(CONFIGS[config])
    if not isinstance(config, (list, tuple)) or not all(isinstance(p, str) for p in config):
        raise ValueError(f"config={config!r} is not valid: a configuration takes a name of "
                         f"{list(CONFIGS)} or a list of parameter-name patterns (strings)")
    return list(config)


def set_trainable(model: nn.Module, names: list[str]) -> int:
    """Turn ``requires_grad`` on for exactly ``names`` and off for all others; return the count."""
    chosen = set(names)
    unknown = chosen - {n for n, _ in model.named_parameters()}
    if unknown:
        raise ValueError(f"no such parameters: {sorted(unknown)[:5]}")
    total = 0
    for n, p in model.named_parameters():
        p.requires_grad_(n in chosen)
        total += p.numel() if n in chosen else 0
    return total


def trainable_table(model: nn.Module, configs, *, train_head: bool = True):
    """Exact trainable-parameter counts per configuration (``trainable``), and their share of
    the model (``percent``): a DataFrame, one row per configuration (``config``; a list of
    patterns as JSON). Paper: section 5 (what each configuration trains).
    """
    import json

    import pandas as pd

    total = sum(p.numel() for p in model.parameters())
    rows = []
    for config in configs:
        names = set(trainable_names(model, config, train_head=train_head))
        n = sum(p.numel() for name, p in model.named_parameters() if name in names)
        rows.append(dict(config=config if isinstance(config, str) else json.dumps(config),
                         trainable=n, percent=100 * n / total))
    return pd.DataFrame(rows)



@contextlib.contextmanager
def unfused_attention(module):
    """timm's attention on its matmul path inside the block (``fused_attn`` off in every
    attention of ``module``; anything else passes through), restored after: the fused kernel
    has no forward-mode AD on a CPU (``bounds``) and no vmap batching rule (``batched``)."""
    from torch import nn

    attns = [m for m in module.modules() if hasattr(m, "fused_attn")] if isinstance(
        module, nn.Module) else []
    saved = [m.fused_attn for m in attns]
    for m in attns:
        m.fused_attn = False
    try:
        yield
    finally:
        for m, s in zip(attns, saved):
            m.fused_attn = s


__all__ = ["ALWAYS_TRAINED", "COMPONENTS", "CONFIGS", "PAPER_CONFIGS", "check_component",
           "check_supported", "component_modules", "component_of", "count_parameters",
           "set_trainable", "trainable_names", "trainable_table", "unfused_attention"]
