"""Attention kernels: timm's attention on its matmul path, for what the fused kernel cannot do.

timm's ``Attention`` computes softmax(q k^T / sqrt(d)) v with PyTorch's fused
``scaled_dot_product_attention`` when its ``fused_attn`` is on, else with explicit matmuls:
the same function, but the fused kernel has no forward-mode AD on a CPU (the Jacobian-vector
products of ``vitplast.measure.bounds``) and no vmap batching rule (the stacked copies of
``vitplast.train.batched``). ``unfused_attention`` switches it off for the length of a block.
"""

from __future__ import annotations

import contextlib

from torch import nn


@contextlib.contextmanager
def unfused_attention(module):
    """timm's attention on its matmul path inside the block (``fused_attn`` off in every
    attention of ``module``; anything else passes through), restored after, on error too."""
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


__all__ = ["unfused_attention"]
