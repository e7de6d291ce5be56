"""Natural images offline (``vitplast.datasets.photos``): seeded crops of scikit-learn's two
photographs, sized and normalised."""

import torch

from vitplast.datasets import photos


def test_photographs_are_the_two_shipped_ones():
    assert photos.photographs().shape == (2, 3, 427, 640)


def test_photo_crops_are_seeded_normalised_and_sized():
    a, b = photos.crops(3, 20, seed=1), photos.crops(3, 20, seed=1)
    assert a.shape == (3, 3, 20, 20) and torch.equal(a, b)
    assert not torch.equal(a, photos.crops(3, 20, seed=2))
    raw = photos.crops(3, 20, mean=(0, 0, 0), std=(1, 1, 1), seed=1)
    assert 0 <= raw.min() and raw.max() <= 1  # pixels in [0, 1] before normalising
