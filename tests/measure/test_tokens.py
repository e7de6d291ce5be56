"""The token scale: the RMS token norm recomputed by hand, the one set of images it reads
(the x of every pair) and the gauge multiplying it by c."""

import copy

import pytest
import torch
from helpers import tiny_vit

from vitplast import models
from vitplast.measure import empirical, gauge, rates, tokens
from vitplast.paper import VITB_RMS_TOKEN_NORM


def test_rms_token_norm_is_sqrt_mean_squared_token_norm(images):
    model, x = tiny_vit(), images[0]
    e = rates.embed(model, x)  # (B, n, d)
    rows = e.reshape(-1, e.shape[-1])  # every token of every image
    by_hand = torch.sqrt(torch.mean(torch.stack([t.norm() ** 2 for t in rows])))
    assert tokens.rms_token_norm(model, x) == pytest.approx(by_hand.item(), rel=1e-5)
    gauged = gauge.rescale_stream(copy.deepcopy(model), 3.0)
    assert tokens.rms_token_norm(gauged, x) == pytest.approx(3 * by_hand.item(), rel=1e-5)


def test_token_scale_reads_the_x_images_of_the_pairs():
    """The embedded model: its images are the x of every task's pairs, and the ratio is the
    paper's r over this r."""
    model = models.load_model()
    x, _ = empirical.task_pairs("digits", n_pairs=16, model=model).tensors()
    torch.testing.assert_close(tokens.token_images(model, n_images=16), x)
    ts = tokens.token_scale(model, n_images=16)
    assert ts["r"] == pytest.approx(tokens.rms_token_norm(model, x), rel=1e-6)
    assert ts["ratio"] == pytest.approx(VITB_RMS_TOKEN_NORM / ts["r"])
    assert ts["n_images"] == 16 and ts["paper_r"] == VITB_RMS_TOKEN_NORM
