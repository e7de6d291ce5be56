"""Tests for vitplast.datasets.corruptions: contract, determinism, severity order and known
values."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from vitplast.datasets.corruptions import CORRUPTIONS, corrupt

RANDOM = ("gaussian_noise", "motion_blur", "snow", "speckle_noise")


@pytest.fixture(scope="module")
def digits():
    """16 scikit-learn digits upsampled to (16, 1, 28, 28) in [0, 1]: Fashion-MNIST-like."""
    images = load_digits().images[:16] / 16.0
    x = torch.tensor(images, dtype=torch.float32)[:, None]
    return F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False).clamp(0, 1)


@pytest.fixture(scope="module")
def smooth_rgb():
    """8 smooth colour images (8, 3, 32, 32): random low-frequency sinusoids in [0.1, 0.9]."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:32, 0:32] / 32.0
    images = np.empty((8, 3, 32, 32))
    for n in range(8):
        for c in range(3):
            fy, fx, phase = rng.uniform(0.5, 2.0), rng.uniform(0.5, 2.0), rng.uniform(0, 6.3)
            images[n, c] = 0.5 + 0.4 * np.sin(2 * np.pi * (fy * yy + fx * xx) + phase)
    return torch.tensor(images, dtype=torch.float32)


def test_names():
    assert CORRUPTIONS == ("contrast", "gaussian_noise", "motion_blur", "snow", "speckle_noise")


@pytest.mark.parametrize("name", CORRUPTIONS)
@pytest.mark.parametrize("batch", ["digits", "smooth_rgb"])
def test_contract(name, batch, request):
    x = request.getfixturevalue(batch)
    before = x.clone()
    out = corrupt(x, name, severity=5, seed=3)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert out.min() >= 0 and out.max() <= 1
    assert torch.equal(x, before)  # input untouched
    assert torch.equal(out, corrupt(x, name, severity=5, seed=3))  # deterministic
    assert not torch.equal(out, x)
    other = corrupt(x, name, severity=5, seed=4)
    assert torch.equal(out, other) == (name not in RANDOM)


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_other_sizes_and_dtypes(name):
    x = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    out = corrupt(x, name, severity=5)
    assert out.shape == x.shape and 0 <= out.min() and out.max() <= 1
    x64 = torch.rand(3, 1, 17, 23, dtype=torch.float64)  # small, non-square
    out64 = corrupt(x64, name, severity=2, seed=1)
    assert out64.shape == x64.shape and out64.dtype == torch.float64
    assert 0 <= out64.min() and out64.max() <= 1


@pytest.mark.parametrize("name", CORRUPTIONS)
@pytest.mark.parametrize("batch", ["digits", "smooth_rgb"])
def test_monotone_in_severity(name, batch, request):
    x = request.getfixturevalue(batch)
    change = [(corrupt(x, name, s, seed=0) - x).abs().mean().item() for s in range(1, 6)]
    # motion_blur severities 3 and 4 share sigma = 2 and differ only in radius 6 -> 8, which
    # adds taps of weight < exp(-13**2 / 8) ~ 7e-10: the two are numerically equal, so allow a
    # tiny tolerance rather than a strict order.
    assert all(b >= a - 1e-6 for a, b in zip(change, change[1:])), change
    assert change[-1] > change[0]


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_errors(name, digits):
    with pytest.raises(ValueError, match="contrast, gaussian_noise, motion_blur"):
        corrupt(digits, name + "_typo")
    for bad in (0, 6, -1, 2.5, True):
        with pytest.raises(ValueError, match="severity"):
            corrupt(digits, name, severity=bad)
    with pytest.raises(ValueError, match="float tensor"):
        corrupt(digits[0], name)
    with pytest.raises(ValueError, match="float tensor"):
        corrupt((digits * 255).to(torch.uint8), name)


# --- known values -------------------------------------------------------------------------


def test_contrast_known_values(digits, smooth_rgb):
    constant = torch.full((2, 3, 28, 28), 0.3)
    for s in range(1, 6):
        assert torch.equal(corrupt(constant, "contrast", s), constant)
    for x in (digits, smooth_rgb):
        x64 = x.double()
        m = x64.mean(dim=(2, 3), keepdim=True)  # per image and channel
        expected = ((x64 - m) * 0.15 + m).clamp(0, 1).float()
        assert torch.allclose(corrupt(x, "contrast", 5), expected, atol=1e-7)
        expected1 = ((x64 - m) * 0.75 + m).clamp(0, 1).float()
        assert torch.allclose(corrupt(x, "contrast", 1), expected1, atol=1e-7)


@pytest.mark.parametrize(("name", "scales"), [
    ("gaussian_noise", (0.04, 0.06, 0.08, 0.09, 0.10)),
    ("speckle_noise", (0.06, 0.1, 0.12, 0.16, 0.2)),
])
def test_noise_known_values(name, scales, digits):
    # Exact: x + x**p * N(0, c) with noise from default_rng(seed), p = 0 (additive) or 1.
    power = 0 if name == "gaussian_noise" else 1
    x64 = digits.double().numpy()
    noise = np.random.default_rng(7).normal(scale=scales[4], size=x64.shape)
    expected = torch.from_numpy(np.clip(x64 + x64**power * noise, 0, 1)).float()
    assert torch.equal(corrupt(digits, name, 5, seed=7), expected)
    # Statistical, independent of how the noise is drawn: std of the change is c * x**p.
    for value in (0.5, 0.25):
        flat = torch.full((32, 1, 28, 28), value)
        for s, c in enumerate(scales, start=1):
            std = (corrupt(flat, name, s, seed=s) - flat).std().item()
            assert std == pytest.approx(c * value**power, rel=0.02)
    zeros = torch.zeros(4, 1, 28, 28)
    assert torch.equal(corrupt(zeros, "speckle_noise", 5), zeros)


@pytest.mark.parametrize(("severity", "radius", "sigma"), [(1, 6, 1.0), (5, 9, 2.5)])
def test_motion_blur_known_values(severity, radius, sigma):
    constant = torch.full((3, 3, 28, 28), 0.6, dtype=torch.float64)
    assert torch.allclose(corrupt(constant, "motion_blur", severity), constant, atol=1e-12)
    # An impulse is spread over one side of a line within 45 degrees of horizontal; the
    # weights are exp(-i**2 / (2 sigma**2)), i = 0..2 * radius, normalised (ImageMagick).
    impulse = torch.zeros(16, 1, 64, 64, dtype=torch.float64)
    impulse[:, :, 32, 32] = 1.0
    out = corrupt(impulse, "motion_blur", severity, seed=5)
    weights = [math.exp(-(i**2) / (2 * sigma**2)) for i in range(2 * radius + 1)]
    w0 = 1 / sum(weights)
    for img in out[:, 0]:
        assert img.sum().item() == pytest.approx(1.0, abs=1e-12)
        assert img[32, 32].item() == pytest.approx(w0, abs=1e-12)
        rows, cols = torch.nonzero(img, as_tuple=True)
        assert (cols <= 32).all() and ((rows - 32).abs() <= (32 - cols)).all()
        # the last tap, i = 2 * radius, lands at least 2 * radius * cos(45 deg) pixels away
        assert (32 - cols).max() >= math.ceil(2 * radius * math.cos(math.pi / 4) - 0.5)


@pytest.mark.parametrize("severity", range(1, 6))
def test_snow_known_values(severity):
    blend = (0.95, 0.9, 0.9, 0.85, 0.8)[severity - 1]
    # Black: the base is (1 - blend) * max(0, 0 * 1.5 + 0.5); snow only adds to it and, on a
    # constant image, is symmetric under a 180-degree rotation (layer + rot90(layer, 2)).
    black = torch.zeros(16, 1, 28, 28, dtype=torch.float64)
    out = corrupt(black, "snow", severity, seed=2)
    base = (1 - blend) * 0.5
    assert out.min().item() >= base - 1e-12
    assert (out > base + 1e-3).any()
    assert torch.equal(out, out.flip(-1, -2))
    white = torch.ones(2, 3, 28, 28)
    assert torch.equal(corrupt(white, "snow", severity), white)
    if severity == 1:  # sparse snow: some pixels carry no snow and show the base exactly
        assert out.min().item() == pytest.approx(base, abs=1e-12)
        rgb = torch.tensor([0.2, 0.4, 0.1], dtype=torch.float64).view(1, 3, 1, 1)
        colour = rgb.expand(16, 3, 28, 28).clone()
        gray = 0.299 * 0.2 + 0.587 * 0.4 + 0.114 * 0.1  # cv2.COLOR_RGB2GRAY
        expected = blend * rgb + (1 - blend) * torch.clamp(rgb, min=gray * 1.5 + 0.5)
        low = corrupt(colour, "snow", 1, seed=2).amin(dim=(0, 2, 3)).view(1, 3, 1, 1)
        assert torch.allclose(low, expected, atol=1e-12)
