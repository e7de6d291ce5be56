"""What the one loop trains (``vitplast.train.trainees``): K stacked copies compute what K
models compute, and their update is ``torch.optim.SGD``'s, run by run."""

import pytest
import torch
from helpers import tiny_vit

from vitplast.attention import unfused_attention
from vitplast.train import batched, trainees
from vitplast.train.configurations import set_trainable, trainable_names


def _trainee(cls, model, lrs, **kwargs):
    set_trainable(model, trainable_names(model, "MHA"))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    args = {**batched.DEFAULTS, "precision": "fp32", **kwargs}
    return cls(model, named, args, lrs, torch.device("cpu"))


def test_lr_scale_takes_the_first_matching_pattern():
    scales = {"blocks.0.*": 0.5, "blocks.*": 0.25}
    assert trainees.lr_scale("blocks.0.attn.qkv.weight", scales) == 0.5
    assert trainees.lr_scale("blocks.1.attn.qkv.weight", scales) == 0.25
    assert trainees.lr_scale("head.weight", scales) == 1.0


def test_stacked_copies_give_the_model_s_logits_for_every_run():
    model, x = tiny_vit(), torch.randn(4, 1, 16, 16)
    single = _trainee(trainees.Single, model, [0.1])
    with torch.no_grad(), unfused_attention(model):
        one = single.forward(x)  # (1, B, classes)
        stacked = _trainee(trainees.Stacked, model, [0.1, 0.2, 0.3]).forward(x)
    assert one.shape == (1, 4, 5) and stacked.shape == (3, 4, 5)
    for k in range(3):
        torch.testing.assert_close(stacked[k], one[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(momentum=0.9), dict(momentum=0.0, weight_decay=0.1)])
def test_the_stacked_update_is_torch_sgd_s_run_by_run(kwargs):
    """Two steps of the same gradients: each run moves as ``torch.optim.SGD`` moves one model
    at its learning rate (momentum, weight decay, an LR multiplier); a stopped run stays."""
    lrs, scales = [0.1, 0.5, 1.0], {"blocks.0.*": 0.5}
    model = tiny_vit()
    stack = _trainee(trainees.Stacked, model, lrs, lr_scales=scales, **kwargs)
    start = {n: p.detach().clone() for n, p in stack.params.items()}
    grads = {n: torch.randn(p.shape[1:]) for n, p in stack.params.items()}
    stack.stop(2)
    for _ in range(2):
        for n, p in stack.params.items():
            p.grad = grads[n].expand_as(p).clone()
        stack.apply(lrs)
    for k, lr in enumerate(lrs[:2]):
        reference = tiny_vit()
        single = _trainee(trainees.Single, reference, [lr], lr_scales=scales, **kwargs)
        for _ in range(2):
            for n, p in single.named:
                p.grad = grads[n].clone()
            single.apply([lr])
        for n, p in single.named:
            torch.testing.assert_close(stack.params[n][k], p.detach(), rtol=1e-6, atol=1e-7)
    assert all(torch.equal(p[2], start[n][2]) for n, p in stack.params.items())
