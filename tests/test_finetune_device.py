"""GPU-ready training loop, checked on a CPU: no host sync per step (the divergence check stays
exact), and the autocast dtype of each precision on a CUDA device."""

import math

import pytest
import torch
from helpers import tiny_vit, toy_task

from vitplast.train import finetune, passes


def test_losses_are_read_only_at_logging_steps(monkeypatch):
    """20 steps logged every 10 and no validation: the training loop reads values to the host
    at steps 0, 10 and 19 only (losses, divergence flags, group norms, gradient norm), not at
    every step. (The data loader's own reads are of CPU tensors: no device sync.)"""
    import sys

    calls = []

    def counting(method):
        def wrapper(t):
            if sys._getframe(1).f_code.co_filename == finetune.__file__:
                calls.append(sys._getframe(1).f_lineno)
            return method(t)
        return wrapper

    monkeypatch.setattr(torch.Tensor, "item", counting(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "tolist", counting(torch.Tensor.tolist))
    result = finetune.train(tiny_vit(), toy_task(), steps=20, batch_size=16, lr=0.01,
                            log_every=10, eval_every=10**9, progress=False)
    assert [row["step"] for row in result.history] == [0, 10, 19]
    assert len(calls) == 4 * 3, calls


@pytest.mark.parametrize("log_every", [1, 7])
def test_a_non_finite_loss_between_logging_steps_still_ends_the_run(log_every):
    """Whether or not the diverging step is a logging step, the run ends diverged and its last
    row is the first diverged step's, as with a check at every step."""
    result = finetune.train(tiny_vit(), toy_task(), steps=40, batch_size=16, lr=1e30,
                            clip_grad_norm=None, log_every=log_every, eval_every=10**9,
                            progress=False)
    every = finetune.train(tiny_vit(), toy_task(), steps=40, batch_size=16, lr=1e30,
                           clip_grad_norm=None, log_every=1, eval_every=10**9, progress=False)
    assert result.diverged and every.diverged
    last, reference = result.history[-1], every.history[-1]
    assert last["step"] == reference["step"] and last["lr"] == reference["lr"]
    assert last["loss"] == reference["loss"] or math.isnan(last["loss"]) == math.isnan(
        reference["loss"]) is True
    assert math.isnan(result.test_acc)  # a diverged run is not tested


def test_precision_picks_the_autocast_dtype(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert passes._amp_dtype(cuda, "auto") == torch.float16  # with a GradScaler in train
    assert passes._amp_dtype(cuda, "bf16") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert passes._amp_dtype(cuda, "auto") == torch.bfloat16
    assert passes._amp_dtype(cuda, "fp16") == torch.float16
    assert passes._amp_dtype(cuda, "fp32") is None
    assert all(passes._amp_dtype(cpu, p) is None for p in passes.PRECISIONS)
    with pytest.raises(ValueError, match="valid: \\['auto', 'fp32', 'bf16', 'fp16'\\]"):
        passes._amp_dtype(cpu, "fp8")
