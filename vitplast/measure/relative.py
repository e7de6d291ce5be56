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

**Why the residual-stream gauge leaves it unchanged** (``vitplast.measure.gauge``: the embedding and
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
Their findings rows (notebook 02b) are ``vitplast.report.relative_findings``'s.

Paper: not in the paper (issue 38); it reads Definition 1 in the units the gauge leaves
alone, beside Takeaway 2's order.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
from torch import nn

from vitplast import cached, models
from vitplast.measure import empirical
from vitplast.measure.components import TABLE, names
from vitplast.measure.empirical import SOURCE
from vitplast.measure.fingerprint import stamp
from vitplast.measure.gauge import rescale_stream
from vitplast.measure.plasticity import measurement, order

#: Largest relative difference of relative plasticity between two gauges that reads
#: "unchanged": LayerNorm's eps moves it by about 1e-4 at c = 8 on these models (tested).
UNCHANGED = 1e-3

__all__ = ["UNCHANGED", "measure", "from_measurement", "ranking", "order", "gauge_check",
           "embedded_layers",
           "model_rankings", "embedded_gauge_check"]


def measure(model: nn.Module, x, y=None, *, protocol: str = "hidden", batch_size: int = 64,
            device=None, workers: int = 0, progress: bool = False,
            meta: dict | None = None, components=TABLE) -> pd.DataFrame:
    """Relative plasticity of every component of every block, from ONE streamed pass over the
    pairs (``plasticity.measurement(scales=True)``: the same pass, errors and arguments).

    Args:
        model: a timm VisionTransformer.
        x, y: aligned image tensors (N, C, H, W); or ``x`` a ``Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``.
        meta: constant columns to add, e.g. ``{"model": ..., "task": ...}``.
        components: the table of components to measure
            (``vitplast.measure.components.TABLE``).

    Returns:
        The tidy table of the module docstring; ``attrs["excluded"]`` counts identical pairs.

    Paper: Definition 1, in the units of the component's own input and output (issue 38).
    """
    m = measurement(model, x, y, protocol=protocol, batch_size=batch_size, device=device,
                    workers=workers, progress=progress, statistics=False, scales=True,
                    components=components)
    return from_measurement(m, meta=meta)


def from_measurement(m, *, meta: dict | None = None) -> pd.DataFrame:
    """``measure`` read from a pass already made over the pairs (``plasticity.measurement``
    with ``scales=True``), so that one pass also serves another reading of it
    (``intervals.from_measurement``: ``vitplast.measure.real``). Its protocol and component
    table are the measurement's (its rates' ``protocol`` and ``component`` categories)."""
    protocol = m.rates["protocol"].iloc[0] if len(m.rates) else None
    per = (m.rates.groupby(["layer", "component"], observed=True)["rate"]
           .agg(plasticity="mean", n="count").reset_index())
    per["component"] = per["component"].astype(str)
    out = per.merge(m.scales, on=["layer", "component"])
    out["relative_plasticity"] = out["plasticity"] * out["s_in"] / out["s_out"]
    out.insert(0, "protocol", protocol)
    for k, v in (meta or {}).items():
        out.insert(0, k, v)
    out["component"] = pd.Categorical(out["component"],
                                      categories=list(m.rates["component"].cat.categories))
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
    """Relative plasticity and plasticity of ``model`` and of ``gauge.rescale_stream(model, c)`` (a
    copy: ``model`` is untouched) on the same pairs, per protocol and component: the largest
    relative difference over layers, |value at c / value at 1 - 1|, of each
    (``relative_difference``, ``plasticity_difference``), and the median ratio over layers of
    plasticity at c to plasticity at 1 (``plasticity_ratio``). Derived (module docstring): 0
    for relative plasticity under ``hidden`` (up to LayerNorm's eps).

    Paper: none (issue 38)."""
    nets = {1.0: model, float(c): rescale_stream(copy.deepcopy(model), c)}
    rows = []
    for protocol in protocols:
        at = {k: measure(net, pairs, protocol=protocol, batch_size=batch_size)
              .set_index(["layer", "component"]) for k, net in nets.items()}
        a, b = at[1.0], at[float(c)]
        rel = (b["relative_plasticity"] / a["relative_plasticity"] - 1).abs()
        ratio = b["plasticity"] / a["plasticity"]
        for comp in names():
            rows.append(dict(protocol=protocol, component=comp, c=float(c),
                             relative_difference=float(rel.xs(comp, level="component").max()),
                             plasticity_difference=float((ratio - 1).abs().xs(
                                 comp, level="component").max()),
                             plasticity_ratio=float(ratio.xs(comp, level="component").median())))
    return pd.DataFrame(rows)


def embedded_layers(tasks, *, protocol: str = "hidden", n_pairs: int = 256) -> pd.DataFrame:
    """Per task, block and component: the embedded model's relative plasticity before
    finetuning, on the pairs ``empirical.embedded_layers`` measures plasticity on
    (``empirical.task_pairs``: a Fashion-MNIST image and a task image). Columns ``task``,
    ``layer``, ``component`` (plain text), ``relative_plasticity``, ``plasticity``, ``s_in``,
    ``s_out``: the rows the suite study's companions keep (``task_measures.task_plasticity``)."""
    model = models.load_model(models.EMBEDDED_NAME)
    frames = [measure(model, empirical.task_pairs(t, empirical.SOURCE, n_pairs=n_pairs,
                                                  model=model), protocol=protocol,
                      meta=dict(task=t)) for t in tasks]
    out = pd.concat(frames, ignore_index=True)
    out["component"] = out["component"].astype(str)
    return out[["task", "layer", "component", "relative_plasticity", "plasticity", "s_in",
                "s_out"]]


def model_rankings(tasks, recipe_folder, *, protocols=("embedding", "hidden"),
                   source: str = SOURCE, data_root: str = "", n_pairs: int = 128,
                   root=None) -> pd.DataFrame:
    """``measure`` of three networks of the embedded architecture on the same pairs of each
    task (load-or-compute; with ``root``, kept beside a study there: ``cached.kept_table``,
    its key holding the sha256 of the three networks' weights): the embedded model
    (``"embedded (final)"``), its random initialisation (``"random init"``, the ``init``
    checkpoint) and the model pretrained without weight decay (``recipe_folder``, read by
    ``models.load_pretrained``; named ``"no weight decay"``). A ``model`` column; ``ranking``
    ranks them per model.

    Paper: Takeaway 2's order (Fig. 2), for a quantity the paper does not define."""
    folder = Path(recipe_folder)
    final = json.loads((folder / "checkpoints.json").read_text())["checkpoints"]["final"]

    def compute():
        nets = {"embedded (final)": models.load_model(),
                "random init": models.load_model(checkpoint="init"),
                "no weight decay": models.load_pretrained(folder)}
        frames = []
        for task in tasks:
            pairs = empirical.task_pairs(task, source, n_pairs=n_pairs,
                                         model=nets["embedded (final)"], data_root=data_root)
            frames += [measure(net, pairs, protocol=p, meta=dict(model=name, task=task))
                       for name, net in nets.items() for p in protocols]
        out = pd.concat(frames, ignore_index=True)
        return out.assign(component=out["component"].astype(str))

    key = dict(tasks=list(tasks), folder=folder.name, sha256=final["sha256"],
               protocols=list(protocols), source=source, data_root=data_root, n_pairs=n_pairs,
               weights=models.weights_id(models.EMBEDDED_NAME, ("final", "init")))
    return cached.kept_table("relative-models", key, compute, root, **stamp())


def embedded_gauge_check(task: str, c: float = 8.0, *, source: str = SOURCE,
                         data_root: str = "", n_pairs: int = 128, root=None) -> pd.DataFrame:
    """``gauge_check`` of the embedded model on ``task``'s pairs, both protocols
    (load-or-compute; with ``root``, kept beside a study there: ``cached.kept_table``)."""
    def compute():
        model = models.load_model()
        pairs = empirical.task_pairs(task, source, n_pairs=n_pairs, model=model,
                                     data_root=data_root)
        return gauge_check(model, pairs, c)

    key = dict(model=models.EMBEDDED_NAME, task=task, c=float(c), source=source,
               data_root=data_root, n_pairs=n_pairs,
               weights=models.weights_id(models.EMBEDDED_NAME))
    return cached.kept_table("relative-gauge", key, compute, root, **stamp())
