"""The residual-stream gauge: same function (within LayerNorm's eps, derived), rates moved as
derived, refusals, and finetuning's exact invariances (whole loss histories compared)."""

import copy

import pytest
import torch
from helpers import tiny_vit, toy_task
from torch import nn

from vitplast.experiments import runner, runs
from vitplast.measure import gauge, plasticity
from vitplast.train import ablations, invariance


def _eps0(model):
    """``model`` with every LayerNorm's eps set to 0 (what removing eps does)."""
    model = copy.deepcopy(model)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.eps = 0.0
    return model


@pytest.mark.parametrize("c", [8.0, 3.0])
def test_gauge_preserves_the_function_within_layernorm_eps(c, images):
    """Derivation (module docstring): gauged = original with eps / c^2, so to first order in
    eps the output moves by (1 - c^-2) times what removing eps moves it (D0). Float64: the law
    itself (1%); float32: it as a tolerance, plus round-off."""
    x = images[0]
    model = tiny_vit().double()
    f, d0 = model(x.double()), (_eps0(model)(x.double()) - model(x.double())).abs().max()
    assert d0 > 0  # eps matters on this model: the test is not vacuous
    moved = (gauge.rescale_stream(copy.deepcopy(model), c)(x.double()) - f).abs().max()
    assert abs(moved - (1 - c ** -2) * d0) <= 0.01 * d0
    exact = gauge.rescale_stream(copy.deepcopy(model), c, scale_eps=True)(x.double())
    torch.testing.assert_close(exact, f, rtol=0, atol=1e-12)
    model32 = tiny_vit()
    moved32 = (gauge.rescale_stream(copy.deepcopy(model32), c)(x) - model32(x)).abs().max()
    assert moved32 <= 1.05 * (1 - c ** -2) * d0 + 1e-5
    gauged = gauge.rescale_stream(copy.deepcopy(model32), c)
    assert (gauged(x).argmax(1) == model32(x).argmax(1)).all()


def test_function_gap_is_the_derived_first_order_size(images):
    gap = gauge.function_gap(tiny_vit().double(), images[0].double(), 8.0)
    assert gap["same_predictions"] == 1.0
    assert gap["max_logit_diff"] == pytest.approx(gap["first_order"], rel=0.01)


def test_gauge_scales_exactly_the_gauged_parameters_and_inverts():
    model = tiny_vit(reg_tokens=2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    gauge.rescale_stream(model, 4.0)
    names = set(gauge.gauged_names(model))
    assert names == {"patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed",
                     "cls_token", "reg_token"} | {f"blocks.{i}.{m}.{p}" for i in range(2) for m in
                                                  ("attn.proj", "mlp.fc2")
                                                  for p in ("weight", "bias")}
    for n, p in model.named_parameters():
        torch.testing.assert_close(p, before[n] * (4.0 if n in names else 1.0), rtol=0, atol=0)
    gauge.rescale_stream(model, 0.25)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p, before[n], rtol=0, atol=0)
    with pytest.raises(ValueError, match="> 0"):
        gauge.rescale_stream(model, -1.0)


def test_layernorm_shift_is_below_its_first_order_bound():
    for sigma in (0.01, 0.1, 1.0):
        for c in (2.0, 8.0):
            shift = gauge.layernorm_shift(sigma, 1e-6, c)
            assert 0 < shift <= (1 - c ** -2) * 1e-6 / (2 * sigma ** 2)
    assert gauge.layernorm_shift(0.1, 1e-6, 1.0) == 0.0


@pytest.mark.parametrize("protocol", ["hidden", "embedding"])
@pytest.mark.parametrize("c", [8.0, 3.0])
def test_rates_transform_as_derived(protocol, c, images):
    """Hidden: LayerNorms / c, MHA and FC2 x c, FC1 unchanged (embedding: same but MHA, not
    derived). With eps scaled (exact gauge) to round-off; with eps kept within the eps-derived
    relative shift of the LayerNorms, bounded from the smallest per-token sigma measured."""
    model = tiny_vit()
    meas = plasticity.measurement(model, *images, protocol="hidden", progress=False)
    sigma = meas.statistics["sigma"].min()  # smallest sqrt(var + eps) of any LayerNorm input
    shift = (1 - c ** -2) * model.blocks[0].norm1.eps / (2 * sigma ** 2)
    base = plasticity.measure(model, *images, protocol=protocol, progress=False)
    for scale_eps, rtol in ((True, 1e-4), (False, 1e-4 + 4 * len(model.blocks) * shift)):
        gauged = gauge.rescale_stream(copy.deepcopy(model), c, scale_eps=scale_eps)
        moved = plasticity.measure(gauged, *images, protocol=protocol, progress=False)
        for comp, factor in gauge.RATE_FACTORS[protocol].items():
            a = torch.tensor(moved.loc[moved.component == comp, "rate"].to_numpy())
            b = torch.tensor(base.loc[base.component == comp, "rate"].to_numpy())
            if factor is None:
                assert not torch.allclose(a, b * c, rtol=1e-2)  # attention is not scale-free
                continue
            torch.testing.assert_close(a, b * factor(c), rtol=rtol, atol=0, msg=comp)


def test_gauge_with_layerscale_reg_tokens_and_avg_pool_is_supported(images):
    """LayerScale is linear (refusing it is not needed), registers and positions without
    the class entry, fc_norm after average pooling: all function-preserving."""
    x = images[0]
    for kwargs in (dict(init_values=0.1), dict(reg_tokens=2, no_embed_class=True),
                   dict(global_pool="avg", fc_norm=True), dict(qk_norm=True)):
        model = tiny_vit(**kwargs).double()
        exact = gauge.rescale_stream(copy.deepcopy(model), 5.0, scale_eps=True)
        torch.testing.assert_close(exact(x.double()), model(x.double()), rtol=0, atol=1e-10)


def _refusals():
    from timm.layers import RmsNorm
    from timm.models.eva import Eva
    from timm.models.vision_transformer import ParallelScalingBlock, ResPostBlock

    return {
        "post-norm": (lambda: tiny_vit(block_fn=ResPostBlock), "ResPostBlock"),
        "parallel": (lambda: tiny_vit(block_fn=ParallelScalingBlock), "ParallelScalingBlock"),
        "norm_pre": (lambda: tiny_vit(pre_norm=True), "norm_pre"),
        "embed norm": (lambda: tiny_vit(embed_norm_layer=nn.LayerNorm), "patch embedding"),
        "no final norm": (lambda: tiny_vit(final_norm=False), "no final LayerNorm"),
        "rmsnorm": (lambda: tiny_vit(norm_layer=RmsNorm), "not a LayerNorm"),
        "eva": (lambda: Eva(img_size=16, patch_size=4, in_chans=1, num_classes=5, embed_dim=32,
                            depth=1, num_heads=4), "EVA"),
        "not a ViT": (lambda: nn.Sequential(nn.Linear(2, 2)), "not a timm VisionTransformer"),
    }


@pytest.mark.parametrize("case", list(_refusals()))
def test_gauge_refuses_architectures_it_does_not_preserve(case):
    build, reason = _refusals()[case]
    model = build()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(TypeError, match=reason) as err:
        gauge.rescale_stream(model, 8.0)
    assert "not function-preserving" in str(err.value)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # untouched


# -- finetuning invariances ----------------------------------------------------------------

C = 8.0
#: A few steps, every one logged; the LR makes the recipe's clip (1.0) act.
RUN = dict(steps=6, batch_size=16, lr=0.5, log_every=1, eval_every=100, warmup_steps=0,
           progress=False)


def _history(model, config, **kwargs):
    """Loss and global gradient norm (before clipping) of every step."""
    from vitplast.train import finetune

    result = finetune.train(model, toy_task(), config=config, **{**RUN, **kwargs})
    return (torch.tensor([r["loss"] for r in result.history], dtype=torch.float64),
            torch.tensor([r["grad_norm"] for r in result.history], dtype=torch.float64))


@pytest.mark.parametrize("config", ["head", "LN1", "LN2", "FC1"])
def test_configurations_without_gauged_parameters_follow_the_same_trajectory(config):
    """Same gradients (no trained parameter is scaled), so the same steps, clip included
    (its global norm is over the same gradients): identical loss histories at c = 1 and 8.
    Exact gauge (eps scaled): to round-off. Eps kept: the gauged run is the run of the model
    with eps / c^2, so each loss moves by (1 - c^-2) times what removing eps moves it, to first
    order: that, plus 10%, is the tolerance."""
    model = tiny_vit()
    assert invariance.finetuning_equivalence(model, config, C) == {}
    loss, norm = _history(copy.deepcopy(model), config)
    assert norm.max() > 1.0  # the clip acted
    g_loss, g_norm = _history(gauge.rescale_stream(copy.deepcopy(model), C, scale_eps=True), config)
    torch.testing.assert_close(g_loss, loss, rtol=0, atol=1e-5)
    torch.testing.assert_close(g_norm, norm, rtol=1e-5, atol=1e-5)
    no_eps, _ = _history(_eps0(model), config)
    tol = 1.1 * (1 - C ** -2) * (no_eps - loss).abs() + 1e-5
    g_loss, _ = _history(gauge.rescale_stream(copy.deepcopy(model), C), config)
    assert ((g_loss - loss).abs() <= tol).all(), ((g_loss - loss).abs(), tol)


@pytest.mark.parametrize("config", ["MHA", "FC2", "full"])
def test_configurations_with_gauged_parameters_are_an_lr_change(config):
    """Without clipping: the gauged run IS the original run with the scaled parameters' LR
    divided by c^2 (loss histories, and the parameters once un-gauged). With the recipe's
    clip acting, it is not (the clip factors differ); and it is not the plain original run."""
    model = tiny_vit()
    scales = invariance.finetuning_equivalence(model, config, C)
    assert scales and set(scales.values()) == {1 / C ** 2}
    if config == "MHA":
        assert sorted(scales) == [f"blocks.{i}.attn.proj.{p}" for i in range(2)
                                  for p in ("bias", "weight")]
    kw = dict(clip_grad_norm=None, lr=0.05)
    gauged = gauge.rescale_stream(copy.deepcopy(model), C, scale_eps=True)
    g_loss, _ = _history(gauged, config, **kw)
    lr_model = copy.deepcopy(model)
    lr_loss, _ = _history(lr_model, config, lr_scales=scales, **kw)
    torch.testing.assert_close(g_loss, lr_loss, rtol=0, atol=1e-5)
    back = dict(gauge.rescale_stream(gauged, 1 / C).named_parameters())
    for n, p in lr_model.named_parameters():
        torch.testing.assert_close(back[n], p, rtol=1e-4, atol=1e-5, msg=n)
    plain, _ = _history(copy.deepcopy(model), config, **kw)
    assert (plain - g_loss).abs().max() > 1e-3  # the LR change matters
    # the recipe's clip, acting: the equivalence breaks
    g_clip, g_norm = _history(gauge.rescale_stream(copy.deepcopy(model), C, scale_eps=True), config)
    lr_clip, lr_norm = _history(copy.deepcopy(model), config, lr_scales=scales)
    assert lr_norm.max() > 1.0 and (g_norm < lr_norm).all()  # gauged norm: scaled grads / c
    assert (g_clip - lr_clip).abs().max() > 1e-3


def test_gauge_runs_through_the_sweep():
    config = runs.make_run("digits", "LN1", lr=0.01, pretrained=False, steps=2,
                              batch_size=16, prepare="gauge", ablation=dict(c=8.0))
    assert ablations.PREPARE["gauge"] is gauge.prepare
    record = runner.run_one(config)
    assert record["status"] == "ok", record["error"]
    with pytest.raises(ValueError, match="takes c"):
        gauge.prepare(tiny_vit(), dict(ablation=dict(scale=8.0)))


def test_equivalence_under_adamw_is_one_over_c():
    assert set(invariance.finetuning_equivalence(tiny_vit(), "FC2", 4.0, optimizer="adamw")
               .values()) == {0.25}
    with pytest.raises(ValueError, match="unknown optimizer 'lion'; valid: \\['sgd', 'adamw'\\]"):
        invariance.finetuning_equivalence(tiny_vit(), "FC2", 4.0, optimizer="lion")

