"""Bounds: Propositions 1-4 as pure functions of a module and statistics of its inputs, and
the local Lipschitz estimate: the two sides of the interval around a component's Lipschitz
constant.

Upper side, Propositions 1-4 (``P(f) <= Lip(f) <= bound``):

- Prop. 1, LayerNorm: ``||gamma||_inf / sigma``. Valid for ANY tokens with sigma = the smallest
  per-token ``sqrt(var + eps)``: lifted to (z, sqrt(d eps)), LayerNorm is a radial projection
  and ``||a/|a| - b/|b||| <= ||a - b|| / min(|a|, |b|)``.
- Prop. 2, linear layers (FC1, FC2): ``||W||_2``, attained along the top right singular vector.
- Prop. 3, MHA on tokens of norm <= r (Castin et al. 2024, Thm 3.3):
  ``sum_h ||O_h|| ||V_h|| sqrt(3n + (12n + 3) r^4 ||A_h||^2)``.
- Prop. 4, MHA on sequences with ``||X||_F <= alpha sqrt(E)``, constants derived here (the
  paper's are not public): ``sum_h ||O_h|| ||V_h|| (sqrt(n) + alpha^2 E ||A_h||)``.

Biases: the V bias adds the same vector to every output token (softmax rows sum to 1) and the
proj bias is constant: both cancel in f(x) - f(y). The Q bias adds ``b_q^T W_k x_j`` to the
logits and does not; it is absorbed exactly by x -> (x, 1): ``A_h`` becomes ``[[W_q^T W_k, 0],
[b_q^T W_k, 0]] / sqrt(d_head)`` (logit terms constant along a softmax row dropped), differences
keep their norm, r^2 -> r^2 + 1 (Prop. 3) and ``||X||_F^2 -> ||X||_F^2 + n`` (Prop. 4).

Lower side: the largest observed rate and the Jacobian's spectral norm at data points are both
<= Lip(f) on the data's domain. So the bounds bracket the Lipschitz constant over the data,
``lower <= Lip(f) <= bound``; plasticity, the MEAN rate, lies below both ends and is not what
they bracket.

Everything here is a pure function of a module and of statistics of its inputs (or of the
inputs themselves): no data is read here. ``plasticity.measurement`` gathers the statistics in
its one pass over the pairs; ``model_bounds`` applies Props. 1-4 to every component of a model;
``vitplast.measure.intervals`` assembles the intervals.
"""

from __future__ import annotations

import math

import pandas as pd
import torch
from torch import nn

from vitplast.attention import unfused_attention
from vitplast.inputs import check_count, check_positive, to_model
from vitplast.measure.components import TABLE, by_name, check_component, component_modules

#: A bound (``Component.bound``, the name of its function here) -> the statistics of the
#: component's inputs it reads, gathered in the measuring pass (``plasticity.measurement``):
#: ``sigma`` (per-token sigma, Prop. 1), ``tokens`` (token norms and sequence energies,
#: Props. 3-4), None (Prop. 2 reads the weights alone).
STATISTICS = {"layernorm_bound": "sigma", "mha_bound": "tokens", "linear_bound": None}


def _spec(m: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(m.detach().float(), ord=2)


# Proposition 1: LayerNorm
def token_sigma(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-token ``sqrt(var + eps)`` of inputs (B, n, d) -> (B, n), what LayerNorm divides by.

    Paper: Prop. 1 (LayerNorm bound), its sigma.
    """
    return torch.sqrt(x.float().var(dim=-1, unbiased=False) + eps)


def _sigma_summary(s: torch.Tensor) -> dict:
    return dict(sigma=s.min().item(), sigma_mean=s.mean().item(),
                sigma_cv=(s.std(unbiased=False) / s.mean()).item())


def sigma_fit(x: torch.Tensor, eps: float = 1e-6) -> dict:
    """The sigma to plug into Prop. 1 for inputs (B, n, d), and how well its assumption fits.

    ``sigma`` is the min over tokens: Prop. 1 assumes one shared sigma, and with the min it
    holds for ANY pair of these inputs (module docstring). ``sigma_mean`` is the typical value;
    ``sigma_cv`` (std / mean over tokens) is 0 exactly when the tokens share sigma.

    Paper: Prop. 1 (LayerNorm bound).
    """
    return _sigma_summary(token_sigma(x, eps).flatten())


def layernorm_bound(ln: nn.LayerNorm, sigma: float) -> float:
    """``||gamma||_inf / sigma``, the ABSOLUTE max of the weight (the public code took the signed
    max and dropped 1/sigma).

    Paper: Prop. 1 (LayerNorm bound).
    """
    check_positive("sigma", sigma, hint="the smallest per-token sqrt(var + eps), see sigma_fit")
    return (1.0 if ln.weight is None else ln.weight.detach().abs().max().item()) / sigma


# Proposition 2: linear layers
def linear_bound(linear: nn.Linear) -> float:
    """Spectral norm ``||W||_2`` (the bias cancels in f(x) - f(y)), for FC1 and FC2.

    Paper: Prop. 2 (linear bound).
    """
    return _spec(linear.weight).item()


# Propositions 3 and 4: multi-head self-attention
def head_blocks(attn: nn.Module) -> dict[str, torch.Tensor | None]:
    """Per-head weights of a timm Attention: ``q``, ``k``, ``v`` (H, dh, d) are the head's ROW
    blocks of ``qkv.weight`` (stored (out, in) = (3d, d)); ``o`` (H, d, dh) its COLUMN block of
    ``proj.weight``; ``bias`` (3, H, dh) or None.

    Paper: Prop. 3 (the public code sliced qkv columns, i.e. input dims).
    """
    extras = [getattr(attn, m, nn.Identity()) for m in ("q_norm", "k_norm", "norm")]
    if not all(isinstance(m, nn.Identity) for m in extras) or getattr(attn, "gate", None):
        raise TypeError("bounds assume plain attention: no qk-norm, scale-norm or gate")
    h, dh = attn.num_heads, attn.head_dim
    q, k, v = attn.qkv.weight.detach().float().reshape(3, h, dh, -1)
    o = attn.proj.weight.detach().float().reshape(-1, h, dh).permute(1, 0, 2)
    b = None if attn.qkv.bias is None else attn.qkv.bias.detach().float().reshape(3, h, dh)
    return dict(q=q, k=k, v=v, o=o, bias=b)


def attention_by_heads(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm's Attention recomputed head by head from ``head_blocks``: (B, n, d) -> (B, n, d).

    Paper: Prop. 3 (the decomposition sum_h O_h softmax(.) V_h). x is
    moved to the module's device.
    """
    p, x = head_blocks(attn), to_model(attn, x)
    q, k, v = (torch.einsum("bnd,hed->bhne", x.float(), p[c]) for c in "qkv")  # (B, H, n, dh)
    if p["bias"] is not None:
        q, k, v = (t + b[:, None] for t, b in zip((q, k, v), p["bias"]))
    weights = torch.softmax(q @ k.transpose(-1, -2) * attn.head_dim ** -0.5, dim=-1)  # (B,H,n,n)
    out = torch.einsum("bhne,hde->bnd", weights @ v, p["o"])
    return out if attn.proj.bias is None else out + attn.proj.bias


def _head_norms(attn: nn.Module) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Per head ||O_h|| ||V_h|| and ||A_h|| (bias-augmented), and whether augmented."""
    p = head_blocks(attn)
    a = p["q"].transpose(1, 2) @ p["k"] * attn.head_dim ** -0.5  # (H, d, d)
    if p["bias"] is not None:  # (H, d+1, d): the zero last column leaves the norm unchanged
        a = torch.cat([a, p["bias"][0].unsqueeze(1) @ p["k"] * attn.head_dim ** -0.5], dim=1)
    return _spec(p["o"]) * _spec(p["v"]), _spec(a), p["bias"] is not None


def mha_bound(attn: nn.Module, n: int, r: float) -> float:
    """``sum_h ||O_h|| ||V_h|| sqrt(3n + (12n + 3) r^4 ||A_h||^2)``, A_h = W_Q,h W_K,h^T /
    sqrt(d_head), for n tokens of norm <= r (r^2 -> r^2 + 1 with a qkv bias). Valid with r = the
    max token norm; the paper plugs the RMS norm (see ``radius``).

    Paper: Prop. 3 (MHA bound, after Castin et al. 2024, Thm 3.3).
    """
    check_count("n", n, hint="the number of tokens")
    check_positive("r", r, hint="the largest token norm, see radius")
    return _prop3(_head_norms(attn), n, r)


def _prop3(heads, n, r) -> float:
    ov, a, aug = heads
    r2 = r ** 2 + 1 if aug else r ** 2
    return (ov * torch.sqrt(3 * n + (12 * n + 3) * r2 ** 2 * a ** 2)).sum().item()


def mha_bound_energy(attn: nn.Module, n: int, alpha: float, energy: float) -> float:
    """``sum_h ||O_h|| ||V_h|| (sqrt(n) + alpha^2 E ||A_h||)`` for sequences with
    ``||X||_F <= R = alpha sqrt(E)``; derivation step by step in notebook 03.

    Per head F(X) = P(X) X V^T: F(X) - F(Y) = P(X)(X - Y)V^T + (P(X) - P(Y)) Y V^T. Row-stochastic
    P has ||P||_2 <= sqrt(n); softmax is 1/2-Lipschitz (Nair), so ||P(X) - P(Y)||_F <= ||X A X^T -
    Y A Y^T||_F / 2 <= R ||A|| ||X - Y||_F; and ||Y V^T||_2 <= R ||V||. Constants 1 and 1. With a
    qkv bias, A is augmented and one factor R becomes sqrt(R^2 + n).

    Paper: Prop. 4 (tighter MHA bound under an image-energy assumption).
    """
    check_count("n", n, hint="the number of tokens")
    check_positive("alpha", alpha, hint="see energy_fit")
    check_positive("energy", energy, hint="see energy_fit")
    return _prop4(_head_norms(attn), n, alpha, energy)


def _prop4(heads, n, alpha, energy) -> float:
    ov, a, aug = heads
    r = alpha * math.sqrt(energy)
    return (ov * (math.sqrt(n) + r * (math.sqrt(r ** 2 + n) if aug else r) * a)).sum().item()


def _token_summary(norms: torch.Tensor) -> dict:
    """Radii and energy from token norms (B, n)."""
    e = norms.pow(2).sum(dim=-1)  # (B,) ||X_b||_F^2
    return dict(r_rms=norms.pow(2).mean().sqrt().item(), r_max=norms.max().item(),
                energy=e.mean().item(), alpha=(e.max() / e.mean()).sqrt().item())


def radius(x: torch.Tensor) -> dict:
    """Token radii of inputs (B, n, d): ``r_rms`` = sqrt(mean_i ||x_i||^2), the paper's r, and
    ``r_max`` = max_i ||x_i||, what Prop. 3's ball needs.

    Paper: Prop. 3 (r = 19.4 on ViT-B is an RMS).
    """
    s = _token_summary(x.float().norm(dim=-1))
    return dict(r_rms=s["r_rms"], r_max=s["r_max"])


def energy_fit(x: torch.Tensor) -> dict:
    """``energy`` E = mean_b ||X_b||_F^2 of inputs (B, n, d) and the smallest ``alpha`` with
    ||X_b||_F <= alpha sqrt(E) for every b (alpha^2 E = max_b ||X_b||_F^2).

    Paper: Prop. 4 (image-energy assumption).
    """
    s = _token_summary(x.float().norm(dim=-1))
    return dict(alpha=s["alpha"], energy=s["energy"])


# Lower side
def _unit(t: torch.Tensor) -> torch.Tensor:
    return t / t.flatten(1).norm(dim=1).clamp_min(1e-30).view(-1, *[1] * (t.dim() - 1))


def local_lipschitz(f, x: torch.Tensor, iters: int = 20, seed: int = 0) -> torch.Tensor:
    """Per-sample spectral norm of the Jacobian of f at x[b] (flattened), (B,): power iteration
    on J^T J with torch.func jvp / vjp. f must treat samples independently (the five components
    do). Any unit v gives ||J v|| <= ||J|| <= Lip(f): a lower bound whatever the convergence.

    Paper: Definition 1 (P(f) <= Lip(f)), objection 2 (lower side).
    x is moved to f's device when f is a module; the result lies there.
    """
    check_count("iters", iters, minimum=0, hint="power-iteration steps, e.g. 20")
    if not torch.isfinite(x).all():
        raise ValueError("x has non-finite entries (NaN or inf): the Jacobian there is "
                         "undefined; repair (torch.nan_to_num) or drop those inputs")
    x = to_model(f, x.detach().float())
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(x.device)
    with unfused_attention(f):
        _, vjp = torch.func.vjp(f, x)
        for _ in range(iters):
            v = vjp(torch.func.jvp(f, (x,), (_unit(v),))[1])[0]
        jv = torch.func.jvp(f, (x,), (_unit(v),))[1]
    return jv.flatten(1).norm(dim=1).detach()


# Every component of a model
def component_bounds(module: nn.Module, component: str, stats: dict, components=TABLE) -> dict:
    """The propositions for one component, from the statistics of its inputs.

    Args:
        module: the component's module (LayerNorm, Linear, timm Attention).
        component: its name in ``components`` (``vitplast.measure.components.TABLE``), whose
            ``bound`` names the proposition (``STATISTICS``'s keys).
        stats: ``n`` and, for LN, ``sigma``, ``sigma_mean``; for MHA, ``r_max``, ``r_rms``,
            ``energy``, ``alpha`` (``plasticity.Measurement.statistics``, or ``sigma_fit``,
            ``radius``, ``energy_fit`` of the inputs).

    Returns:
        ``bound`` (Prop. 1, 2 or 3 with the statistics that make it valid: the smallest sigma,
        r_max), ``bound_p4`` (Prop. 4, NaN but for MHA), ``plugin`` (the paper's plug-in value:
        Prop. 1 at the mean sigma, Prop. 3 at r_rms; NOT a proven bound; = ``bound`` for FC).

    Paper: Props. 1-4 on one component.
    """
    bound = by_name(components)[check_component(component, components)].bound
    if bound not in STATISTICS:
        raise ValueError(f"{component} has no bound here (bound={bound!r}); bounded: "
                         f"{[c.name for c in components if c.bound in STATISTICS]}")
    if bound == "layernorm_bound":
        return dict(bound=layernorm_bound(module, stats["sigma"]), bound_p4=math.nan,
                    plugin=layernorm_bound(module, stats["sigma_mean"]))
    if bound == "mha_bound":
        heads = _head_norms(module)  # the spectral norms once: seconds per layer on ViT-B
        n = int(stats["n"])
        return dict(bound=_prop3(heads, n, stats["r_max"]),
                    bound_p4=_prop4(heads, n, stats["alpha"], stats["energy"]),
                    plugin=_prop3(heads, n, stats["r_rms"]))
    b = linear_bound(module)
    return dict(bound=b, bound_p4=math.nan, plugin=b)


def model_bounds(model: nn.Module, statistics: pd.DataFrame, components=TABLE) -> pd.DataFrame:
    """``component_bounds`` of every bounded component of every block: a pure function of the
    model's weights and the statistics of its inputs (no data is read here).

    Args:
        statistics: one row per (layer, component) with the columns ``component_bounds``
            reads, e.g. ``plasticity.measurement(...).statistics``.
        components: the table (``vitplast.measure.components.TABLE``); its components with
            no bound (``Component.bound`` None) are left out.

    Returns:
        ``statistics`` with ``bound``, ``bound_p4``, ``plugin`` added.

    Raises:
        ValueError: a component of the model without statistics, naming it.

    Paper: Props. 1-4 on a model (the upper side of the intervals).
    """
    rows = {(int(r["layer"]), str(r["component"])): r for r in statistics.to_dict("records")}
    out = []
    bounded = [c for c in components if c.bound is not None]
    for key, module in component_modules(model, bounded).items():
        if key not in rows:
            raise ValueError(f"no statistics for layer {key[0]} {key[1]}: statistics has "
                             f"{sorted(rows)}; measure them with plasticity.measurement")
        out.append(dict(rows[key], **component_bounds(module, key[1], rows[key], components)))
    return pd.DataFrame(out)
