"""Plasticity: the average rate of change of a component (Definition 1 of the paper).

    P(f) = E_{(x, y)} [ ||f(x) - f(y)||_F / ||x - y||_F ],   P(f) <= Lip(f),

where x, y are token sequences (n x d) and the expectation is over a data distribution of
pairs (the paper writes "uniform"; in practice, and here, it is the pairs one feeds in).

The estimator runs ONE forward pass over the batch [x; y] with scoped forward hooks on every
component of every block (``hooks``, the one hook scope); each hook reduces its (input, output)
on the spot to one rate per pair (kept on the device, copied to the host once per batch) AND,
unless asked not to, to running statistics of the input that the bounds of
``vitplast.measure.bounds`` need (per-token sigma, token norms, sequence energies), so memory is
O(batch) whatever the number of pairs (``measurement``; ``measure`` is its rates, without the
statistics).

Two input protocols (``PROTOCOLS``):

- ``hidden``: each component gets its real input in the network (LN1 the residual stream,
  MHA the output of LN1, ...). The rate's denominator is that input's difference.
- ``embedding``: the public reference protocol. Every component of every block is applied
  to the embedding output (patch tokens + CLS + positions); FC2 gets it zero-padded from d to
  its input width; no residuals; the denominator is the embedding difference.

Pairs (``Pairs``, ``make_pairs``) live in ``vitplast.measure.pairs``, one batch's rates (``rate``,
``hooks``, ``batch_rates``, the two protocols) in ``vitplast.measure.rates``. Pairs whose two images
are identical are excluded and counted (``df.attrs["excluded"]``). Images are checked against the
model before any pass (``vitplast.inputs``): a pair with a NaN or infinite pixel is an error, never
an excluded pair nor a NaN rate.

Tidy output of ``measure`` (one row per pair x layer x component): ``protocol``, ``layer``,
``component``, ``pair`` (index of the pair), ``rate``; plus any ``meta`` columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from vitplast.inputs import check_count, model_device, to_model
from vitplast.measure.bounds import STATISTICS, token_sigma
from vitplast.measure.components import TABLE, check_component, component_modules, names
from vitplast.measure.pairs import check_batch, check_pairs
from vitplast.measure.rates import (
    _apply,
    _embedding_input,
    _pair_rate,
    _Rates,
    embed,
)
from vitplast.models import pick_device

__all__ = ["Measurement", "measurement", "measure", "summarize", "ranking", "spread", "order",
           "scale_curve"]


class _Moments:
    """min, max, mean and (population) std of a stream of numbers in O(1) memory: each batch is
    reduced where it lies (one copy of 4 numbers to the CPU) and merged in float64 (Chan et al.),
    so the result equals the statistics of all the numbers at once up to round-off."""

    def __init__(self):
        self.lo, self.hi, self.mean, self.m2, self.n = math.inf, -math.inf, 0.0, 0.0, 0

    def add(self, v: torch.Tensor) -> None:
        v = v.detach().float().flatten()
        mean = v.mean()
        lo, hi, m, m2 = torch.stack([v.min(), v.max(), mean, (v - mean).pow(2).sum()]).tolist()
        n, total = v.numel(), self.n + v.numel()
        delta = m - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta ** 2 * self.n * n / total
        self.lo, self.hi, self.n = min(self.lo, lo), max(self.hi, hi), total

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.n)


class _Reduction:
    """What the measuring pass keeps of one component's inputs, besides its rates: the running
    statistics its bound needs (``vitplast.measure.bounds.STATISTICS``: per-token sigma for a
    LayerNorm; token norms and sequence energies for MHA; none for a linear layer or a unit
    without a bound) and the first ``keep`` x inputs (a batch is [x; y], so its first half);
    only the inputs if not ``gather``."""

    def __init__(self, keep: int, gather: bool = True):
        self.keep, self.gather, self.kept, self.n = keep, gather, [], 0
        self.sigma, self.sq_norm, self.energy = _Moments(), _Moments(), _Moments()

    def add(self, module: nn.Module | None, needs: str | None, inp: torch.Tensor) -> None:
        """Reduce one batch's input; ``needs``: the statistics its bound reads (or None)."""
        self.n = inp.shape[1]
        if self.gather and needs == "sigma":
            self.sigma.add(token_sigma(inp, module.eps))  # (2B, n)
        elif self.gather and needs == "tokens":
            sq = inp.float().pow(2).sum(dim=-1)  # (2B, n) ||x_i||^2
            self.sq_norm.add(sq)
            self.energy.add(sq.sum(dim=-1))  # (2B,) ||X_b||_F^2
        need = self.keep - sum(len(t) for t in self.kept)
        if need > 0:
            self.kept.append(inp[:min(need, len(inp) // 2)].detach().clone())

    def statistics(self) -> dict:
        s, q, e = self.sigma, self.sq_norm, self.energy
        nan = math.nan
        return dict(n=self.n, sigma=s.lo if s.n else nan, sigma_mean=s.mean if s.n else nan,
                    sigma_cv=s.std / s.mean if s.n else nan,
                    r_rms=math.sqrt(q.mean) if q.n else nan, r_max=math.sqrt(q.hi) if q.n else nan,
                    energy=e.mean if e.n else nan, alpha=math.sqrt(e.hi / e.mean) if e.n else nan)


class _Stream:
    """The pairs of a dataset, batch by batch, as one measuring pass reads them: each batch
    checked (``check_batch``), its identical pairs dropped (counted in ``seen`` but not kept),
    and [x; y] of the kept ones moved to the model's device. Yields ``(kept, images)``: the
    kept pairs' indices in the dataset (numpy) and their images (2k, C, H, W).

    Raises (at the end of the iteration):
        ValueError: every pair was identical (plasticity is undefined).
    """

    def __init__(self, model, pairs, batch_size: int, workers: int, *, desc: str,
                 progress: bool):
        self.model, self.pairs, self.seen = model, pairs, 0
        cuda = getattr(model_device(model), "type", "cpu") == "cuda"
        self.loader = DataLoader(pairs, batch_size=batch_size, num_workers=workers,
                                 pin_memory=cuda)  # pinned: asynchronous copies to the GPU
        self.desc, self.progress = desc, progress

    def __iter__(self):
        from tqdm.auto import tqdm

        kept_any = False
        for xb, yb in tqdm(self.loader, desc=self.desc, disable=not self.progress, leave=False):
            xb, yb = check_batch(self.model, xb, yb, self.seen)
            kept = torch.nonzero(torch.ne(xb, yb).flatten(1).any(dim=1)).flatten()
            start, self.seen = self.seen, self.seen + len(xb)
            if not len(kept):
                continue
            kept_any = True
            x, y = to_model(self.model, xb, yb)
            if len(kept) < len(xb):  # all kept: no copy by index
                x, y = x[kept.to(x.device)], y[kept.to(x.device)]
            yield start + kept.numpy(), torch.cat([x, y])
        if not kept_any:
            raise ValueError(f"all {self.seen} pairs are identical images: plasticity is "
                             "undefined")


@dataclass
class Measurement:
    """What one measuring pass over the pairs gives (``measurement``).

    Attributes:
        rates: the tidy per-pair table (module docstring); ``attrs["excluded"]`` counts the
            identical pairs left out.
        statistics: one row per (layer, component) of its inputs over all 2N images of the
            kept pairs (None when measured with ``statistics=False``): ``n`` (tokens); LN:
            ``sigma`` (smallest per-token sqrt(var + eps)), ``sigma_mean``, ``sigma_cv`` (std /
            mean over tokens); MHA: ``r_rms`` (sqrt(mean_i ||x_i||^2)), ``r_max`` (max_i
            ||x_i||), ``energy`` (mean_b ||X_b||_F^2), ``alpha`` (sqrt(max_b ||X_b||_F^2 /
            energy)); NaN where the component's bound needs none. The input of
            ``vitplast.measure.bounds.model_bounds``.
        inputs: ``{(layer, component): (k, n, d_in)}``, each component's input for the x
            images of the first k = ``keep`` kept pairs (for ``bounds.local_lipschitz``).
        scales: one row per (layer, component) when measured with ``scales=True`` (else None):
            ``s_in`` and ``s_out``, the RMS over all 2N images of the kept pairs of the
            Frobenius norm of its input and of its output, sqrt(mean_b ||X_b||_F^2)
            (``vitplast.measure.relative``: plasticity in units of these scales).
    """

    rates: pd.DataFrame
    statistics: pd.DataFrame
    inputs: dict = field(default_factory=dict)
    scales: pd.DataFrame | None = None


def measure(model: nn.Module, x, y: torch.Tensor | None = None, *, protocol: str = "hidden",
            batch_size: int = 64, device: str | torch.device | None = None, workers: int = 0,
            progress: bool = True, meta: dict | None = None, components=TABLE) -> pd.DataFrame:
    """Per-pair rates of every component of every block, streamed over batches of pairs: the
    ``rates`` of ``measurement`` (same arguments, errors and pass; no statistics gathered).

    Paper: Definition 1 and section 4 (the empirical plasticity of Fig. 2-3).
    """
    return measurement(model, x, y, protocol=protocol, batch_size=batch_size, device=device,
                       workers=workers, progress=progress, meta=meta, statistics=False,
                       components=components).rates


def measurement(model: nn.Module, x, y: torch.Tensor | None = None, *, protocol: str = "hidden",
                batch_size: int = 64, device: str | torch.device | None = None,
                workers: int = 0, progress: bool = True, meta: dict | None = None,
                keep: int = 0, statistics: bool = True, scales: bool = False,
                components=TABLE) -> Measurement:
    """ONE streamed pass over the pairs: every component's per-pair rates, the statistics of
    its inputs that Props. 1-4 need, and its first ``keep`` inputs (``Measurement``).

    Paper: Definition 1 and section 4 (rates); Props. 1-4 (statistics).

    Args:
        model: a timm VisionTransformer (see ``vitplast.measure.components.check_supported``).
        x, y: aligned image tensors (N, C, H, W); or ``x`` a ``Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``.
        batch_size: pairs per forward pass (the pass sees 2 x batch_size images).
        workers: DataLoader workers reading the pairs.
        meta: constant columns to add to ``rates``, e.g. ``{"model": ..., "task": ...}``.
        keep: how many x inputs of each component to keep (0: none).
        statistics: gather the statistics of the inputs (False: ``statistics`` is None).
        scales: also sum the squared norms of every component's input and output in the
            same pass (``Measurement.scales``; ``vitplast.measure.relative``).
        components: the table of components to measure
            (``vitplast.measure.components.TABLE``; ``components.extended`` adds a row).

    Raises:
        ValueError: bad ``protocol``, ``batch_size``, ``workers`` or ``keep``; no pairs; images
            the model does not take (checked on the first pair before any pass) or with
            non-finite pixels (checked batch by batch, naming the pairs); only identical pairs.
    """
    x = check_pairs(model, x, y, protocol=protocol, batch_size=batch_size, workers=workers)
    check_count("keep", keep, minimum=0, hint="inputs kept per component, e.g. 8")
    if device is not None:
        model = model.to(pick_device(device))
    model = model.eval()

    # Results go into arrays allocated once: many small tensors kept alive across batches
    # would pin the heap between the batches' large activations (glibc never returns that
    # memory), so the process would grow with the number of pairs.
    n = len(x)
    pairs, out, reduced, batch = np.empty(n, dtype=np.int64), {}, {}, {}
    done, pass_rates, squares = 0, _Rates(), {}
    needs = {c.name: STATISTICS.get(c.bound) for c in components}

    def reduce(key, module, inp, o):
        if statistics or keep:
            reduced.setdefault(key, _Reduction(keep, statistics)).add(module, needs[key[1]], inp)
        if scales:  # sum over the 2B images of ||X_b||^2 and ||f(X_b)||^2, on the device
            sq = torch.stack([torch.linalg.vector_norm(t, dtype=torch.float64) for t in (inp, o)])
            squares[key] = squares[key] + sq ** 2 if key in squares else sq ** 2
        batch[key] = pass_rates(inp, o)  # on the device: no sync inside the forward pass

    stream = _Stream(model, x, batch_size, workers, desc=f"plasticity ({protocol})",
                     progress=progress)
    for kept, images in stream:
        pairs[done:done + len(kept)] = kept
        pass_rates.new_pass()  # this pass's rates overwrite the last one's buffers
        with torch.no_grad():
            _apply(model, images, protocol, reduce, components)
        for key, r in zip(batch, torch.stack(list(batch.values())).cpu().numpy()):
            out.setdefault(key, np.empty(n, dtype=np.float32))[done:done + len(kept)] = r
        batch.clear()
        done += len(kept)
    return Measurement(_rates_table(out, pairs[:done], protocol, meta, names(components),
                                    excluded=stream.seen - done),
                       pd.DataFrame([dict(layer=k[0], component=k[1], **r.statistics())
                                     for k, r in reduced.items()]) if statistics else None,
                       {k: torch.cat(r.kept) for k, r in reduced.items() if r.kept},
                       _scales_table(squares, 2 * done) if scales else None)


def _scales_table(squares: dict, images: int) -> pd.DataFrame:
    """``Measurement.scales`` from the summed squared norms over ``images`` images."""
    rms = {k: (v / images).sqrt().tolist() for k, v in squares.items()}
    return pd.DataFrame([dict(layer=k[0], component=k[1], s_in=v[0], s_out=v[1])
                         for k, v in rms.items()])


def _rates_table(out: dict, pairs: np.ndarray, protocol: str, meta: dict | None,
                 categories, excluded: int) -> pd.DataFrame:
    frames = [pd.DataFrame({"layer": layer, "component": comp, "pair": pairs,
                            "rate": rates[:len(pairs)]})
              for (layer, comp), rates in out.items()]
    df = pd.concat(frames, ignore_index=True)
    df.insert(0, "protocol", protocol)
    for k, v in (meta or {}).items():
        df.insert(0, k, v)
    df["component"] = pd.Categorical(df["component"], categories=list(categories))
    df.attrs["excluded"] = excluded
    return df


def summarize(df: pd.DataFrame, by: tuple[str, ...] = ("layer", "component")) -> pd.DataFrame:
    """Plasticity per group: ``plasticity`` (mean rate), ``std``, ``n``, ``ci95``
    (1.96 std / sqrt(n), as the paper), ``max_rate``.

    Extra columns (model, task, protocol) present in ``df`` are kept as grouping keys.
    """
    keys = [c for c in ("model", "task", "checkpoint", "protocol") if c in df.columns]
    keys += [k for k in by if k not in keys]
    g = df.groupby(keys, observed=True)["rate"]
    out = g.agg(plasticity="mean", std="std", n="count", max_rate="max").reset_index()
    out["ci95"] = 1.96 * out["std"] / np.sqrt(out["n"])
    return out


def ranking(df: pd.DataFrame) -> pd.DataFrame:
    """Per component: plasticity averaged over layers (of per-layer means), and its rank
    (1 = most plastic), per protocol / model / task present in ``df``.

    Paper: Takeaway 2 (empirical ranking MHA > FC1 > FC2 > LN2 > LN1 on ViT-B).
    """
    per_layer = summarize(df)
    keys = [c for c in ("model", "task", "checkpoint", "protocol") if c in per_layer.columns]
    out = (per_layer.groupby(keys + ["component"], observed=True)["plasticity"].mean()
           .reset_index())
    out["rank"] = out.groupby(keys)["plasticity"].rank(ascending=False, method="min").astype(int)
    return out.sort_values(keys + ["rank"]).reset_index(drop=True)


def spread(df: pd.DataFrame) -> pd.DataFrame:
    """Per protocol and component, the 5%, 50% and 95% of the per-row rates of ``df``, pooled
    over every row given (layers, and tasks or whatever else ``df`` holds: a difference between
    layers counts as spread), in the order of the medians; ``95% / 5%`` (how far apart the
    rates of one component sit) and ``median / the next lower`` (the gap to the neighbour below
    in that order).

    Paper: Takeaway 2 (how far the per-pair rates overlap the ranking's gaps); notebook 02."""
    out = df.groupby(["protocol", "component"], observed=True)["rate"].quantile(
        [0.05, 0.5, 0.95]).unstack().sort_values(["protocol", 0.5])
    out["95% / 5%"] = out[0.95] / out[0.05]
    out["median / the next lower"] = out[0.5] / out.groupby(level="protocol")[0.5].shift()
    return out


def order(ranked: pd.DataFrame) -> str:
    """The ranking as text, e.g. ``"MHA > FC1 > FC2 > LN2 > LN1"`` (one group)."""
    return " > ".join(ranked.sort_values("rank")["component"].astype(str))


@torch.no_grad()
def scale_curve(model: nn.Module, x, y: torch.Tensor | None = None,
                scales=(0.25, 0.5, 1.0, 2.0, 4.0), component: str = "MHA", *,
                batch_size: int = 64, workers: int = 0, progress: bool = False) -> pd.DataFrame:
    """Plasticity of a component of every block applied to the embedding times c.

    Under the embedding protocol MHA sees the un-normalised embedding, and attention is not
    scale-invariant: this curve shows how much its rate depends on that scale. The pairs are
    read as ``measure`` reads them: streamed in batches of ``batch_size`` (memory O(batch)),
    moved to the model's device, identical pairs excluded (counted in ``attrs["excluded"]``).

    Args:
        x, y: aligned image tensors (N, C, H, W); or ``x`` a ``Pairs`` dataset and ``y`` None.
        scales: the factors c.
        component: which component of every block (``vitplast.measure.components.COMPONENTS``).

    Returns:
        Columns ``layer``, ``component``, ``scale``, ``plasticity`` (mean rate over the pairs).

    Raises:
        ValueError: as ``measure``: unknown component, bad pairs, only identical pairs.

    Paper: not in the paper (objection to the embedding protocol).
    """
    check_component(component)
    pairs = check_pairs(model, x, y, batch_size=batch_size, workers=workers)
    modules = {k: m for k, m in component_modules(model).items() if k[1] == component}
    sums = torch.zeros(len(modules), len(scales), dtype=torch.float64)
    stream = _Stream(model.eval(), pairs, batch_size, workers, desc=f"{component} scale curve",
                     progress=progress)
    count = 0
    for kept, images in stream:
        e = embed(model, images)
        part = torch.stack([torch.stack([_pair_rate(c * e, module(
            _embedding_input(module, c * e))).double().sum() for c in scales])
            for (_, comp), module in modules.items()])  # (layers, scales), on the device
        sums += part.cpu()
        count += len(kept)
    mean = (sums / count).tolist()
    df = pd.DataFrame([dict(layer=layer, component=comp, scale=c, plasticity=mean[i][j])
                       for i, (layer, comp) in enumerate(modules) for j, c in enumerate(scales)])
    df.attrs["excluded"] = stream.seen - count
    return df
