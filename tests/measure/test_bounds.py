"""Bounds: Props. 1-4 hold where their assumptions do, are attained where they should be, and
fail where they must (plug-in statistics, ignored biases); per-head slicing is exact; on a model
they equal the propositions on all its inputs."""

import copy
import math

import pytest
import torch
from helpers import tiny_vit
from timm.layers import Attention
from torch import nn

from vitplast.measure import bounds, plasticity, rates
from vitplast.measure.components import component_modules
from vitplast.measure.rates import rate


def shared_sigma(x, sigma, eps):
    """Tokens moved to sqrt(var + eps) = sigma exactly, keeping their mean."""
    c = x - x.mean(-1, keepdim=True)
    return x.mean(-1, keepdim=True) + c * math.sqrt(sigma ** 2 - eps) / c.std(-1, unbiased=False,
                                                                               keepdim=True)


def random_ln(d, seed=0):
    torch.manual_seed(seed)
    ln = nn.LayerNorm(d)
    with torch.no_grad():
        ln.weight.normal_(0.0, 1.0), ln.bias.normal_()
    return ln


def linear_with_spectrum(d_in, d_out, top=3.0, seed=0):
    """A linear layer with singular values (top, 1.5, 1, ..., 1): power iteration converges."""
    torch.manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(d_out, d_in))
    v, _ = torch.linalg.qr(torch.randn(d_in, d_in))
    s = torch.ones(d_in)
    s[0], s[1] = top, 1.5
    lin = nn.Linear(d_in, d_out)
    with torch.no_grad():
        lin.weight.copy_(u @ torch.diag(s) @ v.T)
    return lin, v[:, 0]


# Proposition 1: LayerNorm
def test_token_sigma_matches_layernorm_denominator():
    ln = random_ln(16)
    x = torch.randn(3, 5, 16) * 4 + 1
    s = bounds.token_sigma(x, ln.eps)
    with torch.no_grad():
        manual = (x - x.mean(-1, keepdim=True)) / s[..., None] * ln.weight + ln.bias
        torch.testing.assert_close(ln(x), manual)
    fit = bounds.sigma_fit(x, ln.eps)
    assert fit["sigma"] == pytest.approx(s.min().item())
    assert fit["sigma_cv"] > 0
    assert bounds.sigma_fit(shared_sigma(x, 2.0, ln.eps), ln.eps)["sigma_cv"] < 1e-5


def test_layernorm_bound_shared_sigma_holds_and_is_approached():
    d, sigma = 256, 0.7
    ln = random_ln(d)
    bound = bounds.layernorm_bound(ln, sigma)
    assert bound == pytest.approx(ln.weight.abs().max().item() / sigma)  # absolute, not signed
    x = shared_sigma(torch.randn(64, 4, d), sigma, ln.eps)
    with torch.no_grad():
        assert (rate(ln, x[:32], x[32:]) <= bound).all()
    # a pair on the sigma-sphere whose difference points at argmax |gamma| (centred)
    w = -torch.ones(d) / d
    w[ln.weight.abs().argmax()] += 1.0
    u = torch.randn(d)
    u = u - u.mean()
    u = u - (u @ w) / (w @ w) * w  # centred, orthogonal to w
    c = math.sqrt(d * (sigma ** 2 - ln.eps))
    a, b = (c * (u / u.norm() + t * w / w.norm()) / math.sqrt(2) for t in (1.0, -1.0))
    assert bounds.token_sigma(torch.stack([a, b]), ln.eps) == pytest.approx(sigma, rel=1e-5)
    with torch.no_grad():
        r = rate(ln, a[None, None], b[None, None]).item()
    assert 0.98 * bound < r <= bound * (1 + 1e-6)


def test_layernorm_min_sigma_is_valid_and_mean_sigma_is_not():
    d = 64
    ln = random_ln(d, seed=1)
    g = torch.Generator().manual_seed(0)
    scales = torch.logspace(-3, 1, 200).view(100, 2, 1, 1)  # tokens of very different sigma
    x, y = (torch.randn(100, 2, 3, d, generator=g) * scales).unbind(1)
    with torch.no_grad():
        rates = rate(ln, x, y)
    fit = bounds.sigma_fit(torch.cat([x, y]), ln.eps)
    assert (rates <= bounds.layernorm_bound(ln, fit["sigma"])).all()
    # only the small-sigma token moves: the mean-sigma "bound" is violated
    x = torch.randn(1, 2, d)
    x[0, 0] *= 0.01 / x[0, 0].std()
    x[0, 1] *= 10 / x[0, 1].std()
    y = x.clone()
    y[0, 0] = y[0, 0].roll(1)
    fit = bounds.sigma_fit(torch.cat([x, y]), ln.eps)
    with torch.no_grad():
        r = rate(ln, x, y).item()
    assert r <= bounds.layernorm_bound(ln, fit["sigma"])
    assert r > bounds.layernorm_bound(ln, fit["sigma_mean"])


# Proposition 2: linear layers
def test_linear_bound_is_top_singular_value_and_attained():
    lin = nn.Linear(32, 128)
    assert bounds.linear_bound(lin) == pytest.approx(torch.linalg.svdvals(lin.weight)[0].item(),
                                                     rel=1e-6)
    lin, v1 = linear_with_spectrum(32, 128)
    x = torch.randn(1, 5, 32)
    y = x.clone()
    y[0, 2] += 0.3 * v1
    with torch.no_grad():
        torch.testing.assert_close(rate(lin, x, y), torch.tensor([3.0]))
        assert (rate(lin, torch.randn(50, 5, 32), torch.randn(50, 5, 32)) < 3.0).all()
    assert bounds.linear_bound(lin) == pytest.approx(3.0, rel=1e-5)


# Proposition 3: per-head slicing
@pytest.mark.parametrize("qkv_bias", [True, False])
@pytest.mark.parametrize("fused", [True, False])
def test_row_slicing_reconstructs_timm_attention(qkv_bias, fused):
    torch.manual_seed(0)
    attn = Attention(32, num_heads=4, qkv_bias=qkv_bias).eval()
    attn.fused_attn = fused
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0.0, 0.3)
        x = torch.randn(3, 7, 32)
        torch.testing.assert_close(bounds.attention_by_heads(attn, x), attn(x))
    p = bounds.head_blocks(attn)
    w = attn.qkv.weight
    torch.testing.assert_close(p["v"][2], w[2 * 32 + 16:2 * 32 + 24])  # V rows, head 2
    torch.testing.assert_close(p["o"][1], attn.proj.weight[:, 8:16])  # O columns, head 1


def test_head_blocks_rejects_qk_norm():
    attn = Attention(32, num_heads=4, qk_norm=True, norm_layer=nn.LayerNorm)
    with pytest.raises(TypeError, match="qk-norm"):
        bounds.head_blocks(attn)


def test_radius_and_energy():
    x = torch.zeros(2, 3, 4)
    x[0, 0, 0], x[1, 1, 1] = 3.0, 1.0
    assert bounds.radius(x) == pytest.approx(dict(r_rms=math.sqrt(10 / 6), r_max=3.0))
    e = bounds.energy_fit(x)
    assert e["energy"] == pytest.approx(5.0)
    assert e["alpha"] ** 2 * e["energy"] == pytest.approx(9.0)  # max ||X||_F^2


@pytest.mark.parametrize("qkv_bias", [True, False])
@pytest.mark.parametrize("scale", [0.3, 3.0])
def test_mha_bounds_hold_on_random_weights(qkv_bias, scale):
    for seed in range(3):
        torch.manual_seed(seed)
        attn = Attention(8, num_heads=2, qkv_bias=qkv_bias).eval()
        with torch.no_grad():
            for p in attn.parameters():
                p.normal_(0.0, scale)
        x = torch.randn(64, 6, 8) * torch.rand(64, 1, 1) * 2
        with torch.no_grad():
            rates = torch.cat([rate(attn, x[:32], x[32:]),
                               rate(attn, x, x * 0.999)])
        lower = max(rates.max().item(), bounds.local_lipschitz(attn, x, 10).max().item())
        assert lower <= bounds.mha_bound(attn, 6, bounds.radius(x)["r_max"])
        assert lower <= bounds.mha_bound_energy(attn, 6, **bounds.energy_fit(x))


def test_q_bias_must_be_absorbed():
    """With W_Q = 0 and a large Q bias, the bias-free bounds are violated; ours hold."""
    for seed in range(3):
        torch.manual_seed(seed)
        attn = Attention(4, num_heads=1, qkv_bias=True).eval()
        with torch.no_grad():
            attn.qkv.weight[:4].zero_(), attn.qkv.bias.zero_()
            attn.qkv.bias[:4].normal_().mul_(30)
        naive = copy.deepcopy(attn)
        naive.qkv.bias = None
        x = torch.randn(128, 3, 4)
        lip = bounds.local_lipschitz(attn, x, 20).max().item()
        r, e = bounds.radius(x)["r_max"], bounds.energy_fit(x)
        assert lip > bounds.mha_bound(naive, 3, r) and lip > bounds.mha_bound_energy(naive, 3, **e)
        assert lip <= bounds.mha_bound(attn, 3, r) and lip <= bounds.mha_bound_energy(attn, 3, **e)


def test_v_and_proj_biases_cancel_in_rates():
    torch.manual_seed(0)
    attn = Attention(16, num_heads=2, qkv_bias=True).eval()
    x, y = torch.randn(8, 5, 16), torch.randn(8, 5, 16)
    with torch.no_grad():
        before = rate(attn, x, y)
        attn.qkv.bias[32:].normal_().mul_(10), attn.proj.bias.normal_().mul_(10)
        torch.testing.assert_close(rate(attn, x, y), before)
        attn.qkv.bias[:16].normal_().mul_(10)  # Q bias: changes the attention weights
        assert not torch.allclose(rate(attn, x, y), before)


# Lower side
def test_local_lipschitz_linear_equals_spectral_norm():
    lin, _ = linear_with_spectrum(32, 64)
    est = bounds.local_lipschitz(lin, torch.randn(3, 5, 32), iters=60)
    torch.testing.assert_close(est, torch.full((3,), 3.0), rtol=1e-4, atol=0)


def test_local_lipschitz_layernorm_and_attention_per_sample():
    ln = random_ln(32)
    x = torch.randn(4, 6, 32) * torch.tensor([0.1, 1.0, 3.0, 10.0]).view(4, 1, 1)
    est = bounds.local_lipschitz(ln, x, iters=30)
    for b in range(4):
        assert est[b] <= bounds.layernorm_bound(ln, bounds.sigma_fit(x[b:b + 1], ln.eps)["sigma"])
    assert est[0] > 10 * est[3]  # 1/sigma
    other = x.clone()
    other[1:] = torch.randn(3, 6, 32)
    assert bounds.local_lipschitz(ln, other, iters=30)[0] == est[0]  # samples are independent
    attn = Attention(32, num_heads=4, qkv_bias=True).eval()
    fused = attn.fused_attn
    assert bounds.local_lipschitz(attn, x, 5).shape == (4,)
    assert attn.fused_attn == fused  # restored


# Every component of a model
def test_model_bounds_equal_the_propositions_on_all_inputs(model, images):
    """Bounds from the statistics streamed in one pass (batches 10, 10, 4) == the propositions on
    all 2N images at once."""
    x, y = images
    stats = plasticity.measurement(model, x, y, batch_size=10, progress=False).statistics
    upper = bounds.model_bounds(model, stats)
    inputs = rates.component_inputs(model, torch.cat([x, y]))
    modules = component_modules(model)
    assert [(r.layer, r.component) for r in upper.itertuples()] == list(modules)
    for u in upper.to_dict("records"):
        key = (u["layer"], u["component"])
        f, inp = modules[key], inputs[key]
        assert u["n"] == inp.shape[1]
        if key[1].startswith("LN"):
            fit = bounds.sigma_fit(inp, f.eps)
            assert u["bound"] == pytest.approx(bounds.layernorm_bound(f, fit["sigma"]), rel=1e-5)
            assert u["plugin"] == pytest.approx(bounds.layernorm_bound(f, fit["sigma_mean"]),
                                                rel=1e-5)
            assert math.isnan(u["bound_p4"])
        elif key[1] == "MHA":
            r = bounds.radius(inp)
            assert u["bound"] == pytest.approx(bounds.mha_bound(f, u["n"], r["r_max"]), rel=1e-5)
            assert u["plugin"] == pytest.approx(bounds.mha_bound(f, u["n"], r["r_rms"]), rel=1e-5)
            assert u["bound_p4"] == pytest.approx(
                bounds.mha_bound_energy(f, u["n"], **bounds.energy_fit(inp)), rel=1e-5)
        else:
            assert u["bound"] == u["plugin"] == bounds.linear_bound(f)
            assert math.isnan(u["bound_p4"])


def test_bounds_read_no_data():
    """bounds is pure: no DataLoader, no import of the estimator."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(bounds))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names} | {n.module for n in ast.walk(tree)
                                     if isinstance(n, ast.ImportFrom)}
    assert not imported & {"plasticity", "vitplast.measure.plasticity", "DataLoader",
                           "torch.utils.data"}


@pytest.mark.parametrize("img_size, p4_smaller", [(8, True), (32, False)])
def test_which_mha_bound_is_smaller_depends_on_the_tokens(img_size, p4_smaller):
    """Prop. 4 trades Prop. 3's sqrt(12n) r_max^2 for max_b ||X_b||_F^2 ~ n r_rms^2: on the
    same tiny ViT it is the smaller bound with 5 tokens and the larger with 65 (the embedded
    model has 50; notebook 03 reports which holds there)."""
    model = tiny_vit(img_size=img_size)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(8, 1, img_size, img_size, generator=g) for _ in range(2))
    upper = bounds.model_bounds(model, plasticity.measurement(model, x, y,
                                                              progress=False).statistics)
    mha = upper[upper.component == "MHA"]
    assert ((mha.bound_p4 < mha.bound) == p4_smaller).all()
