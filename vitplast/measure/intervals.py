"""Intervals: each component's Lipschitz constant over the data, bracketed between what is
observed and what is proven, next to its plasticity; and Takeaway 1's ranking of the bounds
next to the measured ranking.

A ranking of upper bounds is not a ranking of plasticity (objection 2). For every component
of every block, ``intervals`` brackets Lip(f) on the data's domain:

    lipschitz_lower = max(max_rate, local_lipschitz) <= Lip(f) <= lipschitz_upper = min(bounds),

the lower end observed (the largest rate over the pairs, the Jacobian's spectral norm at probed
inputs), the upper end proven (Props. 1-4, ``vitplast.measure.bounds``). Plasticity, the MEAN rate,
is a different quantity: it lies below the lower end (P(f) <= max_rate) and the interval does
not bracket it. ``random_checks`` tests the propositions where their assumptions hold exactly;
``compare_rankings`` sets the order of the bounds against the order of measured plasticity;
``vitplast.report.bound_findings.bounds`` states the conclusions as a findings table.

``intervals`` columns (one row per layer x component): ``protocol``, ``layer``, ``component``,
``n`` (tokens); ``plasticity`` (the mean rate, Definition 1); ``max_rate`` (the largest observed
rate); ``local_lipschitz`` (the largest Jacobian spectral norm over the probed inputs);
``lipschitz_lower`` (the larger of the two); ``bound`` (the component's proposition, Prop. 1, 2
or 3, with the statistics that make it valid: the smallest sigma, r_max); ``bound_p4`` (Prop. 4,
MHA only); ``lipschitz_upper`` (the smaller proven bound); ``plugin`` (the paper's plug-in
value: Prop. 1 at the mean sigma, Prop. 3 at r_rms; NOT a proven bound; = ``bound`` for FC);
``bound_holds`` = ``holds(bound, lipschitz_lower)``: the bound is at least the lower end of
Lip(f), up to float32 round-off (``random_checks`` and ``vitplast.report.bound_findings.bounds`` use
the same ``holds``); ``p4_holds`` the same for ``bound_p4``;
``plugin_holds`` = max_rate <= plugin (a plug-in value is only checked against the observed
rates); ``width`` = lipschitz_upper / lipschitz_lower (the factor within which Lip(f) is
known); the data statistics used: ``sigma``, ``sigma_mean``, ``sigma_cv`` (LN), ``r_rms``,
``r_max``, ``energy``, ``alpha`` (MHA).
"""

from __future__ import annotations

import copy
import math

import pandas as pd
import torch
from scipy.stats import kendalltau
from timm.layers import Attention
from torch import nn

from vitplast import models
from vitplast.cached import kept_table
from vitplast.inputs import check_count
from vitplast.measure import bounds, plasticity, rates
from vitplast.measure.components import component_modules
from vitplast.measure.fingerprint import stamp
from vitplast.measure.gauge import rescale_stream

_KEYS = ("model", "task", "checkpoint", "protocol")
_COLUMNS = ["protocol", "layer", "component", "n", "plasticity", "max_rate", "local_lipschitz",
            "lipschitz_lower", "bound", "bound_p4", "lipschitz_upper", "plugin", "bound_holds",
            "p4_holds", "plugin_holds", "width", "sigma", "sigma_mean", "sigma_cv", "r_rms",
            "r_max", "energy", "alpha"]
ROUNDOFF = 1e-5  # relative float32 round-off allowed when comparing a bound with the lower end


def holds(bound: pd.Series, lipschitz_lower: pd.Series) -> pd.Series:
    """Whether each bound is at least the lower end of Lip(f) (``lipschitz_lower``, the largest
    observed rate or local Lipschitz estimate), up to float32 round-off (``ROUNDOFF``): what
    ``bound_holds`` means in ``intervals`` and ``random_checks``. NA where the bound is."""
    return (lipschitz_lower <= bound * (1 + ROUNDOFF)).astype("boolean").mask(bound.isna())


def intervals(model: nn.Module, x, y: torch.Tensor | None = None, *, protocol: str = "hidden",
              n_lipschitz: int = 8, power_iters: int = 20, batch_size: int = 64,
              workers: int = 0, progress: bool = True) -> pd.DataFrame:
    """[lipschitz_lower, lipschitz_upper] around the Lipschitz constant of every component of
    every block, next to its plasticity, from ONE pass over the pairs.

    Args:
        x, y: the pairs, as for ``plasticity.measure``: aligned image tensors (N, C, H, W),
            or ``x`` a ``pairs.Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``; the bounds use the statistics of the inputs
            each component gets under it, over the 2N images of the pairs (identical pairs
            excluded, as for the rates).
        n_lipschitz: inputs (the x images of the first kept pairs) at which
            ``local_lipschitz`` is probed.
        power_iters: power-iteration steps of ``local_lipschitz``.
        batch_size, workers: pairs per forward pass; DataLoader workers reading them.
        progress: a progress bar over the measuring pass.

    Returns:
        One row per (layer, component); columns in the module docstring.

    Paper: Props. 1-4, objection 2 (intervals, not ranked upper bounds).
    """
    check_count("n_lipschitz", n_lipschitz, hint="inputs probed for the local Lipschitz "
                "estimate, e.g. 8")
    check_count("power_iters", power_iters, minimum=0, hint="power-iteration steps, e.g. 20")
    m = plasticity.measurement(model, x, y, protocol=protocol, batch_size=batch_size,
                               workers=workers, progress=progress, keep=n_lipschitz)
    return from_measurement(model, m, power_iters=power_iters)


def from_measurement(model: nn.Module, m: plasticity.Measurement, *, power_iters: int = 20
                     ) -> pd.DataFrame:
    """``intervals`` read from a pass already made over the pairs (``plasticity.measurement``
    with ``statistics`` and ``keep`` > 0: its kept inputs are where ``local_lipschitz`` is
    probed), so that one pass also serves another reading of it (``relative.from_measurement``:
    ``vitplast.measure.real``)."""
    check_count("power_iters", power_iters, minimum=0, hint="power-iteration steps, e.g. 20")
    rates = plasticity.summarize(m.rates)
    upper = bounds.model_bounds(model, m.statistics)
    upper["local_lipschitz"] = [bounds.local_lipschitz(f, m.inputs[key], power_iters).max().item()
                                for key, f in component_modules(model).items()]
    df = rates[["protocol", "layer", "component", "plasticity", "max_rate"]].merge(
        upper.astype({"component": rates["component"].dtype}))
    df["lipschitz_lower"] = df[["max_rate", "local_lipschitz"]].max(axis=1)
    df["lipschitz_upper"] = df[["bound", "bound_p4"]].min(axis=1)
    df["bound_holds"] = holds(df["bound"], df["lipschitz_lower"])
    df["p4_holds"] = holds(df["bound_p4"], df["lipschitz_lower"])
    df["plugin_holds"] = (df["max_rate"] <= df["plugin"]).astype("boolean").mask(
        df["plugin"].isna())
    df["width"] = df["lipschitz_upper"] / df["lipschitz_lower"]
    return df.reindex(columns=_COLUMNS)


def gauged(model: nn.Module, c: float, x, y: torch.Tensor | None = None, *,
           protocol: str = "hidden", batch_size: int = 64, workers: int = 0) -> pd.DataFrame:
    """``intervals`` of a copy of ``model`` with its residual stream times ``c``
    (``gauge.rescale_stream``: the same network function), for the bounds and plasticity only: the
    local Lipschitz probe is skipped (``local_lipschitz`` of one input, no power iteration),
    so ``lipschitz_lower`` is about the largest rate. ``model`` is left as it is.

    Raises:
        TypeError: an architecture the gauge refuses (``gauge.check_gauge`` names why).

    Paper: none (issue 28: what sets the ranking).
    """
    return intervals(rescale_stream(copy.deepcopy(model), c), x, y, protocol=protocol,
                     n_lipschitz=1, power_iters=0, batch_size=batch_size, workers=workers,
                     progress=False)


def random_checks(n_seeds: int = 5, *, n: int = 16, d: int = 32, num_heads: int = 4,
                  n_pairs: int = 64, power_iters: int = 20) -> pd.DataFrame:
    """Props. 1-4 on random weights and random inputs that satisfy each assumption exactly.

    Per seed: a LayerNorm with random gamma on tokens built to share sigma = 1 (Prop. 1), a d -> 4d
    linear (Prop. 2), a timm Attention with random weights and qkv bias on tokens of random scale
    (Prop. 3 with r_max, Prop. 4 with the inputs' alpha and energy). One row per seed x
    proposition (``proposition``: "Prop. 1" ... "Prop. 4", the paper's names):
    ``bound``, ``plasticity``, ``max_rate`` (over n_pairs random pairs), ``local_lipschitz`` (max
    over the inputs), ``lipschitz_lower`` and ``bound_holds`` (``holds``) as in ``intervals``;
    ``width`` = bound / lipschitz_lower.

    Paper: Props. 1-4, where their assumptions hold.
    """
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
        measured = {}  # Props. 3 and 4 share the MHA measurements
        for prop, f, inp, bound in [
                ("Prop. 1", ln, x_ln, bounds.layernorm_bound(ln, 1.0)),
                ("Prop. 2", fc, x, bounds.linear_bound(fc)),
                ("Prop. 3", attn, x, bounds.mha_bound(attn, n, bounds.radius(x)["r_max"])),
                ("Prop. 4", attn, x, bounds.mha_bound_energy(attn, n, **bounds.energy_fit(x)))]:
            if f not in measured:
                with torch.no_grad():
                    r = rates.rate(f, inp[:n_pairs], inp[n_pairs:])
                measured[f] = r, bounds.local_lipschitz(f, inp, power_iters).max().item()
            r, lip = measured[f]
            rows.append(dict(seed=seed, proposition=prop, bound=bound, plasticity=r.mean().item(),
                             max_rate=r.max().item(), local_lipschitz=lip,
                             lipschitz_lower=max(r.max().item(), lip)))
    df = pd.DataFrame(rows)
    df["bound_holds"] = holds(df["bound"], df["lipschitz_lower"])
    df["width"] = df["bound"] / df["lipschitz_lower"]
    return df


# Takeaway 1: the ranking of the bounds vs the measured ranking
def theoretical_ranking(df: pd.DataFrame, column: str = "bound") -> pd.DataFrame:
    """Per component: ``column`` of ``intervals`` averaged over layers and its rank (1 =
    largest), by ``plasticity.ranking``.

    Paper: Takeaway 1 (MHA > FC1 ~ FC2 > LN2 ~ LN1 for the bounds).
    """
    keys = [k for k in _KEYS if k in df.columns]
    long = df[keys + ["layer", "component", column]].rename(columns={column: "rate"})
    return plasticity.ranking(long).rename(columns={"plasticity": column})


def compare_rankings(df: pd.DataFrame, column: str = "bound") -> pd.DataFrame:
    """The measured ranking next to the ranking of ``column``, for one protocol / model / task.

    Columns: ``component``, ``plasticity``, ``rank_measured``, ``column``, ``rank_bound``.
    ``attrs``: ``measured`` and ``theory`` (the orders as text), ``match`` (same order),
    ``kendall_tau`` (rank agreement, 1 = same order).

    Paper: Takeaway 1 vs Takeaway 2; objection 2.
    """
    keys = [k for k in _KEYS if k in df.columns]
    out = theoretical_ranking(df, "plasticity").merge(
        theoretical_ranking(df, column), on=keys + ["component"], suffixes=("_measured", "_bound"))
    out.attrs["measured"] = plasticity.order(out.rename(columns={"rank_measured": "rank"}))
    out.attrs["theory"] = plasticity.order(out.rename(columns={"rank_bound": "rank"}))
    out.attrs["match"] = out.attrs["measured"] == out.attrs["theory"]
    out.attrs["kendall_tau"] = float(kendalltau(out["plasticity"], out[column]).statistic)
    return out


def cached(name: str, key: dict, compute, root=None) -> pd.DataFrame:
    """``compute()``, a table of this module (``intervals``, ``gauged``, ``random_checks``),
    computed once per ``key`` and read back afterwards (``vitplast.cached.kept_table``: files
    ``intervals-<name>-<hash of key>`` in the user's cache, or with ``root`` kept beside a
    study there). ``key`` names everything the table depends on: the model (name, checkpoint,
    weights file), the pairs (task, source, number) and the call's arguments; a key naming a
    ``model`` gets its weights too (``models.weights_id``: the embedded checkpoint's sha256,
    a timm model's weights file and ``model_args``), so one's own model never reads another's
    table; a weights file changed in place under the same name is not noticed.
    """
    if "model" in key:
        key = dict(key, weights=models.weights_id(key["model"], [key.get("checkpoint") or "final"]))
    return kept_table(f"intervals-{name}", key, compute, root, **stamp())
