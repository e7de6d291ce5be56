"""Inputs: what a model takes, and the checks every entry point runs before any heavy work.

Each check raises ``ValueError`` with one message that names the argument, the value given,
what is valid, and what to do. Images are checked against the model they go into
(``expected_input``): a batch (N, C, H, W) of float images of the model's channels and size,
every pixel finite. A float dtype other than the model's (float64, float16) is converted with a
warning; integer images (uint8) are refused, since they are not normalised as the model was
trained.

Tensors go where the model is (``model_device``, ``to_model``): every public function that
takes a model (or a module) and tensors moves the tensors to the model's device itself, so the
same call runs whether ``load_model`` put the model on a GPU or on the CPU.
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch
from torch import nn
from torch.utils.data import Dataset


def model_device(model) -> torch.device | None:
    """The device of a module's first parameter (else buffer); ``None`` for a module without
    tensors or a plain function (nothing to follow)."""
    if not isinstance(model, nn.Module):
        return None
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return None


def to_model(model, *tensors: torch.Tensor):
    """``tensors`` moved to ``model``'s device (``model_device``; unchanged when it has none):
    one tensor for one, a tuple for several. Host-to-device copies are the caller's only
    device traffic; a tensor already there is returned as is."""
    device = model_device(model)
    cuda = device is not None and device.type == "cuda"  # host to GPU: asynchronous is safe
    moved = tuple(t if device is None else t.to(device, non_blocking=cuda) for t in tensors)
    return moved[0] if len(moved) == 1 else moved


def check_count(name: str, value, *, minimum: int = 1, hint: str = "") -> int:
    """``value`` as an int if it is an integer >= ``minimum``, else raise naming ``name``.

    Args:
        name: the argument's name, as the caller spells it.
        hint: what to do, appended to the message.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}={value!r} is not valid: {name} takes an integer >= {minimum}"
                         + (f"; {hint}" if hint else ""))
    return int(value)


def check_seed(name: str, value) -> int:
    """``value`` as an int if it is an integer (any sign), else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}={value!r} is not valid: {name} takes an integer, e.g. 0")
    return int(value)


def check_positive(name: str, value, *, hint: str = "") -> float:
    """``value`` if it is a finite number > 0 (a learning rate, a sigma), else raise."""
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and math.isfinite(value) and value > 0)
    if not ok:
        raise ValueError(f"{name}={value!r} is not valid: {name} takes a finite number > 0"
                         + (f"; {hint}" if hint else ""))
    return value


def check_device(device: str | torch.device | None) -> torch.device | None:
    """``device`` as a ``torch.device`` that exists on this machine (``None`` stays ``None``:
    CUDA when available, decided by ``models.pick_device``); else ``ValueError`` saying what
    is there. Run before anything is created (``pretrain``, the CLI's ``--device``)."""
    if device is None:
        return None
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {device!r} is not a device ({err}); valid: cpu, cuda, "
                         "cuda:N, mps, or leave it out for cuda when available") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA GPU is available here; use cpu, or "
                         "leave the device out (cuda when available)")
    if chosen.type == "cuda" and (chosen.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA "
                         "device(s) here")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available here; use cpu")
    return chosen


def expected_input(model: nn.Module) -> tuple[int, int | None, int | None]:
    """(C, H, W) of the images a timm ViT takes; H and W are ``None`` when it takes any size
    (``dynamic_img_size``, or a patch embedding that is not strict)."""
    embed = getattr(model, "patch_embed", None)
    proj = getattr(embed, "proj", None)
    if not isinstance(proj, nn.Conv2d):
        raise TypeError(f"{type(model).__name__} has no `patch_embed.proj` convolution: "
                        "vitplast supports timm VisionTransformer models")
    size = getattr(embed, "img_size", None)
    if size is None or getattr(model, "dynamic_img_size", False) or not getattr(
            embed, "strict_img_size", True):
        return proj.in_channels, None, None
    return proj.in_channels, int(size[0]), int(size[1])


def _shape_text(shape) -> str:
    return "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"


def check_images(model: nn.Module, images, name: str = "images", *, warn: bool = True
                 ) -> torch.Tensor:
    """``images`` as ``model`` takes them: (N, C, H, W), float of the model's dtype, finite.

    Args:
        name: the argument's name (``"x"``, ``"y"``), for the messages.
        warn: warn when a float dtype is converted (callers checking batch after batch warn
            for the first only).

    Raises:
        ValueError: not a 4-d tensor, integer dtype, channels or size the model does not take
            (naming its expected (C, H, W)), or non-finite pixels.
    """
    expected = expected_input(model)
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"{name} must be a batch of images (N, C, H, W) = (N, "
                         f"{_shape_text(expected)[1:]}, got {got}; add a batch dimension with "
                         f"{name}[None] for one image")
    dtype = next(model.parameters()).dtype
    if not images.is_floating_point():
        raise ValueError(f"{name} has dtype {images.dtype}; the model takes float images "
                         f"({dtype}) of (C, H, W) = {_shape_text(expected)}, normalised as in "
                         "its training: convert and normalise "
                         "them first (e.g. vitplast.datasets.data.NormalizedTensors, or "
                         f"{name}.float() / 255 then the model's mean and std)")
    c, h, w = images.shape[1:]
    if c != expected[0] or (expected[1] is not None and (h, w) != expected[1:]):
        raise ValueError(f"{name} has images of (C, H, W) = {(c, h, w)}; the model takes "
                         f"(C, H, W) = {_shape_text(expected)}: resize or convert them "
                         "(vitplast.datasets.paper_datasets.transforms_for(model)), or use a model "
                         "built for these images")
    if images.dtype != dtype:
        if warn:
            warnings.warn(f"{name} is {images.dtype}: converted to the model's {dtype}",
                          stacklevel=3)
        images = images.to(dtype)
    return images


def check_finite(name: str, images: torch.Tensor, *, offset: int = 0) -> None:
    """Raise naming the pairs (``offset`` + index in the batch) of ``images`` that hold a NaN
    or infinite pixel: their rates would be NaN, or dropped as identical pairs."""
    bad = torch.nonzero(~torch.isfinite(images.flatten(1)).all(dim=1)).flatten()
    if len(bad):
        pairs = (offset + bad[:5]).tolist()
        raise ValueError(f"{name} has non-finite pixels (NaN or inf) in {len(bad)} image(s), "
                         f"pair(s) {pairs}{' ...' if len(bad) > 5 else ''}: plasticity is "
                         "undefined there; repair (torch.nan_to_num) or drop those images")


class Fitted(Dataset):
    """Images of ``dataset`` ((image, label) items, normalised with ``mean`` / ``std``) in the
    format ``model`` takes: back to pixels in [0, 1], resized (bilinear, antialiased) to the
    model's (H, W), grayscale repeated to its channels, normalised with its own mean and std
    (``pretrained_cfg``; 0.5 when it has none).

    So any timm ViT can be measured on the embedded tasks (1 x 28 x 28): an upsampled
    Fashion-MNIST image, not the model's pretraining domain.
    """

    def __init__(self, dataset: Dataset, model: nn.Module, mean: float, std: float):
        self.dataset, self.mean, self.std = dataset, mean, std
        self.shape = native_input(model)
        cfg = getattr(model, "pretrained_cfg", None) or {}
        c = self.shape[0]
        self.to_mean = torch.tensor(cfg.get("mean", (0.5,) * c)[:c]).view(c, 1, 1)
        self.to_std = torch.tensor(cfg.get("std", (0.5,) * c)[:c]).view(c, 1, 1)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        image, label = self.dataset[i]
        pixels = image * self.std + self.mean  # (C0, h, w) in [0, 1]
        c, h, w = self.shape
        if tuple(pixels.shape[1:]) != (h, w):
            pixels = nn.functional.interpolate(pixels[None], size=(h, w), mode="bilinear",
                                               antialias=True, align_corners=False)[0]
        if pixels.shape[0] != c:
            if pixels.shape[0] != 1:
                raise ValueError(f"images of {pixels.shape[0]} channels cannot be fitted to a "
                                 f"model of {c}: only grayscale is repeated")
            pixels = pixels.expand(c, -1, -1)
        return (pixels - self.to_mean) / self.to_std, label


def native_input(model: nn.Module) -> tuple[int, int, int]:
    """(C, H, W) of the images a timm ViT was built for: ``expected_input``, with the size of
    its patch embedding where it takes any size."""
    c, h, w = expected_input(model)
    if h is None:
        h, w = (int(s) for s in model.patch_embed.img_size)
    return c, h, w


def fits(model: nn.Module, shape: tuple[int, int, int]) -> bool:
    """Whether images of (C, H, W) = ``shape`` are those ``model`` was built for
    (``native_input``)."""
    return tuple(shape) == native_input(model)
