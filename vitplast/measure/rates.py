"""Rates: Definition 1's ratio ||f(x) - f(y)|| / ||x - y|| for one batch of pairs, per component.

The one hook scope (``hooks``: forward hooks where each component of a table is read, its
``components.Tap`` s, so that a unit that is no single module is measured too) and the two
input protocols (``hidden``, ``embedding``: the one place they differ is ``_apply``) live
here; ``batch_rates`` gives every component's rates for a batch of pairs in ONE forward pass
over [x; y], each tensor's pair distances computed once (``_Rates``).
``vitplast.measure.plasticity`` streams pairs through them (``measurement``).

Paper: Definition 1.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
from torch import nn

from vitplast.inputs import check_finite, check_images, to_model
from vitplast.measure.components import TABLE, check_supported, submodule, tap_paths
from vitplast.measure.pairs import check_batch, check_protocol

__all__ = ["rate", "embed", "hooks", "batch_rates", "component_inputs"]


def rate(f, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-pair rate ||f(x) - f(y)|| / ||x - y|| (Frobenius over all but the first dim).

    Paper: Definition 1, the quantity averaged into plasticity. x and y go to f's device
    when f is a module.
    """
    x, y = to_model(f, x, y)  # a module's device; a plain function takes them as they are
    num = (f(x) - f(y)).flatten(1).norm(dim=1)
    return num / (x - y).flatten(1).norm(dim=1)


def _pair_distance(t: torch.Tensor) -> torch.Tensor:
    """||x_i - y_i||_F of a batch [x; y] (first half x, second half y), (B,)."""
    b = t.shape[0] // 2
    return (t[:b].float() - t[b:].float()).flatten(1).norm(dim=1)


def _pair_rate(inp: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Rates of a batch [x; y] (first half x, second half y) given inputs and outputs."""
    return _pair_distance(out) / _pair_distance(inp)


# Elements of the pair differences formed at once on a CPU: 512 KiB of float32, which stays in
# a core's L2 cache while its norms are taken (see ``_Rates``).
_CHUNK = 1 << 17


class _Rates:
    """``_pair_rate`` along one pass, each tensor's pair distances computed once: in a block
    (``hidden``), MHA's input IS LN1's output and FC1's input IS LN2's output (the hooks see
    the same tensor); under ``embedding`` every component but FC2 gets the same embedding. The
    last input's and output's distances are kept for the next call, with weak references to
    their tensors (a strong one would keep an activation alive after the network has let it
    go: more memory in use during the pass).

    On a CPU the differences x - y are formed a few pairs at a time in one small scratch buffer
    (``_CHUNK`` elements) that stays in cache while their norms are taken, so no difference of
    the whole batch is ever allocated (half an activation more at the peak: 155 MB for ViT-B's
    MLP at 64 pairs of 224 px); the numbers agree with the whole-batch difference to float
    rounding. The distances and rates land in buffers that one pass after another reuses
    (``new_pass``; the rates of a pass stay valid until the next one starts), so after the
    first pass the estimator allocates no storage of its own: what it keeps past a pass was
    allocated before it, not between that pass's activations. (Most page faults of a pass on a
    CPU are not the estimator's: glibc's heap returns freed activations to the kernel and maps
    them afresh, a plain forward pass as well, more or less from one run to the next.) Reading
    every activation once is a floor no estimator passes (``benchmarks/plasticity_overhead.py``
    measures the estimator against it)."""

    def __init__(self):
        self.inp = self.out = (None, None)  # (weak reference to a tensor, its distances)
        self.scratch: torch.Tensor | None = None
        self.buffers: list[torch.Tensor] = []  # reused pass after pass, in the order asked
        self.used = 0

    def new_pass(self) -> None:
        """Start a pass: its distances and rates reuse the buffers of the last one."""
        self.inp = self.out = (None, None)
        self.used = 0

    def _buffer(self, n: int, like: torch.Tensor) -> torch.Tensor:
        """The pass's next float32 buffer of ``n`` elements, on ``like``'s device."""
        i, self.used = self.used, self.used + 1
        if i == len(self.buffers):
            self.buffers.append(torch.empty(0))
        buf = self.buffers[i]
        if buf.numel() < n or buf.device != like.device:
            buf = self.buffers[i] = torch.empty(n, dtype=torch.float32, device=like.device)
        return buf[:n]

    def _pair_distance(self, t: torch.Tensor) -> torch.Tensor:
        """``_pair_distance(t)``, up to float rounding, chunk by chunk on a CPU."""
        if t.dtype != torch.float32 or t.device.type != "cpu":
            return _pair_distance(t)
        b = t.shape[0] // 2
        x, y = t[:b].flatten(1), t[b:].flatten(1)  # (B, m) each
        m = x.shape[1]
        rows = max(1, min(b, _CHUNK // m))
        if self.scratch is None or self.scratch.numel() < rows * m:
            self.scratch = torch.empty(rows * m, dtype=t.dtype)
        out = self._buffer(b, t)
        full = self.scratch[:rows * m].view(rows, m)
        for xa, ya, o in zip(x.split(rows), y.split(rows), out.split(rows)):
            diff = torch.sub(xa, ya, out=full if len(xa) == rows else full[:len(xa)])
            torch.linalg.vector_norm(diff, dim=1, out=o)
        return out

    def _distance(self, t: torch.Tensor) -> torch.Tensor:
        for seen, d in (self.inp, self.out):
            if seen is not None and t is seen():
                return d
        return self._pair_distance(t)

    def __call__(self, inp: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        self.inp = (weakref.ref(inp), self._distance(inp))
        self.out = (weakref.ref(out), self._pair_distance(out))
        num, den = self.out[1], self.inp[1]
        return torch.div(num, den, out=self._buffer(len(num), num))


def embed(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The embedding output fed to the first block: patch tokens + CLS (+ registers) +
    positions, after ``norm_pre``. Shape (B, n, d), on the model's device."""
    x = model.patch_embed(to_model(model, images))
    x = model._pos_embed(x)
    x = model.patch_drop(x)
    return model.norm_pre(x)


def _pad_to(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad the last dim of x to ``width`` (FC2's input under the embedding protocol)."""
    return nn.functional.pad(x, (0, width - x.shape[-1]))


def _embedding_input(module: nn.Module, e: torch.Tensor) -> torch.Tensor:
    """The embedding as ``module`` takes it: zero-padded to a linear's wider input (FC2)."""
    wide = isinstance(module, nn.Linear) and module.in_features > e.shape[-1]
    return _pad_to(e, module.in_features) if wide else e


class _Taps:
    """One block's taps during a forward pass: each tapped module's input and output, kept
    only until every component reading it has been handed to ``reduce`` (a tensor kept longer
    would stay alive past its use in the network: more memory in use during the pass). A
    component goes to ``reduce`` in the hook where its last tap is seen; components completed
    in the same hook go in table order."""

    def __init__(self, layer: int, block: nn.Module, components, reduce):
        self.layer, self.reduce = layer, reduce
        self.units = [(c, None if c.module is None else submodule(block, c.module))
                      for c in components]
        self.seen: dict[tuple[str, str], torch.Tensor] = {}
        self.done: set[str] = set()

    def start(self, *_) -> None:
        """A new pass through the block (a pre-hook: also after an interrupted one)."""
        self.seen.clear()
        self.done.clear()

    def __call__(self, path: str, inp: torch.Tensor, out: torch.Tensor) -> None:
        pending = [(c, m) for c, m in self.units if c.name not in self.done]
        wanted = {(t.path, t.side) for c, _ in pending for t in c.taps}
        for side, t in (("input", inp), ("output", out)):
            if (path, side) in wanted:
                self.seen[(path, side)] = t
        for c, module in pending:
            if all((t.path, t.side) in self.seen for t in c.taps):
                self.done.add(c.name)
                self.reduce((self.layer, c.name), module,
                            *(self.seen[(t.path, t.side)] for t in c.taps))
        needed = {(t.path, t.side) for c, _ in self.units if c.name not in self.done
                  for t in c.taps}
        for key in set(self.seen) - needed:
            del self.seen[key]


@contextmanager
def hooks(model: nn.Module, reduce, components=TABLE):
    """The one hook scope: ``reduce(key, module, input, output)`` sees every component's input
    and output (read at its ``taps``) in the forward passes inside it; the handles are removed
    on exit, also after an exception. ``key`` is ``(layer, component)``; ``module`` is the
    module the component is (None for a unit that is no single module)."""
    check_supported(model, components)
    handles = []
    try:
        for layer, block in enumerate(model.blocks):
            taps = _Taps(layer, block, components, reduce)
            handles.append(block.register_forward_pre_hook(taps.start))
            handles += [submodule(block, path).register_forward_hook(
                lambda mod, args, out, path=path, taps=taps: taps(path, args[0], out))
                for path in tap_paths(components)]
        yield
    finally:
        for h in handles:
            h.remove()


def _apply(model: nn.Module, images: torch.Tensor, protocol: str, reduce,
           components=TABLE) -> None:
    """Run every component on its input for ``images`` under ``protocol`` (the one place the
    protocols differ), handing each (input, output) to ``reduce`` as ``hooks`` does. Under
    ``embedding`` a component that is a module is applied to the embedding; one that is not
    is read at its taps in its block run on the embedding."""
    if protocol == "hidden":
        with hooks(model, reduce, components):
            model.forward_features(images)
        return
    check_supported(model, components)
    e = embed(model, images)
    for layer, block in enumerate(model.blocks):
        for comp in components:
            if comp.module is None:
                with hooks(_OneBlock(block), lambda key, mod, inp, o: reduce(
                        (layer, key[1]), mod, inp, o), (comp,)):
                    block(e)
                continue
            module = submodule(block, comp.module)
            inp = _embedding_input(module, e)
            reduce((layer, comp.name), module, inp, module(inp))


class _OneBlock(nn.Module):
    """A block seen as a model of one block (for ``hooks``)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.blocks = nn.ModuleList([block])


def _checked(model, x, y):
    """``check_batch``, and x and y of one shape."""
    x, y = check_batch(model, x, y)
    if x.shape != y.shape:
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} differ in shape: pair i "
                         "is (x[i], y[i]), so both need the same shape")
    return x, y


@torch.no_grad()
def batch_rates(model: nn.Module, x: torch.Tensor, y: torch.Tensor, protocol: str = "hidden",
                components=TABLE) -> dict[tuple[int, str], torch.Tensor]:
    """Rates of every component of every block for a batch of image pairs.

    Args:
        x, y: images (B, C, H, W), pair i is (x[i], y[i]).
        protocol: ``"hidden"`` or ``"embedding"`` (see module docstring).
        components: the table of components to measure
            (``vitplast.measure.components.TABLE``).

    Returns:
        ``{(layer, component): rates (B,)}`` on the model's device (x and y are moved there).

    Raises:
        ValueError: unknown protocol; x and y of different shapes; images the model does not
            take or with non-finite pixels (``vitplast.inputs.check_images``).
    """
    check_protocol(protocol)
    x, y = _checked(model, x, y)
    out, rates = {}, _Rates()
    _apply(model, to_model(model, torch.cat([x, y])), protocol,
           lambda key, mod, inp, o: out.__setitem__(key, rates(inp, o)), components)
    return out


@torch.no_grad()
def component_inputs(model: nn.Module, images: torch.Tensor, protocol: str = "hidden",
                     components=TABLE) -> dict[tuple[int, str], torch.Tensor]:
    """Each component's input for a (small) batch of images under a protocol, (B, n, d_in).

    For checks that apply a component to its real input (tests, notebook 03's head-by-head
    recomputation of attention). The inputs lie on the model's device (images are moved).
    """
    check_protocol(protocol)
    images = check_images(model, images, "images")
    check_finite("images", images)
    images = to_model(model, images)
    inputs = {}
    _apply(model, images, protocol, lambda key, mod, inp, o: inputs.__setitem__(key, inp),
           components)
    return inputs
