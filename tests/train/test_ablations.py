"""Confound ablations: function preservation, plasticity scaling, masks, adapters, counts."""

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_vit, toy_task

from vitplast.experiments import runner, runs
from vitplast.measure import components, rates
from vitplast.train import ablations, configurations, finetune


@pytest.mark.parametrize("ln", ["LN1", "LN2"])
def test_function_preserving_rescale(ln, images):
    model, x = tiny_vit(), images[0]
    before = model(x)
    ablations.rescale_layernorm(model, ln, 7.0, preserve=True)
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    raw = ablations.rescale_layernorm(tiny_vit(), ln, 7.0, preserve=False)
    assert (raw(x) - before).abs().max() > 1e-2


@pytest.mark.parametrize("ln", ["LN1", "LN2"])
def test_rescale_multiplies_layernorm_plasticity_by_c(ln, images):
    base = rates.batch_rates(tiny_vit(), *images)
    scaled = rates.batch_rates(ablations.rescale_layernorm(tiny_vit(), ln, 3.0), *images)
    for layer in range(2):
        torch.testing.assert_close(scaled[(layer, ln)], 3.0 * base[(layer, ln)], rtol=1e-4, atol=0)
        other = "LN2" if ln == "LN1" else "LN1"
        torch.testing.assert_close(scaled[(layer, other)], base[(layer, other)], rtol=1e-4, atol=0)
    assert ablations.matching_scale(0.5, 4.0) == 8.0


def test_rescale_errors():
    with pytest.raises(ValueError, match="\\['LN1', 'LN2'\\]"):
        ablations.rescale_layernorm(tiny_vit(), "FC1", 2.0)
    with pytest.raises(ValueError, match="> 0"):
        ablations.rescale_layernorm(tiny_vit(), "LN1", 0.0)


def test_sparse_masks_train_exactly_count_entries():
    model = tiny_vit()
    count = components.count_parameters(model, "LN1")
    masks = ablations.sparse_masks(model, "FC1", count, seed=1)
    assert sum(int(m.sum()) for m in masks.values()) == count
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = finetune.train(model, toy_task(), steps=3, batch_size=16, lr=0.5, config="FC1",
                            grad_masks=masks, progress=False)
    head = sum(p.numel() for n, p in model.named_parameters()
               if components.component_of(n) in ("head", "norm"))
    assert result.trainable == count + head
    row = result.history[0]  # per parameter: over the trainable entries only
    assert row["grad_norm_per_param/FC1"] == pytest.approx(row["grad_norm/FC1"] / count ** 0.5)
    changed = 0
    for n, m in masks.items():
        p = dict(model.named_parameters())[n]
        assert torch.equal(p[~m], before[n][~m]), n
        changed += int((p[m] != before[n][m]).sum())
    assert changed > count // 2
    with pytest.raises(ValueError, match="weight_decay=0"):
        finetune.train(tiny_vit(), toy_task(), steps=1, config="FC1", weight_decay=0.1,
                       grad_masks=masks, progress=False)
    with pytest.raises(ValueError, match="1\\.\\."):
        ablations.sparse_masks(model, "LN1", 10**9)


def _merge_lora(model):
    """Every ``LoRALinear`` replaced by the plain linear it computes (``LoRALinear.merged``)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, ablations.LoRALinear):
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, module.merged())
    return model


@pytest.mark.parametrize("component", ["MHA", "FC1", "FC2"])
def test_lora_starts_as_identity_and_merges_exactly(component, images):
    model, x = tiny_vit(), images[0]
    before = model(x)
    ablations.add_lora(model, component, rank=2)
    torch.testing.assert_close(model(x), before)
    n_lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert n_lora == ablations.lora_count(model, component, 2)
    finetune.train(model, toy_task(), steps=2, batch_size=16, lr=0.5,
                   config=ablations.LORA_PATTERNS, progress=False)
    adapted = model(x)
    assert (adapted - before).abs().max() > 1e-4
    _merge_lora(model)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    torch.testing.assert_close(model(x), adapted, rtol=1e-4, atol=1e-5)


def test_lora_counts_are_exact():
    model = tiny_vit()  # d = 32: FC1 rank 1 costs (32 + 128) per block, 2 blocks
    assert ablations.lora_count(model, "FC1", 1) == 320
    assert ablations.lora_count(model, "MHA", 1) == 2 * ((32 + 96) + (32 + 32))


def test_bias_only_counts_are_exact():
    model = tiny_vit()
    d, blocks = 32, 2
    expected = {"LN1": d, "MHA": 3 * d + d, "LN2": d, "FC1": 4 * d, "FC2": d}
    for comp, per_block in expected.items():
        names = configurations.trainable_names(model, ablations.BIAS_ONLY[comp], train_head=False)
        assert sum(dict(model.named_parameters())[n].numel() for n in names) == blocks * per_block


def test_ablations_run_through_the_sweep(tmp_path):
    config = runs.make_run("digits", "FC2", lr=0.01, pretrained=False, steps=2,
                              batch_size=16, prepare="sparse",
                              ablation=dict(component="FC2", count=100))
    record = runner.run_one(config)
    assert record["status"] == "ok", record["error"]
    head = 128 * 10 + 10 + 2 * 128
    assert record["trainable"] == 100 + head


def _rescaled_and_control(ln: str, c: float, **kw):
    """Train the preserved rescale of ``ln`` at lr and the plain model with ``ln``'s LR divided
    by c^2, from one init and seed, the head training too; return both models and histories."""
    kw = dict(steps=6, batch_size=16, lr=0.5, config=ln, log_every=1, eval_every=100,
              progress=False, keep_best=False, **kw)
    rescaled = ablations.rescale_layernorm(tiny_vit(), ln, c)
    control = tiny_vit()
    path = components.COMPONENTS[ln]
    a = finetune.train(rescaled, toy_task(), **kw)
    b = finetune.train(control, toy_task(), lr_scales={f"blocks.*.{path}.*": 1 / c**2}, **kw)
    return rescaled, control, a.history, b.history


@pytest.mark.parametrize("ln", ["LN1", "LN2"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_preserved_rescale_is_an_lr_change_without_clipping(ln, momentum):
    """SGD with any momentum, weight decay 0, no clipping, the LayerNorm and the head training:
    the whole trajectory of the preserved rescale (gamma, beta x c; next linear / c) is the
    plain model's with the LayerNorm's LR / c^2. Why: the function is the same, so the head
    gets the same gradient; the LayerNorm's gradient in rescaled units is g / c, a step of
    lr g / c there is lr g / c^2 in the original units, and momentum is linear in the steps."""
    c = 4.0
    rescaled, control, ha, hb = _rescaled_and_control(ln, c, momentum=momentum,
                                                       clip_grad_norm=None)
    np.testing.assert_allclose([h["loss"] for h in ha], [h["loss"] for h in hb], rtol=1e-5)
    ln_a, ln_b = (dict(m.named_parameters()) for m in (rescaled, control))
    path = components.COMPONENTS[ln]
    for name in (f"blocks.1.{path}.weight", f"blocks.1.{path}.bias"):
        torch.testing.assert_close(ln_a[name] / c, ln_b[name], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(rescaled.head.weight, control.head.weight, rtol=1e-4, atol=1e-6)
    assert not torch.equal(control.head.weight, tiny_vit().head.weight)  # the head trained


def test_global_clipping_breaks_the_equivalence():
    """With a global gradient-norm clip that acts, the LayerNorm's gradient enters the global
    norm as g / c in one model and g in the other: the clip factors differ, and so do the
    trajectories. The break is as large as the LayerNorm's share of the global norm: alone
    (no head), the clipped updates differ by the factor c itself; beside a training head whose
    gradient dominates the norm, the two clip factors can agree to float precision."""
    c = 4.0
    rescaled, control, ha, hb = _rescaled_and_control("LN1", c, momentum=0.9,
                                                       clip_grad_norm=1e-3, train_head=False)
    assert all(h["grad_norm"] > 1e-3 for h in ha + hb)  # the clip acts at every step
    start = tiny_vit().blocks[1].norm1.weight
    moved_a = rescaled.blocks[1].norm1.weight / c - start  # in the original units
    moved_b = control.blocks[1].norm1.weight - start
    assert ((moved_a - moved_b).norm() / moved_b.norm()).item() > 1.0
    assert moved_a.norm().item() == pytest.approx(c * moved_b.norm().item(), rel=0.05)


def test_forest_plot_draws_each_row_at_its_difference_and_interval():
    from vitplast.report import plots

    df = pd.DataFrame(dict(q=["a", "b"], diff_pp=[1.0, -2.0], ci95_pp=[0.5, 1.5],
                           sig=[True, False]))
    ax = plots.differences(df, label="q", significant="sig").axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    bars = [c.lines[2][0].get_segments()[0] for c in ax.containers]
    np.testing.assert_allclose(bars[0], [[0.5, 1.0], [1.5, 1.0]])  # first row on top
    np.testing.assert_allclose(bars[1], [[-3.5, 0.0], [-0.5, 0.0]])
    assert [c.lines[0].get_markerfacecolor() for c in ax.containers][1] == "white"


@pytest.mark.parametrize("family", ["bias", "lora"])
def test_matched_variants_change_exactly_their_count_of_backbone_entries(family):
    """MHA's biases (4d per block) and its rank-1 adapters, masked to a smaller count: after
    training, exactly that many backbone entries moved; every other one is unchanged."""
    model, count = tiny_vit(), 40
    if family == "bias":
        run = dict(config=ablations.BIAS_ONLY["MHA"], ablation=dict(component="MHA", count=count))
        extra = ablations.PREPARE["sparse"](model, run)
    else:
        run = dict(config=ablations.LORA_PATTERNS,
                   ablation=dict(component="MHA", rank=1, count=count))
        extra = ablations.PREPARE["lora"](model, run)
        with torch.no_grad():  # B starts at zero: give it entries whose change shows
            for block in model.blocks:
                block.attn.qkv.lora_b.normal_()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    finetune.train(model, toy_task(), config=run["config"], steps=3, batch_size=16, lr=0.5,
                   train_head=False, progress=False, **extra)
    moved = sum(int((p != before[n]).sum()) for n, p in model.named_parameters())
    assert moved == count
