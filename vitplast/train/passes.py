"""Passes: one pass of a model over data, as training and evaluation make it.

The DataLoader of a run (``loader``: persistent workers, pinned memory on CUDA), the endless
shuffled batches of training (``_batches``), the numeric precision of a pass (``PRECISIONS``:
``autocast`` on CUDA, TF32 off for fp32 with ``numerics``) and evaluation (``evaluate``: loss
and accuracy). ``vitplast.train.finetune`` and ``vitplast.train.batched`` train with
them.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from vitplast.inputs import model_device
from vitplast.models import pick_device
from vitplast.train.keys import PRECISIONS

# Numeric precision of the forward pass (``PRECISIONS``: the run key's choices, declared in
# ``keys``): ``auto`` is bf16 autocast on a CUDA device that supports it, fp16 autocast with a
# gradient scaler (``torch.amp.GradScaler``) on one that does not, and fp32 elsewhere; ``fp32``
# never autocasts and turns TF32 off (``numerics``); ``bf16`` and ``fp16`` insist (on CUDA).

#: Images per evaluation batch.
EVAL_BATCH = 256


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset | DataLoader, *, batch_size: int = EVAL_BATCH,
             device: torch.device | str | None = None, precision: str = "auto"
             ) -> tuple[float, float]:
    """(mean cross-entropy loss, accuracy) of ``model`` on ``dataset`` (or the batches of a
    DataLoader, e.g. ``loader``'s), moved to ``device`` (default: where the model is)."""
    device = pick_device(device) if device is not None else model_device(model)
    was_training = model.training
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    batches = dataset if isinstance(dataset, DataLoader) else loader(
        dataset, batch_size, device=device)
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast(device, precision):
            logits = model(x).float()
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += len(y)
    model.train(was_training)
    return loss_sum / max(n, 1), correct / max(n, 1)


def _amp_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype of ``precision`` on ``device``; ``None``: no autocast."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {list(PRECISIONS)}")
    if device.type != "cuda" or precision == "fp32":
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if precision == "bf16" else torch.float16


@contextlib.contextmanager
def numerics(device: torch.device, precision: str = "auto"):
    """For the block: with ``fp32`` on CUDA, TF32 off in cuBLAS and cuDNN (PyTorch leaves it
    on for convolutions, such as the patch embedding), so fp32 means fp32; the flags are
    restored after. Elsewhere nothing changes (autocast is ``autocast``'s, per pass)."""
    if torch.device(device).type != "cuda" or precision != "fp32":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def autocast(device: torch.device, precision: str = "auto"):
    """Autocast on CUDA (``auto``: bf16 where the GPU supports it, else fp16), nothing
    elsewhere. fp16 needs a gradient scaler in training (``train`` makes one)."""
    dtype = _amp_dtype(device, precision)
    return torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def loader(dataset: Dataset, batch_size: int, *, device: torch.device, workers: int = 0,
           **kwargs) -> DataLoader:
    """The DataLoader of a run: ``workers`` processes that live as long as it does
    (``persistent_workers``: not re-forked at every epoch or evaluation), reading into pinned
    memory on CUDA (asynchronous host-to-device copies)."""
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                      persistent_workers=workers > 0, pin_memory=device.type == "cuda", **kwargs)


def _batches(dataset: Dataset, batch_size: int, generator: torch.Generator, workers: int = 0,
             device: torch.device = torch.device("cpu")):
    """Shuffled batches forever (a fresh permutation per epoch) from ONE DataLoader: each
    epoch draws its permutation from ``generator`` as a new DataLoader would, so the batches
    are those of a loader per epoch.

    Raises:
        ValueError: an epoch gives no full batch (it would loop forever without one).
    """
    batches = loader(dataset, batch_size, device=device, workers=workers, shuffle=True,
                     drop_last=True, generator=generator)
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError(f"batch_size={batch_size}: the train split ({len(dataset)} "
                             "images) gives no full batch; use a batch_size <= its size")

