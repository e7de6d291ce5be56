"""Drawn images: glyphs rendered from matplotlib's fonts, and procedural pictures.

Paper: none (the paper's datasets are photographs). The task suite (``vitplast.datasets.suite``)
    needs
downstream tasks far from the pretraining domain that can be built offline and
deterministically on any machine: glyphs (letters, digits, symbols, Greek letters, font
families) rendered with the fonts matplotlib ships, and pictures drawn by numpy (shapes, dot
counts, gratings, textures, symmetry).

Every generator takes ``(n, rng)`` and returns ``(images, labels)``: float images in [0, 1] of
shape (n, 1, 28, 28) and int64 labels, balanced over the classes (label ``i % classes`` for the
i-th image, so the first images hold every class), with position, size, angle, stroke and a
little pixel noise drawn from ``rng`` (``numpy.random.Generator``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
from scipy import ndimage

SIDE = 28
#: Pixel noise added to every drawn image (std, before clipping to [0, 1]).
NOISE = 0.05

#: Font files of matplotlib (``mpl-data/fonts/ttf``) grouped by family.
FONT_FAMILIES = {
    "DejaVu Sans": ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf",
                    "DejaVuSans-BoldOblique.ttf"),
    "DejaVu Serif": ("DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf",
                     "DejaVuSerif-BoldItalic.ttf"),
    "DejaVu Sans Mono": ("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf",
                         "DejaVuSansMono-Oblique.ttf", "DejaVuSansMono-BoldOblique.ttf"),
    "STIX": ("STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf",
             "STIXGeneralBolIta.ttf"),
    "Computer Modern": ("cmr10.ttf", "cmb10.ttf", "cmti10.ttf", "cmss10.ttf"),
}
#: Character sets of the glyph tasks.
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LOWER = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"
SYMBOLS = "+\u2212\u00d7\u00f7=<>%#&@?"
GREEK = "\u03b1\u03b2\u03b3\u03b4\u03b5\u03b6\u03b7\u03b8\u03bb\u03bc\u03c0\u03c1\u03c3\u03c6\u03c9"


@functools.lru_cache(maxsize=None)
def _font(file: str):
    import matplotlib
    from matplotlib import ft2font

    return ft2font.FT2Font(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / file))


def has_glyph(file: str, char: str) -> bool:
    """Whether font ``file`` draws ``char`` (not its missing-glyph box)."""
    return _font(file).get_char_index(ord(char)) != 0


def _fonts_for(chars: str, families=tuple(FONT_FAMILIES)) -> list[str]:
    """The font files of ``families`` that draw every character of ``chars``."""
    return [f for fam in families for f in FONT_FAMILIES[fam]
            if all(has_glyph(f, c) for c in chars)]


def glyph(char: str, file: str, size: float) -> np.ndarray:
    """One character rendered by FreeType at ``size`` pixels (em), in [0, 1], tightly
    cropped (its ink's bounding box)."""
    font = _font(file)
    font.set_size(size, 72)  # at 72 dpi a point is a pixel
    font.set_text(char)
    font.draw_glyphs_to_bitmap(antialiased=True)
    img = np.asarray(font.get_image(), dtype=np.float64) / 255.0
    rows, cols = np.flatnonzero(img.any(1)), np.flatnonzero(img.any(0))
    if not len(rows):
        return np.zeros((1, 1))
    return img[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


def _place(canvas: np.ndarray, ink: np.ndarray, rng) -> None:
    """Paste ``ink`` (max-blended) at a random position where it fits (cropped if larger)."""
    ink = ink[:SIDE, :SIDE]
    h, w = ink.shape
    top, left = rng.integers(0, SIDE - h + 1), rng.integers(0, SIDE - w + 1)
    window = canvas[top:top + h, left:left + w]
    np.maximum(window, ink, out=window)


def _finish(canvas: np.ndarray, rng) -> np.ndarray:
    return np.clip(canvas + rng.normal(0.0, NOISE, canvas.shape), 0.0, 1.0)


def _batch(n: int, classes: int, draw, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images drawn by ``draw(label, rng) -> (28, 28) array``, labels ``i % classes``."""
    labels = np.arange(n) % classes
    images = np.stack([_finish(draw(int(y), rng), rng) for y in labels])
    return (torch.from_numpy(images).float().unsqueeze(1), torch.from_numpy(labels).long())


def _glyph_image(char: str, file: str, rng) -> np.ndarray:
    """A character at a random size (12-22 px em), angle (+-15 degrees) and position."""
    ink = glyph(char, file, float(rng.uniform(12, 22)))
    ink = np.clip(ndimage.rotate(ink, rng.uniform(-15, 15), reshape=True, order=1), 0, 1)
    canvas = np.zeros((SIDE, SIDE))
    _place(canvas, ink, rng)
    return canvas


def glyphs(chars: str, n: int, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = which character of ``chars``; the font is drawn from every matplotlib font that
    draws them all."""
    fonts = _fonts_for(chars)
    return _batch(n, len(chars), lambda y, r: _glyph_image(chars[y], fonts[r.integers(
        len(fonts))], r), rng)


def font_families(n: int, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = the font family (``FONT_FAMILIES``) of a random letter (upper or lower case)."""
    families = list(FONT_FAMILIES)

    def draw(y, r):
        files = FONT_FAMILIES[families[y]]
        return _glyph_image((UPPER + LOWER)[r.integers(52)], files[r.integers(len(files))], r)

    return _batch(n, len(families), draw, rng)


def _grid():
    """Pixel-centre coordinates in [-1, 1], (28, 28) each."""
    c = (np.arange(SIDE) + 0.5) / SIDE * 2 - 1
    return np.meshgrid(c, c, indexing="xy")


def _polygon(vertices: np.ndarray) -> np.ndarray:
    """A filled polygon (vertices in [-1, 1] coordinates) as a (28, 28) mask, anti-aliased
    by 4x4 supersampling."""
    from matplotlib.path import Path as Polygon

    fine = (np.arange(SIDE * 4) + 0.5) / (SIDE * 4) * 2 - 1
    xx, yy = np.meshgrid(fine, fine, indexing="xy")
    inside = Polygon(vertices).contains_points(np.stack([xx.ravel(), yy.ravel()], 1))
    return inside.reshape(SIDE, 4, SIDE, 4).mean(axis=(1, 3))


#: The shapes of ``shapes``, in label order.
SHAPES = ("circle", "square", "triangle", "cross", "ring", "star")


def _shape(label: int, rng) -> np.ndarray:
    x, y = _grid()
    r = rng.uniform(0.35, 0.7)
    cx, cy = rng.uniform(-1 + r, 1 - r, size=2)
    angle = rng.uniform(0, 2 * np.pi)
    dist = np.hypot(x - cx, y - cy)
    name = SHAPES[label]
    if name == "circle":
        return np.clip((r - dist) * SIDE / 2 + 0.5, 0, 1)
    if name == "ring":
        return np.clip((r * 0.25 - abs(dist - r * 0.75)) * SIDE / 2 + 0.5, 0, 1)
    points = {"square": 4, "triangle": 3, "star": 10, "cross": 12}[name]
    t = angle + np.arange(points) * 2 * np.pi / points
    radius = np.full(points, r)
    if name == "star":
        radius[1::2] = r * 0.45
    if name == "cross":  # a plus sign: 12 corners at two radii, arms 0.35 r wide
        arm = 0.35
        corners = np.array([(arm, 1), (arm, arm), (1, arm), (1, -arm), (arm, -arm), (arm, -1),
                            (-arm, -1), (-arm, -arm), (-1, -arm), (-1, arm), (-arm, arm),
                            (-arm, 1)]) * r
        rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        return _polygon(corners @ rot.T + [cx, cy])
    return _polygon(np.stack([cx + radius * np.cos(t), cy + radius * np.sin(t)], 1))


def shapes(n: int, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = which of ``SHAPES``, at a random size, angle and position."""
    return _batch(n, len(SHAPES), _shape, rng)


def _dots(label: int, rng) -> np.ndarray:
    """``label + 1`` discs of radius 2-3 px, apart from one another."""
    x, y = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="xy")
    canvas, centres = np.zeros((SIDE, SIDE)), []
    while len(centres) < label + 1:
        c = rng.uniform(4, SIDE - 4, size=2)
        if all(np.hypot(*(c - d)) > 7 for d in centres):
            centres.append(c)
    for cx, cy in centres:
        canvas = np.maximum(canvas, np.clip(rng.uniform(2, 3) - np.hypot(x - cx, y - cy) + 0.5,
                                            0, 1))
    return canvas


def count_dots(n: int, rng, most: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = the number of dots, 1..``most`` (label k holds k + 1 dots)."""
    return _batch(n, most, _dots, rng)


def _grating(label: int, rng) -> np.ndarray:
    """A sinusoidal grating: orientation ``label % 4`` (0, 45, 90, 135 degrees, +-8 jitter),
    frequency low or high (``label // 4``), random phase and contrast."""
    x, y = _grid()
    theta = np.deg2rad(45 * (label % 4) + rng.uniform(-8, 8))
    cycles = (2.0, 4.5)[label // 4] * rng.uniform(0.85, 1.15)
    wave = np.sin(np.pi * cycles * (x * np.cos(theta) + y * np.sin(theta))
                  + rng.uniform(0, 2 * np.pi))
    return 0.5 + 0.5 * rng.uniform(0.3, 0.9) * wave


def gratings(n: int, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = orientation (4) x spatial frequency (2) of a grating: 8 classes."""
    return _batch(n, 8, _grating, rng)


#: The textures of ``textures``, in label order.
TEXTURES = ("checkerboard", "dots", "stripes", "blobs", "noise")


def _texture(label: int, rng) -> np.ndarray:
    name = TEXTURES[label]
    ix, iy = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="xy")
    if name == "checkerboard":
        cell = rng.integers(3, 8)
        return (((ix + rng.integers(cell)) // cell + (iy + rng.integers(cell)) // cell) % 2
                ).astype(float) * rng.uniform(0.5, 1.0)
    if name == "dots":
        return (rng.random((SIDE, SIDE)) < rng.uniform(0.03, 0.1)).astype(float)
    if name == "stripes":
        width = rng.integers(2, 6)
        axis = ix if rng.random() < 0.5 else iy
        return ((axis // width) % 2).astype(float) * rng.uniform(0.5, 1.0)
    if name == "blobs":
        field = ndimage.gaussian_filter(rng.normal(size=(SIDE, SIDE)), rng.uniform(2, 4),
                                        mode="wrap")
        return (field > 0).astype(float)
    return rng.uniform(0, 1, (SIDE, SIDE)) * rng.uniform(0.5, 1.0)


def textures(n: int, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = which of ``TEXTURES`` fills the image (random scale, phase and contrast)."""
    return _batch(n, len(TEXTURES), _texture, rng)


def _symmetric(label: int, rng) -> np.ndarray:
    """A smooth random pattern; label 1: mirrored left-right, label 0: not."""
    field = ndimage.gaussian_filter(rng.normal(size=(SIDE, SIDE)), 1.5)
    field = (field - field.min()) / (np.ptp(field) + 1e-12)
    if label == 1:
        half = field[:, :SIDE // 2]
        field = np.concatenate([half, half[:, ::-1]], axis=1)
    return field


def symmetry(n: int, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """Label = whether a random smooth pattern is mirror-symmetric left-right (2 classes)."""
    return _batch(n, 2, _symmetric, rng)


__all__ = ["DIGITS", "FONT_FAMILIES", "GREEK", "LOWER", "NOISE", "SHAPES", "SYMBOLS", "TEXTURES",
           "UPPER", "count_dots", "font_families", "glyph", "glyphs", "gratings", "has_glyph",
           "shapes", "symmetry", "textures"]
