"""Natural images offline: random crops of the two photographs scikit-learn ships.

``sklearn.datasets.load_sample_images`` holds two 427 x 640 colour photographs (a Chinese
temple, ``china.jpg``, and a flower, ``flower.jpg``). They are what natural images this
machine has without a download: few, so ``crops`` draws many views of them, each a random
square of 40-100% of the short side at a random place, maybe mirrored, resized to the model's
input and normalised with its mean and std. Pairs of two crops are pairs of natural images of
the kind a model pretrained on photographs saw (two views of one photograph are half the
pairs: the notebook says so).

Used by ``vitplast.measure.real`` (the real model's plasticity on natural images, notebook 02c).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vitplast.inputs import native_input

#: The photographs: scikit-learn's file names.
PHOTOS = ("china.jpg", "flower.jpg")


def photographs() -> torch.Tensor:
    """The photographs as one float tensor (2, 3, 427, 640), pixels in [0, 1]."""
    from sklearn.datasets import load_sample_images

    images = np.stack(load_sample_images().images)  # (2, 427, 640, 3) uint8
    return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0


def crops(n: int, size: int, *, mean=(0.5,) * 3, std=(0.5,) * 3, seed: int = 0
          ) -> torch.Tensor:
    """``n`` random square crops (module docstring) of ``size`` px, normalised:
    (n, 3, size, size), the same for the same seed."""
    photos, g = photographs(), torch.Generator().manual_seed(seed)
    _, _, h, w = photos.shape
    out = torch.empty(n, 3, size, size)
    for i in range(n):
        photo = photos[int(torch.randint(len(photos), (1,), generator=g))]
        side = int(min(h, w) * (0.4 + 0.6 * float(torch.rand(1, generator=g))))
        top = int(torch.randint(h - side + 1, (1,), generator=g))
        left = int(torch.randint(w - side + 1, (1,), generator=g))
        crop = photo[:, top:top + side, left:left + side]
        if float(torch.rand(1, generator=g)) < 0.5:
            crop = crop.flip(-1)
        out[i] = nn.functional.interpolate(crop[None], size=(size, size), mode="bilinear",
                                           antialias=True, align_corners=False)[0]
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    return (out - m) / s


def crops_for(model: nn.Module, n: int, *, seed: int = 0) -> torch.Tensor:
    """``crops`` at ``model``'s input size, normalised with its own mean and std."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    _, size, _ = native_input(model)
    return crops(n, size, mean=cfg.get("mean", (0.5,) * 3), std=cfg.get("std", (0.5,) * 3),
                 seed=seed)
