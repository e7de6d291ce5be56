"""The task suite: 33 varied downstream tasks for the embedded model, built offline.

Paper: section 5 compares finetuning configurations over 11 datasets. The embedded model's
first studies had 7 tasks, 6 of them corruptions of the pretraining images with the same 10
labels: too few, and too alike, to decide a difference of a point between configurations
(tasks are the unit of analysis; their spread, not seeds, sets the power). The suite spans
five families, each built deterministically from what any machine has:

- ``shift``: Fashion-MNIST (the pretraining domain) with its 10 labels, under 11 CIFAR-10-C
  corruption families at severity 5 (``vitplast.datasets.corruptions``) and 4 geometric or
  photometric shifts (``vitplast.datasets.data``): 15 tasks, fewer than half of the suite;
- ``labels``: Fashion-MNIST images with other labels (coarse groups, arbitrary pairs, the
  image's orientation);
- ``digits``: scikit-learn's handwritten digits (a new domain), plain, inverted, rotated, and
  relabelled by parity;
- ``glyphs``: characters rendered from matplotlib's fonts (``vitplast.datasets.drawn``);
- ``drawn``: procedural pictures (shapes, dot counts, gratings, textures, symmetry).

``SUITE`` maps each name to a ``SuiteTask`` (family, one-line description, class count);
``sets`` builds the generated ones (the shifts and plain digits are ``vitplast.datasets.data``'s).
Every task loads through ``vitplast.datasets.tasks.load`` like any other, with the same options: a
drawn task makes ``train_size`` + ``test_size`` images (default 5,000 + 2,000) from ``seed``
and ignores ``severity``; digits tasks have 1,797 images and split 80/20 for test.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from vitplast.datasets import data, drawn

FAMILIES = ("shift", "labels", "digits", "glyphs", "drawn")


@dataclass(frozen=True)
class SuiteTask:
    """A task of the suite: its ``family`` (``FAMILIES``), a one-line ``description`` and its
    number of ``classes``."""

    family: str
    description: str
    classes: int


def _shift(what: str) -> SuiteTask:
    return SuiteTask("shift", f"Fashion-MNIST {what}; its 10 labels", 10)


#: The suite, in the order its study runs it (the first study's 7 tasks first).
SUITE: dict[str, SuiteTask] = {
    "fmnist_contrast": _shift("under CIFAR-10-C contrast, severity 5"),
    "digits": SuiteTask("digits", "scikit-learn's handwritten digits, 8x8 upsampled to 28x28", 10),
    "fmnist_gaussian_noise": _shift("under CIFAR-10-C gaussian noise, severity 5"),
    "fmnist_motion_blur": _shift("under CIFAR-10-C motion blur, severity 5"),
    "fmnist_snow": _shift("under CIFAR-10-C snow, severity 5"),
    "fmnist_speckle_noise": _shift("under CIFAR-10-C speckle noise, severity 5"),
    "fmnist_rotate90": _shift("rotated by 90 degrees"),
    "fmnist_shot_noise": _shift("under CIFAR-10-C shot noise, severity 5"),
    "fmnist_impulse_noise": _shift("under CIFAR-10-C impulse noise, severity 5"),
    "fmnist_gaussian_blur": _shift("under CIFAR-10-C gaussian blur, severity 5"),
    "fmnist_pixelate": _shift("under CIFAR-10-C pixelate, severity 5"),
    "fmnist_brightness": _shift("under CIFAR-10-C brightness, severity 5"),
    "fmnist_jpeg_compression": _shift("under CIFAR-10-C JPEG compression, severity 5"),
    "fmnist_invert": _shift("inverted (1 - x)"),
    "fmnist_flip": _shift("upside down"),
    "fmnist_shrink": _shift("shrunk to half size, centred"),
    "fmnist_coarse": SuiteTask("labels", "Fashion-MNIST in 4 coarse groups: tops, trousers and "
                               "dresses, footwear, bags", 4),
    "fmnist_pairs": SuiteTask("labels", "Fashion-MNIST labels merged in arbitrary pairs "
                              "(label mod 5)", 5),
    "fmnist_orientation": SuiteTask("labels", "Fashion-MNIST rotated by 0, 90, 180 or 270 "
                                    "degrees; the label is the rotation", 4),
    "digits_invert": SuiteTask("digits", "the digits inverted (1 - x)", 10),
    "digits_rotate90": SuiteTask("digits", "the digits rotated by 90 degrees", 10),
    "digits_parity": SuiteTask("digits", "the digits labelled even or odd", 2),
    "glyph_upper": SuiteTask("glyphs", "upper-case letters in 20 fonts", 26),
    "glyph_lower": SuiteTask("glyphs", "lower-case letters in 20 fonts", 26),
    "glyph_digits": SuiteTask("glyphs", "printed digits in 20 fonts", 10),
    "glyph_symbols": SuiteTask("glyphs", "12 symbols (+ - x / = < > % # & @ ?) in the fonts that "
                               "draw them", len(drawn.SYMBOLS)),
    "glyph_greek": SuiteTask("glyphs", "15 Greek lower-case letters in the fonts that draw "
                             "them", len(drawn.GREEK)),
    "glyph_fonts": SuiteTask("glyphs", "which of 5 font families a random letter is set in",
                             len(drawn.FONT_FAMILIES)),
    "shapes": SuiteTask("drawn", "circle, square, triangle, cross, ring or star",
                        len(drawn.SHAPES)),
    "count_dots": SuiteTask("drawn", "how many dots, 1 to 6", 6),
    "gratings": SuiteTask("drawn", "a grating's orientation (4) x frequency (2)", 8),
    "textures": SuiteTask("drawn", "checkerboard, dots, stripes, blobs or noise",
                          len(drawn.TEXTURES)),
    "symmetry": SuiteTask("drawn", "whether a smooth random pattern is mirror-symmetric", 2),
}

# Fashion-MNIST classes: 0 T-shirt, 1 trouser, 2 pullover, 3 dress, 4 coat, 5 sandal, 6 shirt,
# 7 sneaker, 8 bag, 9 ankle boot.
_COARSE = torch.tensor([0, 1, 0, 1, 0, 2, 0, 2, 3, 2])


def _relabelled(relabel: Callable) -> Callable:
    """A ``labels`` task: Fashion-MNIST's images, ``relabel(images, labels)`` applied."""
    def build(**options):
        trainval, test, _ = data.embedded_sets("fmnist", **options)
        return [relabel(s.images, s.labels) for s in (trainval, test)]
    return build


def _orient(images, labels):
    k = torch.arange(len(labels)) % 4
    return torch.stack([torch.rot90(x, int(r), dims=(1, 2)) for x, r in zip(images, k)]), k


def _digits(transform: Callable) -> Callable:
    """A ``digits`` task: scikit-learn's digits with ``transform(images, labels)``; no test
    set (``tasks.load`` splits one off)."""
    def build(**options):
        return [transform(*data.digits_arrays()), None]
    return build


def _drawn(generate: Callable) -> Callable:
    """A drawn or glyph task: ``generate(n, rng)`` images, the first ``train_size`` for
    train+val, the next ``test_size`` for test; ``rng`` seeded by ``seed`` and the task."""
    def build(*, name, train_size=5000, test_size=2000, seed=0, **ignored):
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        x, y = generate(train_size + test_size, rng)
        return [(x[:train_size], y[:train_size]), (x[train_size:], y[train_size:])]
    return build


_BUILDERS: dict[str, Callable] = {
    "fmnist_coarse": _relabelled(lambda x, y: (x, _COARSE[y])),
    "fmnist_pairs": _relabelled(lambda x, y: (x, y % 5)),
    "fmnist_orientation": _relabelled(_orient),
    "digits_invert": _digits(lambda x, y: (1.0 - x, y)),
    "digits_rotate90": _digits(lambda x, y: (torch.rot90(x, 1, dims=(2, 3)), y)),
    "digits_parity": _digits(lambda x, y: (x, y % 2)),
    "glyph_upper": _drawn(lambda n, rng: drawn.glyphs(drawn.UPPER, n, rng)),
    "glyph_lower": _drawn(lambda n, rng: drawn.glyphs(drawn.LOWER, n, rng)),
    "glyph_digits": _drawn(lambda n, rng: drawn.glyphs(drawn.DIGITS, n, rng)),
    "glyph_symbols": _drawn(lambda n, rng: drawn.glyphs(drawn.SYMBOLS, n, rng)),
    "glyph_greek": _drawn(lambda n, rng: drawn.glyphs(drawn.GREEK, n, rng)),
    "glyph_fonts": _drawn(drawn.font_families),
    "shapes": _drawn(drawn.shapes),
    "count_dots": _drawn(drawn.count_dots),
    "gratings": _drawn(drawn.gratings),
    "textures": _drawn(drawn.textures),
    "symmetry": _drawn(drawn.symmetry),
}
#: The suite's tasks that ``sets`` builds (the rest are ``vitplast.datasets.data``'s).
GENERATED = tuple(_BUILDERS)


def sets(name: str, *, train_size: int = 5000, test_size: int = 2000, severity: int = 5,
         seed: int = 0, root: str | Path | None = None) -> tuple[Dataset, Dataset | None, int]:
    """A generated suite task's (train+val set, test set or ``None``, number of classes), as
    ``data.embedded_sets`` gives the others. Options as ``tasks.load``'s embedded ones;
    ``severity`` does not apply to generated tasks (their shifts are fixed)."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown generated task {name!r}; valid: {list(GENERATED)}")
    options = dict(train_size=train_size, test_size=test_size, seed=seed)
    build = _BUILDERS[name]
    if name.startswith("fmnist_"):
        made = build(severity=severity, root=root, **options)
    elif name.startswith("digits_"):
        made = build()
    else:
        made = build(name=name, **options)
    trainval, test = (None if s is None else data.NormalizedTensors(*s) for s in made)
    return trainval, test, SUITE[name].classes


def table() -> "pd.DataFrame":  # noqa: F821 (pandas is imported where a table is made)
    """The suite as a table: one row per task (``task``, ``family``, ``classes``,
    ``description``)."""
    import pandas as pd

    return pd.DataFrame([dict(task=k, family=t.family, classes=t.classes,
                              description=t.description) for k, t in SUITE.items()])


__all__ = ["FAMILIES", "GENERATED", "SUITE", "SuiteTask", "sets", "table"]
