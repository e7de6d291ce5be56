"""Drawn pictures and glyphs (``vitplast.datasets.drawn``): every glyph task uses only fonts that
draw its characters, and the pictures are what their labels say."""

import numpy as np

from vitplast.datasets import drawn


def test_every_glyph_task_uses_only_fonts_that_draw_its_characters():
    for chars in (drawn.UPPER, drawn.LOWER, drawn.DIGITS, drawn.SYMBOLS, drawn.GREEK):
        fonts = drawn._fonts_for(chars)
        assert len(fonts) >= 8
        assert all(drawn.has_glyph(f, c) for f in fonts for c in chars)
    assert not drawn.has_glyph("cmr10.ttf", "\u03b1")  # Computer Modern has no Greek here


def test_drawn_pictures_are_what_their_labels_say():
    rng = np.random.default_rng(0)
    x, y = drawn.count_dots(12, rng)
    from scipy import ndimage

    for img, label in zip(x, y):  # count the blobs of ink
        assert ndimage.label(img[0].numpy() > 0.5)[1] == int(label) + 1
    x, y = drawn.symmetry(4, np.random.default_rng(1))
    for img, label in zip(x, y):  # noise aside, label 1 is mirror-symmetric
        gap = (img[0] - img[0].flip(-1)).abs().mean()
        assert (gap < 3 * drawn.NOISE) == bool(label)
