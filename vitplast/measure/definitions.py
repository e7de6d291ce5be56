"""Definition 1 on functions one can check by hand: 1-D maps, a linear map, LayerNorm,
softmax attention. Plasticity (the average rate) against the Lipschitz constant (the
largest rate).

Paper: Definition 1 and the remark P(f) <= Lip(f); objection 1 (docs/objections.md) (the expectation
is over a distribution of pairs, so plasticity depends on that distribution).

Notebook 01's conclusions are ``definition_findings.definitions`` of these tables.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch import nn

from vitplast.measure.rates import rate

#: 1-D maps with their Lipschitz constants (sup |f'|), for the first section of notebook 01.
MAPS_1D = {
    "sin(3x)": (lambda x: torch.sin(3 * x), 3.0),
    "relu(x)": (torch.relu, 1.0),
    "x^2 on [-2, 2]": (lambda x: x.clamp(-2, 2) ** 2, 4.0),
    "tanh(5x)": (lambda x: torch.tanh(5 * x), 5.0),
}


def gaussian_pairs(n: int, shape: tuple[int, ...], scale: float = 1.0, seed: int = 0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """n independent pairs (x, y), each entry N(0, scale^2), of the given per-item shape."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(n, *shape, generator=g),
            scale * torch.randn(n, *shape, generator=g))


def maps_1d_table(scales: list[float], n: int = 4000, seed: int = 0) -> pd.DataFrame:
    """Plasticity of each 1-D map under pairs drawn from N(0, scale^2), beside its Lipschitz
    constant. Columns: ``function``, ``scale``, ``plasticity``, ``max_rate``, ``lipschitz``."""
    rows = []
    for name, (f, lip) in MAPS_1D.items():
        for s in scales:
            x, y = gaussian_pairs(n, (1,), s, seed)
            r = rate(f, x, y)
            rows.append(dict(function=name, scale=s, plasticity=r.mean().item(),
                             max_rate=r.max().item(), lipschitz=lip))
    return pd.DataFrame(rows)


def linear_map(d: int = 16, seed: int = 0) -> nn.Linear:
    """A random d x d linear map without bias."""
    torch.manual_seed(seed)
    return nn.Linear(d, d, bias=False)


def linear_table(layer: nn.Linear, n: int = 4000, seed: int = 0) -> pd.DataFrame:
    """Rate of a linear map over isotropic pairs against its singular values.

    For isotropic x - y, E||W u||^2 / ||u||^2 = ||W||_F^2 / d, so plasticity is close to
    sqrt(mean sigma_i^2), well below Lip = sigma_max. Columns: ``quantity``, ``value``.
    """
    w = layer.weight.detach()
    sv = torch.linalg.svdvals(w)
    x, y = gaussian_pairs(n, (w.shape[1],), 1.0, seed)
    with torch.no_grad():
        r = rate(layer, x, y)
    return pd.DataFrame(dict(
        quantity=["plasticity (mean rate)", "max observed rate", "sqrt(mean sigma^2)",
                  "Lipschitz = sigma_max", "sigma_min"],
        value=[r.mean().item(), r.max().item(), sv.pow(2).mean().sqrt().item(), sv.max().item(),
               sv.min().item()]))


def scale_table(modules: dict[str, nn.Module], shape: tuple[int, ...], scales: list[float],
                n: int = 512, seed: int = 0) -> pd.DataFrame:
    """Plasticity of each module under pairs of N(0, scale^2) tokens, for several scales.

    LayerNorm is scale-invariant, so its rate falls as 1/scale; attention is not
    scale-invariant either (its softmax sharpens). Columns: ``module``, ``scale``,
    ``plasticity``.
    """
    rows = []
    for name, module in modules.items():
        for s in scales:
            x, y = gaussian_pairs(n, shape, s, seed)
            with torch.no_grad():
                rows.append(dict(module=name, scale=s, plasticity=rate(module, x, y).mean().item()))
    return pd.DataFrame(rows)


def convergence(df: pd.DataFrame, sizes: list[int]) -> pd.DataFrame:
    """How the plasticity estimate settles with the number of pairs.

    Args:
        df: a per-pair table from ``vitplast.measure.plasticity.measure``.
        sizes: numbers of pairs (the first n pairs of ``df``).

    Returns:
        One row per (layer, component, n_pairs): ``plasticity``, ``ci95``.
    """
    rows = []
    for (layer, comp), g in df.groupby(["layer", "component"], observed=True):
        r = g.sort_values("pair")["rate"].to_numpy()
        for n in sizes:
            part = r[:n]
            rows.append(dict(layer=layer, component=comp, n_pairs=len(part),
                             plasticity=part.mean(),
                             ci95=1.96 * part.std(ddof=1) / math.sqrt(len(part))
                             if len(part) > 1 else np.nan))
    return pd.DataFrame(rows)


def attention(d: int = 32, num_heads: int = 4, seed: int = 0) -> nn.Module:
    """A random timm multi-head self-attention module (as inside a ViT block)."""
    from timm.models.vision_transformer import Attention

    torch.manual_seed(seed)
    return Attention(d, num_heads=num_heads, qkv_bias=True).eval()
