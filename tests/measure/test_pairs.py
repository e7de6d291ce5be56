"""Pairs (``vitplast.measure.pairs``): aligned tensors pair x[i] with y[i], one set of images is
paired within itself reproducibly by seed, and mismatched shapes fail."""

import pytest
import torch

from vitplast.measure import pairs


def test_pairs(images):
    x, y = images
    px, py = pairs.make_pairs(x, y, n_pairs=10).tensors()
    assert torch.equal(px, x[:10]) and torch.equal(py, y[:10])
    within = pairs.make_pairs(x, n_pairs=50, seed=3)
    wx, _ = within.tensors()
    assert wx.shape == (50, 1, 16, 16) and len(within) == 50
    assert torch.equal(wx, pairs.make_pairs(x, n_pairs=50, seed=3).tensors()[0])
    with pytest.raises(ValueError, match="differ in shape"):
        pairs.make_pairs(x, torch.zeros(5, 1, 8, 8))
