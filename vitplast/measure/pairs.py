"""Pairs: the image pairs (x, y) over which plasticity's expectation runs, read lazily, and
the checks every measuring pass makes of them before and during the pass.

Paper: Definition 1 (the pairs of the expectation) and section 4 (x = pretraining-domain image
i, y = downstream image i, unshuffled).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from vitplast.inputs import check_count, check_finite, check_images

PROTOCOLS = ("hidden", "embedding")


def check_protocol(protocol: str) -> None:
    """Raise naming the valid protocols unless ``protocol`` is one of ``PROTOCOLS``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")


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


def check_pairs(model: nn.Module, x, y: torch.Tensor | None = None, *,
                protocol: str = "hidden", batch_size: int = 64, workers: int = 0) -> Dataset:
    """The dataset of pairs to read, after checking the arguments and the first pair against
    the model (the rest is checked batch by batch, ``check_batch``), before any pass.

    Args: as ``plasticity.measurement``'s.
    """
    check_protocol(protocol)
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
    """
    xb = check_images(model, xb, "x", warn=start == 0)
    yb = check_images(model, yb, "y", warn=start == 0)
    check_finite("x", xb, offset=start)
    check_finite("y", yb, offset=start)
    return xb, yb
