"""Batched runs (``vitplast.train.batched``) give what separate ``finetune.train`` runs give: whole
loss histories within 1e-5 (gradient norms within 1e-4, relative), the same logged rows, best
steps, accuracies and trainable counts; a diverging LR stops alone; the model given is left
unchanged; what cannot be batched is refused with the reason."""

import math

import pytest
import torch
from helpers import tiny_vit, toy_task

from vitplast.train import batched, finetune

SETTINGS = dict(steps=12, batch_size=16, eval_every=4, log_every=2, warmup_steps=3,
                progress=False, device="cpu")


def _separate(lrs, val=True, **kwargs):
    out = []
    for lr in lrs:
        model = tiny_vit()
        out.append(finetune.train(model, toy_task(64), toy_task(32, seed=1) if val else None,
                                  toy_task(32, seed=2), lr=lr, **{**SETTINGS, **kwargs}))
    return out


def _assert_same(batch, separate):
    for b, s in zip(batch, separate, strict=True):
        assert (b.diverged, b.best_step, b.trainable) == (s.diverged, s.best_step, s.trainable)
        assert [set(row) for row in b.history] == [set(row) for row in s.history]
        for rb, rs in zip(b.history, s.history, strict=True):
            assert rb["loss"] == pytest.approx(rs["loss"], abs=1e-5, rel=1e-6)  # rel: diverged
            for key in rs:  # gradient norms: float32 noise grows with the LR (1e-5 at LR 1)
                assert rb[key] == pytest.approx(rs[key], rel=1e-4), (key, rb, rs)
        for key in ("initial_val_acc", "best_val_acc", "test_acc"):
            x, y = getattr(b, key), getattr(s, key)
            assert (math.isnan(x) and math.isnan(y)) or x == y, key
        assert b.test_loss == pytest.approx(s.test_loss, rel=1e-5, nan_ok=True)


@pytest.mark.parametrize("kwargs", [
    dict(config="head"),
    dict(config="MHA"),
    dict(config="LN1", momentum=0.0, clip_grad_norm=None, weight_decay=0.01),
    dict(config="FC2", accum_steps=2, label_smoothing=0.1, lr_scales={"blocks.1.*": 0.5}),
])
def test_batched_runs_equal_separate_runs(kwargs):
    lrs = [0.01, 0.1, 1.0]
    model = tiny_vit()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = batched.train_lrs(model, toy_task(64), toy_task(32, seed=1), toy_task(32, seed=2),
                              lrs=lrs, **SETTINGS, **kwargs)
    _assert_same(batch, _separate(lrs, **kwargs))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_masked_runs_equal_separate_ones_and_count_only_unmasked_entries():
    model = tiny_vit()
    mask = torch.zeros_like(model.blocks[0].norm1.weight, dtype=torch.bool)
    mask[:5] = True
    kwargs = dict(config="LN1", grad_masks={"blocks.0.norm1.weight": mask})
    lrs = [0.1, 1.0]
    batch = batched.train_lrs(model, toy_task(64), toy_task(32, seed=1), toy_task(32, seed=2),
                              lrs=lrs, **SETTINGS, **kwargs)
    separate = _separate(lrs, **kwargs)
    _assert_same(batch, separate)
    # LN1: block 0's weight (5 of 32 entries) and bias, block 1's weight and bias; the new
    # head (32 x 5 + 5) and the final norm (2 x 32)
    assert batch[0].trainable == separate[0].trainable == 5 + 32 + 2 * 32 + 165 + 64


def test_a_diverging_lr_stops_alone():
    lrs = [0.1, 1e6]
    kwargs = dict(config="full", clip_grad_norm=None)
    batch = batched.train_lrs(tiny_vit(), toy_task(64), toy_task(32, seed=1),
                              toy_task(32, seed=2), lrs=lrs, **SETTINGS, **kwargs)
    separate = _separate(lrs, **kwargs)
    assert [r.diverged for r in batch] == [False, True]
    _assert_same(batch, separate)


def test_runs_without_validation_test_their_last_weights_as_separate_runs_do():
    lrs = [0.01, 0.1]
    batch = batched.train_lrs(tiny_vit(), toy_task(64), None, toy_task(32, seed=2), lrs=lrs,
                              **SETTINGS, config="MHA")
    _assert_same(batch, _separate(lrs, val=False, config="MHA"))
    assert all(r.best_step == -1 and not math.isnan(r.test_acc) for r in batch)


def test_one_loop_trains_both(monkeypatch):
    """The batched path is the loop of ``finetune.train`` over another trainee: one step,
    one host sync, one gradient-norm code path (``finetune.run``), not a copy of it: both
    train through ``finetune.run``'s one step (``_Step``), a batched run with a Stacked
    trainee of K runs."""
    from vitplast.train import trainees

    seen = []
    real = finetune._Step.__call__
    monkeypatch.setattr(finetune._Step, "__call__",
                        lambda self, *a: seen.append(type(self.trainee)) or real(self, *a))
    batched.train_lrs(tiny_vit(), toy_task(64), None, toy_task(32, seed=2), lrs=[0.01, 0.1],
                      **{**SETTINGS, "steps": 2})
    _separate([0.01], val=False, steps=2)
    assert seen == [trainees.Stacked] * 2 + [trainees.Single] * 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(optimizer="adamw"), "optimizer 'sgd'"),
    (dict(on_eval=lambda *a: None), "on_eval"),
    (dict(lr=0.1), "lrs"),
    (dict(lrs=[]), "lrs is empty"),
])
def test_what_cannot_be_batched_is_refused_with_the_reason(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        batched.train_lrs(tiny_vit(), toy_task(64), **{"lrs": [0.1], **SETTINGS, **kwargs})
    with pytest.raises(ValueError, match="dropout"):
        batched.train_lrs(tiny_vit(drop_rate=0.1), toy_task(64), lrs=[0.1], **SETTINGS)
