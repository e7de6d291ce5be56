"""Bounds: an interval [lower, upper] around each component's measured plasticity.

Upper side, Propositions 1-4 (``P(f) <= Lip(f) <= bound``):

- P1, LayerNorm: ``||gamma||_inf / sigma``. Valid for ANY tokens with sigma = the smallest
  per-token ``sqrt(var + eps)``: lifted to (z, sqrt(d eps)), LayerNorm is a radial projection
  and ``||a/|a| - b/|b||| <= ||a - b|| / min(|a|, |b|)``.
- P2, linear layers (FC1, FC2): ``||W||_2``, attained along the top right singular vector.
- P3, MHA on tokens of norm <= r (Castin et al. 2024, Thm 3.3):
  ``sum_h ||O_h|| ||V_h|| sqrt(3n + (12n + 3) r^4 ||A_h||^2)``.
- P4, MHA on sequences with ``||X||_F <= alpha sqrt(E)``, constants derived here (the paper's are
  not public): ``sum_h ||O_h|| ||V_h|| (sqrt(n) + alpha^2 E ||A_h||)``.

Biases: the V bias adds the same vector to every output token (softmax rows sum to 1) and the
proj bias is constant: both cancel in f(x) - f(y). The Q bias adds ``b_q^T W_k x_j`` to the
logits and does not; it is absorbed exactly by x -> (x, 1): ``A_h`` becomes ``[[W_q^T W_k, 0],
[b_q^T W_k, 0]] / sqrt(d_head)`` (logit terms constant along a softmax row dropped), differences
keep their norm, r^2 -> r^2 + 1 (P3) and ``||X||_F^2 -> ||X||_F^2 + n`` (P4).

Lower side: the largest observed rate and the Jacobian's spectral norm at data points are both
<= Lip(f) on the data's domain.

``intervals`` columns (one row per layer x component): ``protocol``, ``layer``, ``component``,
``n`` (tokens); ``plasticity`` (mean rate), ``max_rate``, ``local_lipschitz`` (max over the
inputs probed), ``lower`` (max of both); ``bound`` (P1-P3 with the valid statistics: min sigma,
r_max), ``bound_rms`` (plug-in statistics, NOT a proven bound: mean sigma for LN, r_rms for MHA as
the paper), ``bound_tight`` (P4, MHA only); ``bound_holds`` = max_rate <= bound, ``rms_holds``,
``tight_holds`` (never clipped); ``tightness`` = bound / plasticity; the data statistics used:
``sigma``, ``sigma_mean``, ``sigma_cv`` (LN), ``r_rms``, ``r_max``, ``energy``, ``alpha`` (MHA).

Used by notebook 02.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from vitplast import plasticity
from vitplast.components import component_modules

_KEYS = ("model", "task", "checkpoint", "protocol")
_COLUMNS = ["protocol", "layer", "component", "n", "plasticity", "max_rate", "local_lipschitz",
            "lower", "bound", "bound_rms", "bound_tight", "bound_holds", "rms_holds",
            "tight_holds", "tightness", "sigma", "sigma_mean", "sigma_cv", "r_rms", "r_max",
            "energy", "alpha"]


def _spec(m: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(m.detach().float(), ord=2)


# Proposition 1: LayerNorm
def token_sigma(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-token ``sqrt(var + eps)`` of inputs (B, n, d) -> (B, n), what LayerNorm divides by.

    Paper: Prop. 1 (LayerNorm bound), its sigma. Used by notebook 02.
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

    Paper: Prop. 1 (LayerNorm bound). Used by notebook 02.
    """
    return _sigma_summary(token_sigma(x, eps).flatten())


def layernorm_bound(ln: nn.LayerNorm, sigma: float) -> float:
    """``||gamma||_inf / sigma``, the ABSOLUTE max of the weight (the public code took the signed
    max and dropped 1/sigma).

    Paper: Prop. 1 (LayerNorm bound). Used by notebook 02.
    """
    return (1.0 if ln.weight is None else ln.weight.detach().abs().max().item()) / sigma


# Proposition 2: linear layers
def linear_bound(linear: nn.Linear) -> float:
    """Spectral norm ``||W||_2`` (the bias cancels in f(x) - f(y)), for FC1 and FC2.

    Paper: Prop. 2 (linear bound). Used by notebook 02.
    """
    return _spec(linear.weight).item()


# Propositions 3 and 4: multi-head self-attention
def head_blocks(attn: nn.Module) -> dict[str, torch.Tensor | None]:
    """Per-head weights of a timm Attention: ``q``, ``k``, ``v`` (H, dh, d) are the head's ROW
    blocks of ``qkv.weight`` (stored (out, in) = (3d, d)); ``o`` (H, d, dh) its COLUMN block of
    ``proj.weight``; ``bias`` (3, H, dh) or None.

    Paper: Prop. 3 (the public code sliced qkv columns, i.e. input dims). Used by notebook 02.
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

    Paper: Prop. 3 (the decomposition sum_h O_h softmax(.) V_h). Used by notebook 02.
    """
    p = head_blocks(attn)
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

    Paper: Prop. 3 (MHA bound, after Castin et al. 2024, Thm 3.3). Used by notebook 02.
    """
    return _prop3(_head_norms(attn), n, r)


def _prop3(heads, n, r) -> float:
    ov, a, aug = heads
    r2 = r ** 2 + 1 if aug else r ** 2
    return (ov * torch.sqrt(3 * n + (12 * n + 3) * r2 ** 2 * a ** 2)).sum().item()


def mha_bound_energy(attn: nn.Module, n: int, alpha: float, energy: float) -> float:
    """``sum_h ||O_h|| ||V_h|| (sqrt(n) + alpha^2 E ||A_h||)`` for sequences with
    ``||X||_F <= R = alpha sqrt(E)``; derivation step by step in notebook 02.

    Per head F(X) = P(X) X V^T: F(X) - F(Y) = P(X)(X - Y)V^T + (P(X) - P(Y)) Y V^T. Row-stochastic
    P has ||P||_2 <= sqrt(n); softmax is 1/2-Lipschitz (Nair), so ||P(X) - P(Y)||_F <= ||X A X^T -
    Y A Y^T||_F / 2 <= R ||A|| ||X - Y||_F; and ||Y V^T||_2 <= R ||V||. Constants 1 and 1. With a
    qkv bias, A is augmented and one factor R becomes sqrt(R^2 + n).

    Paper: Prop. 4 (tighter MHA bound under an image-energy assumption). Used by notebook 02.
    """
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

    Paper: Prop. 3 (r = 19.4 on ViT-B is an RMS). Used by notebook 02.
    """
    s = _token_summary(x.float().norm(dim=-1))
    return dict(r_rms=s["r_rms"], r_max=s["r_max"])


def energy_fit(x: torch.Tensor) -> dict:
    """``energy`` E = mean_b ||X_b||_F^2 of inputs (B, n, d) and the smallest ``alpha`` with
    ||X_b||_F <= alpha sqrt(E) for every b (alpha^2 E = max_b ||X_b||_F^2).

    Paper: Prop. 4 (image-energy assumption). Used by notebook 02.
    """
    s = _token_summary(x.float().norm(dim=-1))
    return dict(alpha=s["alpha"], energy=s["energy"])


# Lower side
@contextmanager
def _unfused(f):
    """Manual attention inside f (fused SDPA has no forward-mode AD on CPU); restored on exit."""
    mods = [m for m in f.modules() if hasattr(m, "fused_attn")] if isinstance(f, nn.Module) else []
    old = [m.fused_attn for m in mods]
    for m in mods:
        m.fused_attn = False
    try:
        yield
    finally:
        for m, o in zip(mods, old):
            m.fused_attn = o


def _unit(t: torch.Tensor) -> torch.Tensor:
    return t / t.flatten(1).norm(dim=1).clamp_min(1e-30).view(-1, *[1] * (t.dim() - 1))


def local_lipschitz(f, x: torch.Tensor, iters: int = 20, seed: int = 0) -> torch.Tensor:
    """Per-sample spectral norm of the Jacobian of f at x[b] (flattened), (B,): power iteration
    on J^T J with torch.func jvp / vjp. f must treat samples independently (the five components
    do). Any unit v gives ||J v|| <= ||J|| <= Lip(f): a lower bound whatever the convergence.

    Paper: Definition 1 (P(f) <= Lip(f)), objection 2 (lower side). Used by notebook 02.
    """
    x = x.detach().float()
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(x.device)
    with _unfused(f):
        _, vjp = torch.func.vjp(f, x)
        for _ in range(iters):
            v = vjp(torch.func.jvp(f, (x,), (_unit(v),))[1])[0]
        jv = torch.func.jvp(f, (x,), (_unit(v),))[1]
    return jv.flatten(1).norm(dim=1).detach()


# Intervals on a model
def _input_stats(model, loader, protocol) -> dict:
    """(layer, component) -> the statistics its bound needs, over all x and y images."""
    modules, parts = component_modules(model), {}
    device = next(model.parameters()).device
    for xb, yb in loader:
        inputs = plasticity.component_inputs(model, torch.cat([xb, yb]).to(device), protocol)
        for key, inp in inputs.items():
            stat = (token_sigma(inp, modules[key].eps).flatten() if key[1].startswith("LN")
                    else inp.float().norm(dim=-1) if key[1] == "MHA" else None)  # (Bn,), (B, n)
            parts.setdefault(key, dict(n=inp.shape[1], v=[]))["v"].append(stat)
    summary = {"LN1": _sigma_summary, "LN2": _sigma_summary, "MHA": _token_summary}
    out = {}
    for key, p in parts.items():
        s = summary[key[1]](torch.cat(p["v"])) if key[1] in summary else {}
        out[key] = dict(n=p["n"], **s)
    return out


def _bounds(module, comp, s) -> dict:
    if comp.startswith("LN"):
        return dict(bound=layernorm_bound(module, s["sigma"]),
                    bound_rms=layernorm_bound(module, s["sigma_mean"]), bound_tight=np.nan)
    if comp == "MHA":
        heads = _head_norms(module)  # the spectral norms, once
        return dict(bound=_prop3(heads, s["n"], s["r_max"]),
                    bound_rms=_prop3(heads, s["n"], s["r_rms"]),
                    bound_tight=_prop4(heads, s["n"], s["alpha"], s["energy"]))
    b = linear_bound(module)
    return dict(bound=b, bound_rms=b, bound_tight=np.nan)


def intervals(model: nn.Module, x, y: torch.Tensor | None = None, *, protocol: str = "hidden",
              n_lipschitz: int = 8, power_iters: int = 20, batch_size: int = 64,
              progress: bool = False) -> pd.DataFrame:
    """[lower, upper] around the plasticity of every component of every block.

    Args:
        x, y: the pairs, as for ``plasticity.measure``: aligned image tensors (N, C, H, W),
            or ``x`` a ``plasticity.Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``; the bounds use the statistics of the inputs
            each component gets under it, over all 2N images.
        n_lipschitz: inputs (the first x images) at which ``local_lipschitz`` is probed.
        power_iters: power-iteration steps of ``local_lipschitz``.

    Returns:
        One row per (layer, component); columns in the module docstring.

    Paper: Props. 1-4, objection 2 (intervals, not ranked upper bounds). Used by notebook 02.
    """
    pairs = x if y is None else TensorDataset(x, y)
    rates = plasticity.summarize(plasticity.measure(model, pairs, protocol=protocol,
                                                    batch_size=batch_size, progress=progress))
    stats = _input_stats(model, DataLoader(pairs, batch_size=batch_size), protocol)
    first = next(iter(DataLoader(pairs, batch_size=n_lipschitz)))[0]
    probe = plasticity.component_inputs(model, first.to(next(model.parameters()).device),
                                        protocol)
    rows = [dict(layer=key[0], component=key[1], **_bounds(module, key[1], stats[key]),
                 local_lipschitz=local_lipschitz(module, probe[key], power_iters).max().item(),
                 **stats[key]) for key, module in component_modules(model).items()]
    df = rates[["protocol", "layer", "component", "plasticity", "max_rate"]].merge(
        pd.DataFrame(rows).astype({"component": rates["component"].dtype}))
    df["lower"] = df[["max_rate", "local_lipschitz"]].max(axis=1)
    for col, name in (("bound", "bound_holds"), ("bound_rms", "rms_holds"),
                      ("bound_tight", "tight_holds")):
        df[name] = (df["max_rate"] <= df[col]).astype("boolean").mask(df[col].isna())
    df["tightness"] = df["bound"] / df["plasticity"]
    return df.reindex(columns=_COLUMNS)


def random_checks(n_seeds: int = 5, *, n: int = 16, d: int = 32, num_heads: int = 4,
                  n_pairs: int = 64, power_iters: int = 20) -> pd.DataFrame:
    """Props. 1-4 on random weights and random inputs that satisfy each assumption exactly.

    Per seed: a LayerNorm with random gamma on tokens built to share sigma = 1 (P1), a d -> 4d
    linear (P2), a timm Attention with random weights and qkv bias on tokens of random scale (P3
    with r_max, P4 with the inputs' alpha and energy). One row per seed x proposition:
    ``bound``, ``plasticity``, ``max_rate`` (over n_pairs random pairs), ``local_lipschitz`` (max
    over the inputs), ``lower``, ``tightness`` as in ``intervals``; ``bound_holds`` = lower <=
    bound up to float32 round-off (1e-5 relative).

    Paper: Props. 1-4, where their assumptions hold. Used by notebook 02.
    """
    from timm.layers import Attention

    rows = []
    for seed in range(n_seeds):
        with torch.random.fork_rng(devices=[]), torch.no_grad():  # the global RNG is left alone
            torch.manual_seed(seed)
            ln, fc = nn.LayerNorm(d), nn.Linear(d, 4 * d)
            attn = Attention(d, num_heads=num_heads, qkv_bias=True).eval()
            ln.weight.normal_(1.0, 0.5), ln.bias.normal_()
            for p in attn.parameters():
                p.normal_(0.0, d ** -0.5)
            x = torch.randn(2 * n_pairs, n, d) * torch.empty(2 * n_pairs, 1, 1).uniform_(0.5, 2)
        c = x - x.mean(dim=-1, keepdim=True)  # shared sigma = 1: std of c -> sqrt(1 - eps)
        x_ln = x + c * (math.sqrt(1 - ln.eps) / c.std(dim=-1, unbiased=False, keepdim=True) - 1)
        measured = {}  # P3 and P4 share the MHA measurements
        for prop, f, inp, bound in [("P1", ln, x_ln, layernorm_bound(ln, 1.0)),
                                    ("P2", fc, x, linear_bound(fc)),
                                    ("P3", attn, x, mha_bound(attn, n, radius(x)["r_max"])),
                                    ("P4", attn, x, mha_bound_energy(attn, n, **energy_fit(x)))]:
            if f not in measured:
                with torch.no_grad():
                    r = plasticity.rate(f, inp[:n_pairs], inp[n_pairs:])
                measured[f] = r, local_lipschitz(f, inp, power_iters).max().item()
            r, lip = measured[f]
            rows.append(dict(seed=seed, proposition=prop, bound=bound, plasticity=r.mean().item(),
                             max_rate=r.max().item(), local_lipschitz=lip,
                             lower=max(r.max().item(), lip)))
    df = pd.DataFrame(rows)
    df["bound_holds"] = df["lower"] <= df["bound"] * (1 + 1e-5)
    df["tightness"] = df["bound"] / df["plasticity"]
    return df


# Takeaway 1: the ranking of the bounds vs the measured ranking
def theoretical_ranking(df: pd.DataFrame, column: str = "bound") -> pd.DataFrame:
    """Per component: ``column`` of ``intervals`` averaged over layers and its rank (1 =
    largest), by ``plasticity.ranking``.

    Paper: Takeaway 1 (MHA > FC1 ~ FC2 > LN2 ~ LN1 for the bounds). Used by notebook 02.
    """
    keys = [k for k in _KEYS if k in df.columns]
    long = df[keys + ["layer", "component", column]].rename(columns={column: "rate"})
    return plasticity.ranking(long).rename(columns={"plasticity": column})


def compare_rankings(df: pd.DataFrame, column: str = "bound") -> pd.DataFrame:
    """The measured ranking next to the ranking of ``column``, for one protocol / model / task.

    Columns: ``component``, ``plasticity``, ``rank_measured``, ``column``, ``rank_bound``.
    ``attrs``: ``measured`` and ``theory`` (the orders as text), ``match`` (same order),
    ``kendall_tau`` (rank agreement, 1 = same order).

    Paper: Takeaway 1 vs Takeaway 2; objection 2. Used by notebook 02.
    """
    from scipy.stats import kendalltau

    keys = [k for k in _KEYS if k in df.columns]
    out = theoretical_ranking(df, "plasticity").merge(
        theoretical_ranking(df, column), on=keys + ["component"], suffixes=("_measured", "_bound"))
    out.attrs["measured"] = plasticity.order(out.rename(columns={"rank_measured": "rank"}))
    out.attrs["theory"] = plasticity.order(out.rename(columns={"rank_bound": "rank"}))
    out.attrs["match"] = out.attrs["measured"] == out.attrs["theory"]
    out.attrs["kendall_tau"] = float(kendalltau(out["plasticity"], out[column]).statistic)
    return out


def what_this_shows(df: pd.DataFrame, checks: pd.DataFrame | None = None) -> str:
    """Conclusions computed from ``intervals`` (and ``random_checks``), one per line.

    Paper: Props. 1-4, Takeaway 1, objection 2. Used by notebook 02.
    """
    lines = [f"{p} on random weights: held in {g.bound_holds.sum()}/{len(g)} seeds; bound / lower "
             f"median {(g.bound / g.lower).median():.3g}" for p, g in
             ([] if checks is None else checks.groupby("proposition"))]
    for name, comps, plug in (("P1 LayerNorm", ["LN1", "LN2"], "mean sigma"),
                              ("P2 linear", ["FC1", "FC2"], ""), ("P3 MHA", ["MHA"], "r_rms")):
        g = df[df["component"].isin(comps)]
        line = (f"{name} on the model: held in {g.bound_holds.sum()}/{len(g)} layers; bound / "
                f"plasticity median {g.tightness.median():.3g}, bound / lower median "
                f"{(g.bound / g.lower).median():.3g}")
        lines.append(line + (f"; with {plug}: held in {g.rms_holds.sum()}/{len(g)}" if plug
                             else ""))
    mha, ln = df[df["component"] == "MHA"], df[df["component"].isin(["LN1", "LN2"])]
    lines.append(f"P4 MHA on the model: held in {mha.tight_holds.sum()}/{len(mha)} layers; "
                 f"tighter than P3 in {(mha.bound_tight < mha.bound).sum()}/{len(mha)} "
                 f"(median P4 / P3 {(mha.bound_tight / mha.bound).median():.3g})")
    lines.append(f"LayerNorm inputs: per-token sigma cv median {ln.sigma_cv.median():.3g} "
                 f"(0 = Prop. 1's shared sigma); min / mean sigma median "
                 f"{(ln.sigma / ln.sigma_mean).median():.3g}")
    for col in ("bound", "bound_rms"):
        cmp = compare_rankings(df, col)
        lines.append(f"Ranking measured: {cmp.attrs['measured']}; of {col}: {cmp.attrs['theory']}"
                     f"; same order: {cmp.attrs['match']}; Kendall tau "
                     f"{cmp.attrs['kendall_tau']:.2f}")
    return "\n".join(lines)

