"""Intervals: [lower, upper] around each component's measured plasticity, and Takeaway 1's
ranking of the bounds next to the measured ranking.

A ranking of upper bounds is not a ranking of plasticity (objection 2): ``intervals`` puts each
component's mean rate between a lower side (largest observed rate, local Lipschitz estimate) and
the bounds of Props. 1-4 (``vitplast.bounds``); ``random_checks`` tests the propositions where
their assumptions hold exactly; ``compare_rankings`` sets the order of the bounds against the
measured order; ``what_this_shows`` states the conclusions.

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

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from vitplast import bounds, plasticity
from vitplast.components import component_modules
from vitplast.inputs import check_count

_KEYS = ("model", "task", "checkpoint", "protocol")
_COLUMNS = ["protocol", "layer", "component", "n", "plasticity", "max_rate", "local_lipschitz",
            "lower", "bound", "bound_rms", "bound_tight", "bound_holds", "rms_holds",
            "tight_holds", "tightness", "sigma", "sigma_mean", "sigma_cv", "r_rms", "r_max",
            "energy", "alpha"]


def intervals(model: nn.Module, x, y: torch.Tensor | None = None, *, protocol: str = "hidden",
              n_lipschitz: int = 8, power_iters: int = 20, batch_size: int = 64,
              progress: bool = True) -> pd.DataFrame:
    """[lower, upper] around the plasticity of every component of every block.

    Args:
        x, y: the pairs, as for ``plasticity.measure``: aligned image tensors (N, C, H, W),
            or ``x`` a ``plasticity.Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``; the bounds use the statistics of the inputs
            each component gets under it, over all 2N images.
        n_lipschitz: inputs (the first x images) at which ``local_lipschitz`` is probed.
        power_iters: power-iteration steps of ``local_lipschitz``.
        progress: a progress bar over the measuring pass.

    Returns:
        One row per (layer, component); columns in the module docstring.

    Paper: Props. 1-4, objection 2 (intervals, not ranked upper bounds). Used by notebook 02.
    """
    check_count("n_lipschitz", n_lipschitz, hint="inputs probed for the local Lipschitz "
                "estimate, e.g. 8")
    check_count("power_iters", power_iters, minimum=0, hint="power-iteration steps, e.g. 20")
    pairs = plasticity.check_pairs(model, x, y, protocol=protocol, batch_size=batch_size)
    rates = plasticity.summarize(plasticity.measure(model, pairs, protocol=protocol,
                                                    batch_size=batch_size, progress=progress))
    upper = bounds.model_bounds(model, pairs, protocol=protocol, batch_size=batch_size)
    first = next(iter(DataLoader(pairs, batch_size=n_lipschitz)))[0]
    probe = plasticity.component_inputs(model, first.to(next(model.parameters()).device),
                                        protocol)
    rows = [dict(layer=key[0], component=key[1], **upper[key],
                 local_lipschitz=bounds.local_lipschitz(f, probe[key], power_iters).max().item())
            for key, f in component_modules(model).items()]
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
        for prop, f, inp, bound in [
                ("P1", ln, x_ln, bounds.layernorm_bound(ln, 1.0)),
                ("P2", fc, x, bounds.linear_bound(fc)),
                ("P3", attn, x, bounds.mha_bound(attn, n, bounds.radius(x)["r_max"])),
                ("P4", attn, x, bounds.mha_bound_energy(attn, n, **bounds.energy_fit(x)))]:
            if f not in measured:
                with torch.no_grad():
                    r = plasticity.rate(f, inp[:n_pairs], inp[n_pairs:])
                measured[f] = r, bounds.local_lipschitz(f, inp, power_iters).max().item()
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

