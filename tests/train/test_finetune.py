"""The training loop: exactly the chosen parameters change, schedules, divergence, selection.
What it refuses before any step: ``test_preflight.py``."""

import math

import pytest
import torch
from helpers import tiny_vit, toy_task

from vitplast.measure import components
from vitplast.train import configurations, finetune, passes, pretrain


@pytest.mark.parametrize("config", list(configurations.CONFIGS))
def test_one_step_changes_exactly_the_chosen_parameters(config):
    model = tiny_vit()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = finetune.train(model, toy_task(), steps=1, batch_size=16, lr=0.1, config=config,
                            progress=False)
    chosen = set(configurations.trainable_names(model, config))
    assert result.trainable == sum(p.numel() for n, p in model.named_parameters() if n in chosen)
    for n, p in model.named_parameters():
        if n in chosen:
            assert not torch.equal(p, before[n]), f"{n} should have changed"
        else:
            assert torch.equal(p, before[n]), f"{n} should be bit-identical"
            assert p.grad is None


def test_head_can_be_frozen_too():
    model = tiny_vit()
    head = model.head.weight.detach().clone()
    finetune.train(model, toy_task(), steps=1, batch_size=16, config="LN1", train_head=False,
                   progress=False)
    assert torch.equal(model.head.weight, head)


def test_learning_rate_schedule():
    kw = dict(lr=1.0, steps=100, warmup_steps=10)
    assert finetune.lr_at(0, **kw) == pytest.approx(0.1)
    assert finetune.lr_at(9, **kw) == pytest.approx(1.0)
    assert finetune.lr_at(10, **kw) == pytest.approx(1.0)
    assert finetune.lr_at(55, **kw) == pytest.approx(0.5)
    assert finetune.lr_at(100, **kw) == pytest.approx(0.0, abs=1e-12)


def test_divergence_is_recorded():
    result = finetune.train(tiny_vit(), toy_task(), steps=20, batch_size=16, lr=1e30,
                            clip_grad_norm=None, progress=False)
    assert result.diverged and not math.isfinite(result.history[-1]["loss"])


def test_best_validation_weights_are_kept_and_tested():
    model, task = tiny_vit(), toy_task()
    snapshots = {}
    result = finetune.train(model, task, toy_task(32, seed=1), toy_task(32, seed=2), steps=12,
                            batch_size=16, lr=0.05, eval_every=3, progress=False,
                            on_eval=lambda step, m, row: snapshots.__setitem__(
                                step, {n: p.detach().clone() for n, p in m.named_parameters()}))
    evals = [r for r in result.history if "val_acc" in r]
    assert len(evals) == 4 and result.best_val_acc == max(r["val_acc"] for r in evals)
    best = next(r["step"] for r in evals if r["val_acc"] == result.best_val_acc)
    assert result.best_step == best
    for n, p in model.named_parameters():
        assert torch.equal(p, snapshots[best][n])
    assert result.test_acc == passes.evaluate(model, toy_task(32, seed=2))[1]


def test_logged_gradient_norms_are_consistent():
    result = finetune.train(tiny_vit(), toy_task(), steps=1, batch_size=16, config="FC1",
                            clip_grad_norm=None, progress=False)
    row = result.history[0]
    groups = [k.split("/")[1] for k in row if k.startswith("grad_norm/")]
    assert sorted(groups) == ["FC1", "head", "norm"]
    total = math.sqrt(sum(row[f"grad_norm/{g}"] ** 2 for g in groups))
    assert row["grad_norm"] == pytest.approx(total, rel=1e-5)
    count = components.count_parameters(tiny_vit(), "FC1")
    assert row["grad_norm_per_param/FC1"] == pytest.approx(row["grad_norm/FC1"] / count ** 0.5)


def test_gradient_accumulation_matches_a_full_batch():
    a, b = tiny_vit(), tiny_vit()
    finetune.train(a, toy_task(), steps=1, batch_size=16, progress=False)
    finetune.train(b, toy_task(), steps=1, batch_size=16, accum_steps=4, progress=False)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_pretraining_augmentation_keeps_shape_and_is_seeded():
    x = torch.randn(8, 1, 28, 28)
    a = pretrain.augment(x, torch.Generator().manual_seed(0))
    b = pretrain.augment(x, torch.Generator().manual_seed(0))
    assert a.shape == x.shape and torch.equal(a, b)
    assert not torch.equal(a, x)


def test_lr_scales_make_a_parameter_group_move_slower():
    """With momentum-free SGD and no clipping, one step moves each parameter by -lr * grad:
    a group at scale 0.25 moves exactly a quarter of what it moves at scale 1."""
    kw = dict(steps=1, batch_size=16, lr=0.1, momentum=0.0, clip_grad_norm=None, config="LN1",
              progress=False)
    a, b = tiny_vit(), tiny_vit()
    start = a.blocks[0].norm1.weight.detach().clone()
    finetune.train(a, toy_task(), **kw)
    finetune.train(b, toy_task(), lr_scales={"blocks.*.norm1.*": 0.25}, **kw)
    torch.testing.assert_close(b.blocks[0].norm1.weight - start,
                               0.25 * (a.blocks[0].norm1.weight - start))
    torch.testing.assert_close(a.head.weight, b.head.weight)


def test_one_model_trains_one_lr(monkeypatch):
    """``finetune.run`` refuses a trainee given as many LRs as it has not runs (a ``Single``
    with two LRs would train the first and return an empty second)."""
    from vitplast.train import trainees

    seen = {}
    real = finetune.run
    monkeypatch.setattr(finetune, "run", lambda *a, **k: seen.update(a=a, k=k) or real(*a, **k))
    finetune.train(tiny_vit(), toy_task(), lr=0.1, steps=1, batch_size=16, progress=False)
    model, _, splits, args, _ = seen["a"]
    with pytest.raises(ValueError, match="Single trains 1 run"):
        real(model, trainees.Single, splits, args, [0.1, 0.3], desc="")
