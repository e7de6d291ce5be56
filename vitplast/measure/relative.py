"""Relative plasticity: a component's plasticity in units of its own input and output scale.

    R(f) = P(f) * s_in / s_out,   P(f) = E[ ||f(x) - f(y)||_F / ||x - y||_F ]  (Definition 1),
    s_in = sqrt(E ||x||_F^2),     s_out = sqrt(E ||f(x)||_F^2),

the expectations over the pair distribution (P over the pairs; s_in, s_out over all 2N images
of the pairs, x's and y's, each a token sequence n x d, as the component reads and writes it).

**Why this form.** R is the mean relative change of the output per relative change of the
input, ``(||Δf|| / s_out) / (||Δx|| / s_in)``: the finite-difference, pair-averaged form of
the numerical analyst's relative condition number ||J(x)|| ||x|| / ||f(x)||, which is
unchanged by a change of units of the input or of the output. Three choices, each for a
reason: (1) uncentred norms (the scale of the values, not of their spread): with centred
ones, s_in and s_out would be about the RMS pair distances, and R about E[rate] / RMS rate,
near 1 for every component whatever it does; (2) one population scale per side, not one per
pair: no division by a single small output, and R factorises as P times a ratio, so the one
measuring pass (``plasticity.measurement(scales=True)``) also sums the squared norms and
relative plasticity costs no extra pass; (3) RMS (the square root of a mean of squares),
which sums over batches exactly.

**Why the residual-stream gauge leaves it unchanged** (``vitplast.gauge``: the embedding and
every branch's output times c; same function). Under ``hidden`` a component whose input is
multiplied by a and output by b has every rate times b / a (the pair difference of its input
times a, of its output times b), s_in times a and s_out times b, so R is unchanged:
R' = (b / a) P * (a s_in) / (b s_out) = R. The gauge is such a change for every component:
LN1, LN2 read the stream (a = c) and write the same (b = 1: P / c); MHA and FC2 read what
they read (a = 1) and write c times (b = c: P x c); FC1 reads LN2's output and writes the
same (a = b = 1). Plasticity moves by b / a (``gauge.RATE_FACTORS``), R by 1, up to
LayerNorm's eps (the gauged LayerNorm is the original with eps / c^2).

Under ``embedding`` every component reads c times the embedding, a change of input it never
sees in the network: LayerNorms still give R unchanged (up to eps); FC1, FC2 are affine, so
their bias, which is not multiplied, moves s_out (and R) a little; attention's logits are
q.k, quadratic in its input: they scale by c^2, the softmax becomes peaked: not a
reparametrisation, and R moves (``gauge_check`` measures how far).

Tidy output of ``measure`` (one row per layer x component): ``protocol``, ``layer``,
``component``, ``plasticity``, ``s_in``, ``s_out``, ``relative_plasticity``, ``n`` (pairs);
plus any ``meta`` columns. ``ranking``: per component, the mean over layers and its rank.

Paper: not in the paper (issue 38); it reads Definition 1 in the units the gauge leaves
alone, beside Takeaway 2's order. Used by notebook 02b, the suite study's companions
(``decide.task_plasticity(quantity="relative")``) and ``advise``.
"""

from __future__ import annotations

import copy

import pandas as pd
from torch import nn

from vitplast.measure.components import COMPONENTS
from vitplast.measure.plasticity import measurement, order

__all__ = ["measure", "ranking", "order", "gauge_check", "embedded_layers"]


def measure(model: nn.Module, x, y=None, *, protocol: str = "hidden", batch_size: int = 64,
            device=None, workers: int = 0, progress: bool = False,
            meta: dict | None = None) -> pd.DataFrame:
    """Relative plasticity of every component of every block, from ONE streamed pass over the
    pairs (``plasticity.measurement(scales=True)``: the same pass, errors and arguments).

    Args:
        model: a timm VisionTransformer.
        x, y: aligned image tensors (N, C, H, W); or ``x`` a ``Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``.
        meta: constant columns to add, e.g. ``{"model": ..., "task": ...}``.

    Returns:
        The tidy table of the module docstring; ``attrs["excluded"]`` counts identical pairs.

    Paper: Definition 1, in the units of the component's own input and output (issue 38).
    """
    m = measurement(model, x, y, protocol=protocol, batch_size=batch_size, device=device,
                    workers=workers, progress=progress, statistics=False, scales=True)
    per = (m.rates.groupby(["layer", "component"], observed=True)["rate"]
           .agg(plasticity="mean", n="count").reset_index())
    per["component"] = per["component"].astype(str)
    out = per.merge(m.scales, on=["layer", "component"])
    out["relative_plasticity"] = out["plasticity"] * out["s_in"] / out["s_out"]
    out.insert(0, "protocol", protocol)
    for k, v in (meta or {}).items():
        out.insert(0, k, v)
    out["component"] = pd.Categorical(out["component"], categories=list(COMPONENTS))
    out.attrs["excluded"] = m.rates.attrs["excluded"]
    return out[[*(meta or {}), "protocol", "layer", "component", "plasticity", "s_in", "s_out",
                "relative_plasticity", "n"]]


def ranking(df: pd.DataFrame, value: str = "relative_plasticity") -> pd.DataFrame:
    """Per component: ``value`` averaged over layers, and its rank (1 = highest), per group of
    the columns ``model``, ``task``, ``checkpoint``, ``protocol`` present (as
    ``plasticity.ranking`` does for plasticity). Columns: the groups, ``component``,
    ``relative_plasticity`` (or ``value``), ``rank``."""
    keys = [c for c in ("model", "task", "checkpoint", "protocol") if c in df.columns]
    out = df.groupby(keys + ["component"], observed=True)[value].mean().reset_index()
    out["rank"] = out.groupby(keys)[value].rank(ascending=False, method="min").astype(int)
    return out.sort_values(keys + ["rank"]).reset_index(drop=True)


def gauge_check(model: nn.Module, pairs, c: float = 8.0, *, protocols=("hidden", "embedding"),
                batch_size: int = 64) -> pd.DataFrame:
    """Relative plasticity and plasticity of ``model`` and of ``gauge.gauge(model, c)`` (a
    copy: ``model`` is untouched) on the same pairs, per protocol and component: the largest
    relative difference over layers, |value at c / value at 1 - 1|, of each
    (``relative_difference``, ``plasticity_difference``). Derived (module docstring): 0 for
    relative plasticity under ``hidden`` (up to LayerNorm's eps).

    Paper: none (issue 38). Used by notebook 02b and the tests."""
    from vitplast.measure.gauge import gauge

    nets = {1.0: model, float(c): gauge(copy.deepcopy(model), c)}
    rows = []
    for protocol in protocols:
        at = {k: measure(net, pairs, protocol=protocol, batch_size=batch_size)
              .set_index(["layer", "component"]) for k, net in nets.items()}
        a, b = at[1.0], at[float(c)]
        rel = (b["relative_plasticity"] / a["relative_plasticity"] - 1).abs()
        pla = (b["plasticity"] / a["plasticity"] - 1).abs()
        for comp in COMPONENTS:
            rows.append(dict(protocol=protocol, component=comp, c=float(c),
                             relative_difference=float(rel.xs(comp, level="component").max()),
                             plasticity_difference=float(pla.xs(comp, level="component").max())))
    return pd.DataFrame(rows)


def embedded_layers(tasks, *, protocol: str = "hidden", n_pairs: int = 256) -> pd.DataFrame:
    """Per task, block and component: the embedded model's relative plasticity before
    finetuning, on the pairs ``empirical.embedded_layers`` measures plasticity on
    (``empirical.task_pairs``: a Fashion-MNIST image and a task image). Columns ``task``,
    ``layer``, ``component`` (plain text), ``relative_plasticity``, ``plasticity``, ``s_in``,
    ``s_out``: the rows the suite study's companions keep (``decide.task_plasticity``)."""
    from vitplast import empirical, models

    model = models.load_model(models.EMBEDDED_NAME)
    frames = [measure(model, empirical.task_pairs(t, empirical.SOURCE, n_pairs=n_pairs,
                                                  model=model), protocol=protocol,
                      meta=dict(task=t)) for t in tasks]
    out = pd.concat(frames, ignore_index=True)
    out["component"] = out["component"].astype(str)
    return out[["task", "layer", "component", "relative_plasticity", "plasticity", "s_in",
                "s_out"]]
