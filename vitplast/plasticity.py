"""Plasticity: the average rate of change of a component (Definition 1 of the paper).

    P(f) = E_{(x, y)} [ ||f(x) - f(y)||_F / ||x - y||_F ],   P(f) <= Lip(f),

where x, y are token sequences (n x d) and the expectation is over a data distribution of
pairs (the paper writes "uniform"; in practice, and here, it is the pairs one feeds in).

The estimator runs ONE forward pass over the batch [x; y] with scoped forward hooks on every
component of every block; each hook turns its (input, output) into one rate per pair on the
spot, so memory is O(batch) whatever the number of pairs.

Two input protocols (``PROTOCOLS``):

- ``hidden``: each component gets its real input in the network (LN1 the residual stream,
  MHA the output of LN1, ...). The rate's denominator is that input's difference.
- ``embedding``: the public reference protocol. Every component of every block is applied
  to the embedding output (patch tokens + CLS + positions); FC2 gets it zero-padded from d to
  its input width; no residuals; the denominator is the embedding difference.

Pairs whose two images are identical are excluded and counted (``df.attrs["excluded"]``).
Images are checked against the model before any pass (``vitplast.inputs``): a pair with a NaN
or infinite pixel is an error, never an excluded pair nor a NaN rate.

Tidy output of ``measure`` (one row per pair x layer x component): ``protocol``, ``layer``,
``component``, ``pair`` (index of the pair), ``rate``; plus any ``meta`` columns.

Used by notebooks 01, 02, 03, 05, 06.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from vitplast.components import COMPONENTS, check_component, component_modules
from vitplast.inputs import check_count, check_finite, check_images
from vitplast.models import pick_device

PROTOCOLS = ("hidden", "embedding")


def rate(f, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-pair rate ||f(x) - f(y)|| / ||x - y|| (Frobenius over all but the first dim).

    Paper: Definition 1, the quantity averaged into plasticity.
    """
    num = (f(x) - f(y)).flatten(1).norm(dim=1)
    return num / (x - y).flatten(1).norm(dim=1)


def _pair_rate(inp: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Rates of a batch [x; y] (first half x, second half y) given inputs and outputs."""
    b = inp.shape[0] // 2
    num = (out[:b].float() - out[b:].float()).flatten(1).norm(dim=1)
    return num / (inp[:b].float() - inp[b:].float()).flatten(1).norm(dim=1)


def embed(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The embedding output fed to the first block: patch tokens + CLS (+ registers) +
    positions, after ``norm_pre``. Shape (B, n, d)."""
    x = model.patch_embed(images)
    x = model._pos_embed(x)
    x = model.patch_drop(x)
    return model.norm_pre(x)


def _pad_to(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad the last dim of x to ``width`` (FC2's input under the embedding protocol)."""
    return nn.functional.pad(x, (0, width - x.shape[-1]))


def _embedding_input(module: nn.Module, component: str, e: torch.Tensor) -> torch.Tensor:
    return _pad_to(e, module.in_features) if component == "FC2" else e


def _check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")


@contextmanager
def hooked_rates(model: nn.Module):
    """Scoped hooks filling ``{(layer, component): [rates per batch]}`` under ``hidden``.

    The handles are removed on exit, also after an exception.
    """
    rates: dict[tuple[int, str], list[torch.Tensor]] = {}
    handles = []
    for key, module in component_modules(model).items():
        rates[key] = []

        def hook(mod, args, out, key=key):
            rates[key].append(_pair_rate(args[0], out).detach())

        handles.append(module.register_forward_hook(hook))
    try:
        yield rates
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def batch_rates(model: nn.Module, x: torch.Tensor, y: torch.Tensor, protocol: str = "hidden"
                ) -> dict[tuple[int, str], torch.Tensor]:
    """Rates of every component of every block for a batch of image pairs.

    Args:
        x, y: images (B, C, H, W), pair i is (x[i], y[i]).
        protocol: ``"hidden"`` or ``"embedding"`` (see module docstring).

    Returns:
        ``{(layer, component): rates (B,)}`` on the model's device.

    Raises:
        ValueError: unknown protocol; x and y of different shapes; images the model does not
            take or with non-finite pixels (``vitplast.inputs.check_images``).
    """
    _check_protocol(protocol)
    x, y = check_images(model, x, "x"), check_images(model, y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} differ in shape: pair i "
                         "is (x[i], y[i]), so both need the same shape")
    check_finite("x", x)
    check_finite("y", y)
    xy = torch.cat([x, y])
    if protocol == "hidden":
        with hooked_rates(model) as rates:
            model.forward_features(xy)
        return {k: v[0] for k, v in rates.items()}
    e = embed(model, xy)
    out = {}
    for (layer, comp), module in component_modules(model).items():
        inp = _embedding_input(module, comp, e)
        out[(layer, comp)] = _pair_rate(inp, module(inp))
    return out


@torch.no_grad()
def component_inputs(model: nn.Module, images: torch.Tensor, protocol: str = "hidden"
                     ) -> dict[tuple[int, str], torch.Tensor]:
    """Each component's input for a (small) batch of images under a protocol, (B, n, d_in).

    For bounds that need data (LayerNorm sigma, MHA radius) and Jacobian estimates.
    """
    _check_protocol(protocol)
    images = check_images(model, images, "images")
    check_finite("images", images)
    modules = component_modules(model)
    if protocol == "embedding":
        e = embed(model, images)
        return {k: _embedding_input(m, k[1], e) for k, m in modules.items()}
    inputs, handles = {}, []
    for key, module in modules.items():
        handles.append(module.register_forward_hook(
            lambda mod, args, out, key=key: inputs.__setitem__(key, args[0].detach())))
    try:
        model.forward_features(images)
    finally:
        for h in handles:
            h.remove()
    return inputs


class Pairs(Dataset):
    """Image pairs (x_i, y_i), read lazily from one or two sources, so that measuring
    12,800 pairs of 224 px images never holds them all in memory.

    A source is an image tensor (N, C, H, W) or a dataset of (image, label).

    - ``y_source`` given (the paper's pairs): x = x_source[i], y = y_source[i], in dataset
      order, unshuffled, for i < n_pairs. Asking for more pairs than the shorter source has
      warns and makes as many as it has.
    - ``y_source`` None (within one set): two independent random orders of x_source (drawn
      with replacement; more pairs than the N(N-1) distinct ones warns that pairs repeat).

    Raises:
        ValueError: ``n_pairs`` not a positive integer; an empty source; one image within one
            set; x and y images of different shapes.
    """

    def __init__(self, x_source, y_source=None, *, n_pairs: int = 1024, seed: int = 0):
        n_pairs = check_count("n_pairs", n_pairs)
        self.x_source = x_source
        self.y_source = x_source if y_source is None else y_source
        for name, source in (("x_source", x_source), ("y_source", y_source)):
            if source is not None and len(source) == 0:
                raise ValueError(f"{name} has no images: pairs need at least one image in "
                                 "each source")
        if y_source is not None:
            if self._image(self.x_source, 0).shape != self._image(self.y_source, 0).shape:
                raise ValueError(f"x images {tuple(self._image(x_source, 0).shape)} and y images "
                                 f"{tuple(self._image(y_source, 0).shape)} differ in shape")
            self.ix = self.iy = torch.arange(self._aligned(n_pairs))
        else:
            self._check_within(n_pairs)
            g = torch.Generator().manual_seed(seed)
            self.ix = torch.randint(len(x_source), (n_pairs,), generator=g)
            self.iy = torch.randint(len(x_source), (n_pairs,), generator=g)

    def _aligned(self, n_pairs: int) -> int:
        """How many aligned pairs can be made (warns when fewer than asked)."""
        n = min(n_pairs, len(self.x_source), len(self.y_source))
        if n < n_pairs:
            warnings.warn(f"n_pairs={n_pairs} aligned pairs asked, but x_source has "
                          f"{len(self.x_source)} and y_source {len(self.y_source)} images: "
                          f"made {n} pairs", stacklevel=3)
        return n

    def _check_within(self, n_pairs: int) -> None:
        n = len(self.x_source)
        if n < 2:
            raise ValueError(f"x_source has {n} image: pairs within one set need at least 2 "
                             "different images; give more images or a y_source")
        if n_pairs > n * (n - 1):
            warnings.warn(f"n_pairs={n_pairs} random pairs asked from {n} images, which form "
                          f"only {n * (n - 1)} distinct pairs of different images: made "
                          f"{n_pairs} pairs, some repeated (identical ones are excluded when "
                          "measured)", stacklevel=3)

    @staticmethod
    def _image(source, i: int) -> torch.Tensor:
        return source[i] if isinstance(source, torch.Tensor) else source[i][0]

    def __len__(self) -> int:
        return len(self.ix)

    def __getitem__(self, i: int):
        return (self._image(self.x_source, int(self.ix[i])),
                self._image(self.y_source, int(self.iy[i])))

    def tensors(self, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``limit`` pairs as two aligned tensors (N, C, H, W)."""
        n = len(self) if limit is None else min(limit, len(self))
        items = [self[i] for i in range(n)]
        return torch.stack([a for a, _ in items]), torch.stack([b for _, b in items])


def make_pairs(x_source, y_source=None, *, n_pairs: int = 1024, seed: int = 0) -> Pairs:
    """``Pairs`` of images from one source (random pairs) or two (aligned, unshuffled)."""
    return Pairs(x_source, y_source, n_pairs=n_pairs, seed=seed)


def measure(model: nn.Module, x, y: torch.Tensor | None = None, *, protocol: str = "hidden",
            batch_size: int = 64, device: str | torch.device | None = None, workers: int = 0,
            progress: bool = True, meta: dict | None = None) -> pd.DataFrame:
    """Per-pair rates of every component of every block, streamed over batches of pairs.

    Paper: Definition 1 and section 4 (the empirical plasticity of Fig. 2-3).

    Args:
        model: a timm VisionTransformer (see ``vitplast.components.check_supported``).
        x, y: aligned image tensors (N, C, H, W); or ``x`` a ``Pairs`` dataset and ``y`` None.
        protocol: ``"hidden"`` or ``"embedding"``.
        batch_size: pairs per forward pass (the pass sees 2 x batch_size images).
        workers: DataLoader workers reading the pairs.
        meta: constant columns to add, e.g. ``{"model": ..., "task": ...}``.

    Returns:
        The tidy per-pair table (module docstring); ``attrs["excluded"]`` counts the
        identical pairs left out.

    Raises:
        ValueError: bad ``protocol``, ``batch_size`` or ``workers``; no pairs; images the model
            does not take (checked on the first pair before any pass) or with non-finite pixels
            (checked batch by batch, naming the pairs).
    """
    x = check_pairs(model, x, y, protocol=protocol, batch_size=batch_size, workers=workers)
    device = pick_device(device) if device is not None else next(model.parameters()).device
    model = model.to(device).eval()
    from tqdm.auto import tqdm

    # Results go into arrays allocated once: many small tensors kept alive across batches
    # would pin the heap between the batches' large activations (glibc never returns that
    # memory), so the process would grow with the number of pairs.
    n = len(x)
    pairs, out = np.empty(n, dtype=np.int64), {}
    done, start = 0, 0
    loader = DataLoader(x, batch_size=batch_size, num_workers=workers)
    for xb, yb in tqdm(loader, desc=f"plasticity ({protocol})", disable=not progress, leave=False):
        xb, yb = check_batch(model, xb, yb, start)
        keep = torch.nonzero((xb - yb).flatten(1).abs().amax(dim=1) > 0).flatten()
        pairs[done:done + len(keep)] = start + keep.numpy()
        start += len(xb)
        if len(keep) == 0:
            continue
        rates = batch_rates(model, xb[keep].to(device), yb[keep].to(device), protocol)
        for key, r in rates.items():
            out.setdefault(key, np.empty(n, dtype=np.float32))[done:done + len(keep)] = r.cpu()
        done += len(keep)
    if done == 0:
        raise ValueError(f"all {start} pairs are identical images: plasticity is undefined")
    frames = [pd.DataFrame({"layer": layer, "component": comp, "pair": pairs[:done],
                            "rate": rates[:done]})
              for (layer, comp), rates in out.items()]
    df = pd.concat(frames, ignore_index=True)
    df.insert(0, "protocol", protocol)
    for k, v in (meta or {}).items():
        df.insert(0, k, v)
    df["component"] = pd.Categorical(df["component"], categories=list(COMPONENTS))
    df.attrs["excluded"] = start - done
    return df


def check_pairs(model: nn.Module, x, y: torch.Tensor | None = None, *,
                protocol: str = "hidden", batch_size: int = 64, workers: int = 0) -> Dataset:
    """The dataset of pairs to read, after checking the arguments and the first pair against
    the model (the rest is checked batch by batch, ``check_batch``), before any pass.

    Args: as ``measure``'s.

    Used by ``measure``, ``bounds.model_bounds`` and ``intervals.intervals``.
    """
    _check_protocol(protocol)
    check_count("batch_size", batch_size, hint="pairs per forward pass, e.g. 64")
    check_count("workers", workers, minimum=0, hint="0 reads the pairs in this process")
    if y is not None:
        if len(x) != len(y):
            raise ValueError(f"need as many x as y images, got {len(x)} and {len(y)}")
        x = TensorDataset(x, y)
    if len(x) == 0:
        raise ValueError("no pairs to measure: x is empty")
    first_x, first_y = x[0]
    check_images(model, first_x[None], "x", warn=False)
    check_images(model, first_y[None], "y", warn=False)
    return x


def check_batch(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, start: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of pairs (from pair ``start`` on) as the model takes them; non-finite pixels
    raise naming the pairs (a NaN pair would otherwise pass for identical and be excluded).

    Used by ``measure`` and ``bounds.model_bounds``.
    """
    xb = check_images(model, xb, "x", warn=start == 0)
    yb = check_images(model, yb, "y", warn=start == 0)
    check_finite("x", xb, offset=start)
    check_finite("y", yb, offset=start)
    return xb, yb


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


def order(ranked: pd.DataFrame) -> str:
    """The ranking as text, e.g. ``"MHA > FC1 > FC2 > LN2 > LN1"`` (one group)."""
    return " > ".join(ranked.sort_values("rank")["component"].astype(str))



@torch.no_grad()
def scale_curve(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scales: list[float],
                component: str = "MHA") -> pd.DataFrame:
    """Plasticity of a component of every block applied to the embedding times c.

    Under the embedding protocol MHA sees the un-normalised embedding, and attention is not
    scale-invariant: this curve shows how much its rate depends on that scale.
    Columns: ``layer``, ``component``, ``scale``, ``plasticity``.
    """
    check_component(component)
    x, y = check_batch(model, x, y)
    ex, ey = embed(model, x), embed(model, y)
    rows = []
    for (layer, comp), module in component_modules(model).items():
        if comp != component:
            continue
        for c in scales:
            r = _pair_rate(torch.cat([c * ex, c * ey]),
                           module(_embedding_input(module, comp, torch.cat([c * ex, c * ey]))))
            rows.append(dict(layer=layer, component=comp, scale=c, plasticity=r.mean().item()))
    return pd.DataFrame(rows)
