"""Corruptions: five CIFAR-10-C image shifts, re-implemented with numpy and scipy.

Paper: section 5, the distribution shifts contrast, gaussian_noise, motion_blur, snow and
speckle_noise at severity 5 of CIFAR-10-C (Hendrycks & Dietterich, 2019). Every constant is the
CIFAR-10 one from the reference script ``ImageNet-C/create_c/make_cifar_c.py`` of
github.com/hendrycks/robustness (not the ImageNet-C constants); each is cited where defined.

The reference maps a uint8 image to [0, 1] (``/ 255.``), corrupts it and returns
``np.clip(x, 0, 1) * 255``. Here images already are in [0, 1]; the output is clipped to [0, 1]
and is not quantised to uint8. The randomness comes from ``numpy.random.default_rng(seed)`` and
is drawn for the whole batch at once, so the draws are not those of the reference's global
``np.random`` stream.

Approximations, where the reference calls ImageMagick (Wand) and PIL:

- ``motion_blur``: ImageMagick's ``MotionBlurImage(radius, sigma, angle)`` re-implemented as a
  line-kernel convolution, following ImageMagick 6 ``effect.c``: ``2 * ceil(radius) + 1`` taps,
  tap ``i`` weighs ``exp(-i**2 / (2 * sigma**2))`` (normalised; a one-sided half Gaussian) and
  reads the pixel at ``(x + round(i cos a), y + round(i sin a))``, edge pixels repeated
  (ImageMagick's default ``edge`` virtual pixels). The reference's PNG round trip (8-bit
  output) is left out.
- ``snow``: the snow layer is blurred with the same line kernel instead of Wand; the
  reference's 8-bit PIL/PNG round trips of the layer are kept (floor before, round after).

Images under 32 px: the blur reads repeated edge pixels, which equals padding the image with
``edge`` mode to any size and cropping back, so ``motion_blur`` needs no explicit padding. The
snow layer is built on a square canvas of side ``max(H, W, 32)`` (the reference's 32 px canvas
for CIFAR-10 and Fashion-MNIST) and centre-cropped to ``H x W``.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import ndimage

#: The paper's five (its CIFAR-10-C shifts).
CORRUPTIONS = ("contrast", "gaussian_noise", "motion_blur", "snow", "speckle_noise")
#: More CIFAR-10-C families, for the task suite (``vitplast.datasets.suite``); same constants'
#: source.
MORE_CORRUPTIONS = ("shot_noise", "impulse_noise", "gaussian_blur", "pixelate", "brightness",
                    "jpeg_compression")

# CIFAR-10-C make_cifar_c.py, contrast: c = [.75, .5, .4, .3, 0.15]
_CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)
# CIFAR-10-C make_cifar_c.py, gaussian_noise: c = [0.04, 0.06, .08, .09, .10]
_GAUSSIAN_NOISE = (0.04, 0.06, 0.08, 0.09, 0.10)
# CIFAR-10-C make_cifar_c.py, speckle_noise: c = [.06, .1, .12, .16, .2]
_SPECKLE_NOISE = (0.06, 0.1, 0.12, 0.16, 0.2)
# CIFAR-10-C make_cifar_c.py, motion_blur: c = [(6,1), (6,1.5), (6,2), (8,2), (9,2.5)]
# as (radius, sigma); angle = np.random.uniform(-45, 45)
_MOTION_BLUR = ((6, 1.0), (6, 1.5), (6, 2.0), (8, 2.0), (9, 2.5))
_MOTION_ANGLE = (-45.0, 45.0)
# CIFAR-10-C make_cifar_c.py, snow: c = [(0.1,0.2,1,0.6,8,3,0.95), (0.1,0.2,1,0.5,10,4,0.9),
# (0.15,0.3,1.75,0.55,10,4,0.9), (0.25,0.3,2.25,0.6,12,6,0.85), (0.3,0.3,1.25,0.65,14,12,0.8)]
# as (loc, scale, zoom, threshold, blur radius, blur sigma, blend);
# blur angle = np.random.uniform(-135, -45)
_SNOW = (
    (0.1, 0.2, 1.0, 0.6, 8, 3.0, 0.95),
    (0.1, 0.2, 1.0, 0.5, 10, 4.0, 0.9),
    (0.15, 0.3, 1.75, 0.55, 10, 4.0, 0.9),
    (0.25, 0.3, 2.25, 0.6, 12, 6.0, 0.85),
    (0.3, 0.3, 1.25, 0.65, 14, 12.0, 0.8),
)
_SNOW_ANGLE = (-135.0, -45.0)
# CIFAR-10-C make_cifar_c.py, snow: cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) (OpenCV's luma weights)
_LUMA = np.array([0.299, 0.587, 0.114])
# CIFAR-10-C make_cifar_c.py, shot_noise: c = [500, 250, 100, 75, 50] (Poisson photons)
_SHOT_NOISE = (500, 250, 100, 75, 50)
# CIFAR-10-C make_cifar_c.py, impulse_noise: c = [.01, .02, .03, .05, .07] (salt-and-pepper
# amount, skimage's random_noise: half salt, half pepper)
_IMPULSE_NOISE = (0.01, 0.02, 0.03, 0.05, 0.07)
# CIFAR-10-C make_cifar_c.py, gaussian_blur: c = [.4, .6, 0.7, .8, 1] (sigma in pixels)
_GAUSSIAN_BLUR = (0.4, 0.6, 0.7, 0.8, 1.0)
# CIFAR-10-C make_cifar_c.py, pixelate: c = [0.95, 0.9, 0.85, 0.75, 0.65] (BOX down and up)
_PIXELATE = (0.95, 0.9, 0.85, 0.75, 0.65)
# CIFAR-10-C make_cifar_c.py, brightness: c = [.05, .1, .15, .2, .3] (added to HSV value;
# on a grey image the value is the image itself)
_BRIGHTNESS = (0.05, 0.1, 0.15, 0.2, 0.3)
# CIFAR-10-C make_cifar_c.py, jpeg_compression: c = [80, 65, 58, 50, 40] (PIL quality)
_JPEG_QUALITY = (80, 65, 58, 50, 40)
# CIFAR-10-C make_cifar_c.py works on 32 x 32 images (the snow canvas).
_MIN_SIDE = 32


def _contrast(x, rng, s):
    c = _CONTRAST[s]
    means = x.mean(axis=(2, 3), keepdims=True)  # per image and channel, as axis=(0, 1) on HWC
    return (x - means) * c + means


def _gaussian_noise(x, rng, s):
    return x + rng.normal(scale=_GAUSSIAN_NOISE[s], size=x.shape)


def _speckle_noise(x, rng, s):
    return x + x * rng.normal(scale=_SPECKLE_NOISE[s], size=x.shape)


def _line_blur(x, radius, sigma, angles):
    """ImageMagick 6 ``MotionBlurImage`` on a batch, one angle (degrees) per image.

    Args:
        x: array (N, C, H, W).
        radius: kernel radius; the kernel has ``2 * ceil(radius) + 1`` taps.
        sigma: standard deviation of the one-sided Gaussian tap weights.
        angles: array (N,) of blur angles in degrees.

    Returns:
        The blurred array, same shape. Images with the same rounded tap offsets are blurred
        together with shifted slices of an edge-padded copy.
    """
    width = 2 * int(np.ceil(radius)) + 1
    taps = np.arange(width)
    weights = np.exp(-(taps**2) / (2.0 * sigma**2))
    weights /= weights.sum()
    rad = np.deg2rad(angles)[:, None]
    dx = np.ceil(taps * np.cos(rad) - 0.5).astype(np.int64)
    dy = np.ceil(taps * np.sin(rad) - 0.5).astype(np.int64)
    patterns, group = np.unique(np.concatenate([dx, dy], axis=1), axis=0, return_inverse=True)
    pad = width - 1
    h, w = x.shape[2:]
    out = np.empty_like(x)
    for g, pattern in enumerate(patterns):
        members = np.flatnonzero(group.ravel() == g)
        xp = np.pad(x[members], ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge")
        acc = np.zeros((len(members), x.shape[1], h, w))
        for k, ox, oy in zip(weights, pattern[:width], pattern[width:]):
            acc += k * xp[:, :, pad + oy : pad + oy + h, pad + ox : pad + ox + w]
        out[members] = acc
    return out


def _motion_blur(x, rng, s):
    radius, sigma = _MOTION_BLUR[s]
    return _line_blur(x, radius, sigma, rng.uniform(*_MOTION_ANGLE, size=len(x)))


def _clipped_zoom(layer, zoom):
    """The reference's ``clipped_zoom`` on a batch (N, S, S): zoom the centre, trim to S."""
    side = layer.shape[-1]
    crop = int(np.ceil(side / zoom))
    top = (side - crop) // 2
    out = ndimage.zoom(layer[:, top : top + crop, top : top + crop], (1, zoom, zoom), order=1)
    trim = (out.shape[-1] - side) // 2
    return out[:, trim : trim + side, trim : trim + side]


def _snow(x, rng, s):
    loc, scale, zoom, threshold, radius, sigma, blend = _SNOW[s]
    n, c, h, w = x.shape
    if c not in (1, 3):
        raise ValueError(f"snow needs 1 or 3 channels, got {c}")
    side = max(h, w, _MIN_SIDE)
    layer = _clipped_zoom(rng.normal(loc=loc, scale=scale, size=(n, side, side)), zoom)
    layer[layer < threshold] = 0
    layer = np.floor(np.clip(layer, 0, 1) * 255) / 255  # PIL mode 'L' via astype(np.uint8)
    layer = _line_blur(layer[:, None], radius, sigma, rng.uniform(*_SNOW_ANGLE, size=n))
    layer = np.round(layer * 255) / 255  # 8-bit PNG read back by cv2.imdecode, then / 255.
    layer = layer + layer[..., ::-1, ::-1]  # snow_layer + np.rot90(snow_layer, k=2)
    top, left = (side - h) // 2, (side - w) // 2
    layer = layer[..., top : top + h, left : left + w]
    gray = x if c == 1 else np.einsum("c,nchw->nhw", _LUMA, x)[:, None]
    x = blend * x + (1 - blend) * np.maximum(x, gray * 1.5 + 0.5)
    return x + layer


def _shot_noise(x, rng, s):
    c = _SHOT_NOISE[s]
    return rng.poisson(np.clip(x, 0, 1) * c) / c


def _impulse_noise(x, rng, s):
    hit = rng.random(x.shape) < _IMPULSE_NOISE[s]
    salt = rng.random(x.shape) < 0.5
    return np.where(hit, salt.astype(x.dtype), x)


def _gaussian_blur(x, rng, s):
    sigma = _GAUSSIAN_BLUR[s]  # skimage.filters.gaussian: truncate 4, mode 'nearest'
    return ndimage.gaussian_filter(x, sigma=(0, 0, sigma, sigma), mode="nearest", truncate=4.0)


def _pil_per_image(x, convert):
    """``convert(PIL image) -> PIL image`` on every 8-bit channel image of a batch."""
    from PIL import Image

    out = np.empty_like(x)
    for i, j in np.ndindex(*x.shape[:2]):
        img = Image.fromarray(np.round(np.clip(x[i, j], 0, 1) * 255).astype(np.uint8))
        out[i, j] = np.asarray(convert(img), dtype=np.float64) / 255.0
    return out


def _pixelate(x, rng, s):
    from PIL import Image

    h, w = x.shape[2:]
    side = (int(w * _PIXELATE[s]), int(h * _PIXELATE[s]))
    return _pil_per_image(x, lambda im: im.resize(side, Image.BOX).resize((w, h), Image.BOX))


def _brightness(x, rng, s):
    return x + _BRIGHTNESS[s]


def _jpeg_compression(x, rng, s):
    import io

    from PIL import Image

    def jpeg(im):
        buffer = io.BytesIO()
        im.save(buffer, "JPEG", quality=_JPEG_QUALITY[s])
        return Image.open(buffer)

    return _pil_per_image(x, jpeg)


_FUNCTIONS = {
    "contrast": _contrast,
    "gaussian_noise": _gaussian_noise,
    "motion_blur": _motion_blur,
    "snow": _snow,
    "speckle_noise": _speckle_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "gaussian_blur": _gaussian_blur,
    "pixelate": _pixelate,
    "brightness": _brightness,
    "jpeg_compression": _jpeg_compression,
}


def corrupt(images: torch.Tensor, name: str, severity: int = 5, seed: int = 0) -> torch.Tensor:
    """Apply one CIFAR-10-C corruption to a batch of images.

    Args:
        images: float tensor (N, C, H, W) in [0, 1]; any size (images under 32 px are handled
            as the module docstring says); ``snow`` needs C = 1 or 3.
        name: one of ``CORRUPTIONS`` (the paper's) or ``MORE_CORRUPTIONS``.
        severity: 1..5, the CIFAR-10-C severity (the paper uses 5).
        seed: seeds ``numpy.random.default_rng``; the same seed gives bit-identical output.

    Returns:
        The corrupted images, clipped to [0, 1], with the shape, dtype and device of ``images``.

    Raises:
        ValueError: for an unknown name, a severity outside 1..5 or images that are not a
            4-d float tensor.
    """
    if name not in _FUNCTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose one of {', '.join(_FUNCTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not (
        1 <= severity <= 5
    ):
        raise ValueError(f"severity must be an integer in 1..5, got {severity!r}")
    if images.ndim != 4 or not images.is_floating_point():
        raise ValueError(
            f"images must be a float tensor (N, C, H, W), got {images.dtype} {tuple(images.shape)}"
        )
    x = images.detach().cpu().to(torch.float64).numpy()
    out = _FUNCTIONS[name](x, np.random.default_rng(seed), int(severity) - 1)
    out = np.clip(out, 0.0, 1.0)
    return torch.from_numpy(out).to(device=images.device, dtype=images.dtype)
