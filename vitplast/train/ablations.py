"""Confound ablations: does plasticity or the trainable-parameter count drive the gap?

Paper: objections 3 and 4, docs/objections.md (the cross-group comparison puts 28M-parameter
configurations against 18K-parameter LayerNorms). Each ablation is a model change applied
before the one training loop (named in ``PREPARE``), so every
experiment differs from the main study only in arguments.

- ``rescale_layernorm``: LayerNorm gamma and beta times c. ``preserve=True`` also divides the
  next linear's weight by c (qkv after LN1, fc1 after LN2): the network computes the same
  function, while the LayerNorm's plasticity is multiplied by c (its output is c times
  larger, its input unchanged). When is it only a learning-rate change? The function is the
  same, so every other trainable parameter (the head, the final norm) gets the same gradient;
  the LayerNorm's gradient in the rescaled units is g / c, so an SGD step of lr g / c there is
  lr g / c^2 in the original units, and momentum, linear in the steps, keeps that. Hence,
  with SGD (any momentum), weight decay 0 (decay would act on c gamma), no gradient clipping,
  and the next linear frozen, the preserved rescale IS the plain model with the LayerNorm's LR
  divided by c^2 (the ``lr/c^2`` control), step for step. A global gradient-norm clip that
  acts breaks it: the LayerNorm enters the global norm as g / c in one model and g in the
  other, so the clip factors differ, by as much as its share of the norm (tested in
  ``tests/test_ablations.py``). Under Adam the update is scale-free, so the rescale is an LR
  change of 1/c there, not 1/c^2.
- ``sparse_masks``: a random subset of exactly ``count`` entries of a component is trainable
  (gradient masking inside the training loop, so the others never change).
- ``add_lora``: low-rank adapters W + B A (B zero-initialised: identity at start) on a
  component's linears (``lora_count`` their parameters). A small in-house LoRA keeps the
  dependency list short, and ``LoRALinear.merged`` is the plain linear it computes.
- bias-only (BitFit-style) configurations are plain parameter patterns (``BIAS_ONLY``).
- ``gauge`` (registered here, defined in ``vitplast.measure.gauge``): the residual stream times c,
  the same function with another plasticity ranking.
"""

from __future__ import annotations

import fnmatch
import math
from types import MappingProxyType

import torch
from torch import nn

from vitplast.measure import gauge
from vitplast.measure.components import (
    TABLE,
    check_component,
    component_modules,
    component_of,
    modules,
    submodule,
)

#: The LayerNorm components that ``rescale_layernorm`` rescales: the norms of ``TABLE`` that
#: are a module and have a row after them, whose first linear reads their output
#: (``next_linear``; the table is in block order).
RESCALABLE = tuple(c.name for c, after in zip(TABLE, TABLE[1:])
                   if c.group == "norm" and c.module and after.module)
#: Bias-only configurations (parameter patterns), one per component that is a module.
BIAS_ONLY = {c: [f"blocks.*.{path}.bias", f"blocks.*.{path}.*.bias"]
             for c, path in modules().items() if path is not None}
#: The components LoRA adapts: the linear ones of ``TABLE`` that are a module (its adapters go
#: on the linears inside it: ``lora_targets``).
LORA_COMPONENTS = tuple(c.name for c in TABLE if c.group == "linear" and c.module)


def _linears(block: nn.Module, path: str) -> tuple[str, ...]:
    """The paths inside ``block`` of the linears of the module at ``path`` (itself when it is
    one), in their order."""
    return tuple(".".join(filter(None, (path, name)))
                 for name, m in submodule(block, path).named_modules()
                 if isinstance(m, nn.Linear))


def next_linear(block: nn.Module, component: str) -> str:
    """The path inside ``block`` of the linear that reads a ``RESCALABLE`` LayerNorm's output:
    the first linear of the next row of ``TABLE`` (LN1: ``attn.qkv``; LN2: ``mlp.fc1``)."""
    if component not in RESCALABLE:
        raise ValueError(f"rescaling applies to {list(RESCALABLE)}, not {component!r}")
    after = TABLE[[c.name for c in TABLE].index(component) + 1]
    return _linears(block, after.module)[0]


def lora_targets(block: nn.Module, component: str) -> tuple[str, ...]:
    """The paths inside ``block`` of the linears LoRA adapts in a ``LORA_COMPONENTS``
    component: every linear of its module (MHA: ``attn.qkv`` and ``attn.proj``)."""
    if component not in LORA_COMPONENTS:
        raise ValueError(f"LoRA applies to {list(LORA_COMPONENTS)}, not {component!r}")
    return _linears(block, modules()[component])


def bias_count(model: nn.Module, component: str) -> int:
    """Bias entries of a component over all blocks (what its ``BIAS_ONLY`` configuration
    trains in the backbone)."""
    return sum(p.numel() for n, p in model.named_parameters()
               if any(fnmatch.fnmatch(n, pat) for pat in BIAS_ONLY[component]))


def _block_module(block: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        block = getattr(block, part)
    return block


@torch.no_grad()
def rescale_layernorm(model: nn.Module, component: str, c: float, *, preserve: bool = True
                      ) -> nn.Module:
    """Multiply a LayerNorm component's gamma and beta by ``c`` in every block, in place.

    Args:
        component: ``"LN1"`` or ``"LN2"``.
        c: the scale (> 0).
        preserve: also divide the next linear's weight by ``c`` so the function is unchanged.
    """
    if component not in RESCALABLE:
        raise ValueError(f"rescaling applies to {list(RESCALABLE)}, not {component!r}")
    if not c > 0:
        raise ValueError(f"scale c must be > 0, got {c}")
    for (_, comp), module in component_modules(model).items():
        if comp != component:
            continue
        module.weight.mul_(c)
        if module.bias is not None:
            module.bias.mul_(c)
    if preserve:
        for block in model.blocks:
            _block_module(block, next_linear(block, component)).weight.div_(c)
    return model


def matching_scale(ln_plasticity: float, target_plasticity: float) -> float:
    """The c that makes a LayerNorm's plasticity equal a target's (P(c LN) = c P(LN))."""
    return target_plasticity / ln_plasticity


def sparse_masks(model: nn.Module, component: str, count: int, seed: int = 0,
                 patterns: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Boolean masks selecting exactly ``count`` random entries of a component's parameters
    (over all blocks), for ``finetune.train(grad_masks=...)``.

    Args:
        patterns: only the component's parameters matching these (``fnmatch``), e.g. its
            biases (``BIAS_ONLY``) or its LoRA adapters (``LORA_PATTERNS``); default: all.

    Raises:
        ValueError: ``count`` exceeds the size of what is selected.
    """
    check_component(component)
    named = [(n, p) for n, p in model.named_parameters() if component_of(n) == component
             and (patterns is None or any(fnmatch.fnmatch(n, pat) for pat in patterns))]
    total = sum(p.numel() for _, p in named)
    if not 0 < count <= total:
        raise ValueError(f"count must be in 1..{total} for {component}, got {count}")
    g = torch.Generator().manual_seed(seed)
    flat = torch.zeros(total, dtype=torch.bool)
    flat[torch.randperm(total, generator=g)[:count]] = True
    masks, start = {}, 0
    for n, p in named:
        masks[n] = flat[start:start + p.numel()].view_as(p).to(p.device)
        start += p.numel()
    return masks


class LoRALinear(nn.Module):
    """``base(x) + (x A^T B^T) * scale``: a frozen linear plus a rank-r update.

    A is initialised like a linear layer's weight, B at zero, so the module starts as
    ``base`` exactly.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float | None = None):
        super().__init__()
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.base, self.rank = base, rank
        self.scale = (alpha if alpha is not None else rank) / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, device=base.weight.device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        # keep the attributes timm and vitplast read from a linear
        self.in_features, self.out_features = base.in_features, base.out_features

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight + self.scale * self.lora_b @ self.lora_a

    @property
    def bias(self):
        return self.base.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale

    def merged(self) -> nn.Linear:
        """A plain linear computing the same function."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.base.bias is not None,
                        device=self.base.weight.device)
        with torch.no_grad():
            out.weight.copy_(self.weight)
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out


def _set(block: nn.Module, path: str, module: nn.Module) -> None:
    parent, name = path.rsplit(".", 1)
    setattr(_block_module(block, parent), name, module)


def lora_count(model: nn.Module, component: str, rank: int) -> int:
    """Trainable parameters of rank-``rank`` LoRA on a component, over all blocks."""
    block = model.blocks[0]
    per_block = sum(rank * (lin.in_features + lin.out_features)
                    for lin in (_block_module(block, p) for p in lora_targets(block, component)))
    return per_block * len(model.blocks)


def add_lora(model: nn.Module, component: str, rank: int, alpha: float | None = None
             ) -> nn.Module:
    """Wrap a component's linears in every block with ``LoRALinear``, in place."""
    for block in model.blocks:
        for path in lora_targets(block, component):
            _set(block, path, LoRALinear(_block_module(block, path), rank, alpha))
    return model


LORA_PATTERNS = ["*.lora_a", "*.lora_b"]


# Prepare functions for ``vitplast.experiments.sweep``: (model, run) -> extra ``finetune.train``
# keywords. A run's ``run["ablation"]`` holds their arguments.
def _prepare_rescale(model: nn.Module, run: dict) -> None:
    a = run["ablation"]
    rescale_layernorm(model, a["component"], a["c"], preserve=a.get("preserve", True))


def _prepare_sparse(model: nn.Module, run: dict) -> dict:
    """Exactly ``count`` trainable entries of the component, among the parameters the run's
    configuration selects (all of the component's, or e.g. only its biases)."""
    a, patterns = run["ablation"], run["config"]
    return {"grad_masks": sparse_masks(model, a["component"], a["count"], a.get("mask_seed", 0),
                                       patterns=patterns if isinstance(patterns, list) else None)}


def _prepare_lora(model: nn.Module, run: dict) -> dict | None:
    """LoRA adapters; with ``count``, exactly that many of their entries train."""
    a = run["ablation"]
    add_lora(model, a["component"], a["rank"], a.get("alpha"))
    if a.get("count") is None:
        return None
    return {"grad_masks": sparse_masks(model, a["component"], a["count"], a.get("mask_seed", 0),
                                       patterns=LORA_PATTERNS)}


#: Name -> ``prepare(model, run)``, applied after loading and before training; a run names one
#: with its key ``prepare`` (a new ablation is added here). ``"gauge"``: the residual-stream
#: gauge (``vitplast.measure.gauge``; ``ablation=dict(c=8.0)``). Read-only: a sweep given other
#: preparations takes them as an argument (``sweep.run_sweep(..., preparations=...)``), and its
#: jobs receive them with their runs.
PREPARE = MappingProxyType({"rescale_ln": _prepare_rescale, "sparse": _prepare_sparse,
                            "lora": _prepare_lora, "gauge": gauge.prepare})

