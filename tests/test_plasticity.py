"""The estimator: hook rates equal direct recomputation; both protocols; pairs; errors."""

import pytest
import torch
from helpers import tiny_vit

from vitplast import components, plasticity


def direct_rates(model, x, y, protocol):
    """Recompute every component's rate by applying the module to its captured input."""
    xin = plasticity.component_inputs(model, x, protocol)
    yin = plasticity.component_inputs(model, y, protocol)
    out = {}
    for key, module in components.component_modules(model).items():
        with torch.no_grad():
            out[key] = plasticity.rate(module, xin[key], yin[key])
    return out


@pytest.mark.parametrize("protocol", plasticity.PROTOCOLS)
@pytest.mark.parametrize("variant", ["vit", "dinov2", "deit"])
def test_hook_rates_equal_direct_recomputation(images, protocol, variant):
    kwargs = {"vit": {}, "dinov2": dict(init_values=1e-5, reg_tokens=4),
              "deit": dict(class_token=True, global_pool="avg", fc_norm=True)}[variant]
    model = tiny_vit(**kwargs)
    x, y = images
    hooked = plasticity.batch_rates(model, x, y, protocol)
    direct = direct_rates(model, x, y, protocol)
    assert set(hooked) == {(i, c) for i in range(2) for c in components.COMPONENTS}
    for key in hooked:
        torch.testing.assert_close(hooked[key], direct[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 300, 1 << 17])
def test_chunked_pair_distances_equal_whole_batch_ones(monkeypatch, chunk):
    """The estimator forms x - y a few pairs at a time on a CPU (``_CHUNK`` elements): the
    same numbers as the whole-batch difference (float rounding at most), however the batch
    splits into chunks (one pair each, uneven ones, one), also for a non-contiguous
    activation; other dtypes take the whole-batch path (in float32)."""
    monkeypatch.setattr(plasticity, "_CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    t = torch.randn(2 * 9, 5, 12, generator=g)
    for tensor in (t, t.transpose(1, 2), t.double()):
        got = plasticity._Rates()._pair_distance(tensor)
        want = (tensor[:9].double() - tensor[9:].double()).flatten(1).norm(dim=1)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)
        torch.testing.assert_close(got, plasticity._pair_distance(tensor), rtol=1e-6, atol=0)


@pytest.mark.parametrize("protocol", plasticity.PROTOCOLS)
def test_hook_rates_do_not_depend_on_the_chunk(monkeypatch, model, images, protocol):
    x, y = images
    whole = plasticity.batch_rates(model, x, y, protocol)
    monkeypatch.setattr(plasticity, "_CHUNK", 100)  # several chunks per activation
    chunked = plasticity.batch_rates(model, x, y, protocol)
    for key in whole:
        torch.testing.assert_close(chunked[key], whole[key], rtol=1e-6, atol=0)


def test_embedding_protocol_feeds_every_component_the_embedding(model, images):
    x, y = images
    ex, ey = plasticity.embed(model, x), plasticity.embed(model, y)
    rates = plasticity.batch_rates(model, x, y, "embedding")
    fc2 = model.blocks[1].mlp.fc2
    pad = lambda e: torch.nn.functional.pad(e, (0, fc2.in_features - e.shape[-1]))  # noqa: E731
    with torch.no_grad():
        num = (fc2(pad(ex)) - fc2(pad(ey))).flatten(1).norm(dim=1)
        expected = num / (ex - ey).flatten(1).norm(dim=1)
        mha = plasticity.rate(model.blocks[0].attn, ex, ey)
    torch.testing.assert_close(rates[(1, "FC2")], expected)
    torch.testing.assert_close(rates[(0, "MHA")], mha)


def test_hidden_protocol_uses_in_network_inputs(model, images):
    x, _ = images
    inputs = plasticity.component_inputs(model, x, "hidden")
    with torch.no_grad():
        torch.testing.assert_close(inputs[(0, "MHA")], model.blocks[0].norm1(inputs[(0, "LN1")]))
        torch.testing.assert_close(inputs[(0, "LN1")], plasticity.embed(model, x))
        assert inputs[(1, "FC2")].shape[-1] == 4 * 32


def test_measure_is_tidy_streams_and_counts_identical_pairs(model, images):
    x, y = images
    y = y.clone()
    y[[3, 7]] = x[[3, 7]]
    df = plasticity.measure(model, x, y, batch_size=5, progress=False, meta={"task": "t"})
    assert df.attrs["excluded"] == 2
    assert len(df) == 22 * 2 * 5
    assert list(df.columns) == ["task", "protocol", "layer", "component", "pair", "rate"]
    assert not {3, 7} & set(df["pair"])
    one_batch = plasticity.measure(model, x, y, batch_size=64, progress=False)
    torch.testing.assert_close(torch.tensor(df["rate"].values),
                               torch.tensor(one_batch["rate"].values))


def direct_statistics(model, inputs):
    """The bounds' statistics of each component's inputs, computed at once with plain torch."""
    out = {}
    for key, f in components.component_modules(model).items():
        x = inputs[key].double()
        stats = dict(n=x.shape[1])
        if key[1].startswith("LN"):
            s = torch.sqrt(x.var(dim=-1, unbiased=False) + f.eps)
            stats.update(sigma=s.min(), sigma_mean=s.mean(),
                         sigma_cv=s.std(unbiased=False) / s.mean())
        elif key[1] == "MHA":
            norms, energy = x.norm(dim=-1), x.pow(2).sum(dim=(1, 2))
            stats.update(r_rms=norms.pow(2).mean().sqrt(), r_max=norms.max(), energy=energy.mean(),
                         alpha=(energy.max() / energy.mean()).sqrt())
        out[key] = {k: float(v) for k, v in stats.items()}
    return out


@pytest.mark.parametrize("protocol", plasticity.PROTOCOLS)
def test_one_pass_gives_the_separate_computations(model, images, protocol):
    """Rates, statistics and kept inputs of ONE streamed pass (batches 5, 5, ..., identical pairs
    excluded) equal what separate passes give: per-pair rates by direct recomputation, the
    statistics of all 2N kept images at once, the inputs of the first x images."""
    x, y = images
    y = y.clone()
    y[[0, 7]] = x[[0, 7]]
    m = plasticity.measurement(model, x, y, protocol=protocol, batch_size=5, progress=False,
                               keep=6)
    kept = [i for i in range(24) if i not in (0, 7)]
    direct = direct_rates(model, x[kept], y[kept], protocol)
    for key, r in direct.items():
        got = m.rates[(m.rates.layer == key[0]) & (m.rates.component == key[1])]
        assert list(got["pair"]) == kept
        torch.testing.assert_close(torch.tensor(got["rate"].values), r, rtol=1e-5, atol=1e-6)
    stats = direct_statistics(model, plasticity.component_inputs(
        model, torch.cat([x[kept], y[kept]]), protocol))
    assert len(m.statistics) == 10
    for row in m.statistics.to_dict("records"):
        expected = stats[(row["layer"], row["component"])]
        assert {k for k, v in row.items() if v == v} == {"layer", "component", *expected}
        for k, v in expected.items():
            assert row[k] == pytest.approx(v, rel=1e-5, abs=1e-9), (row["layer"], k)
    first = plasticity.component_inputs(model, x[kept[:6]], protocol)
    for key, inp in m.inputs.items():
        torch.testing.assert_close(inp, first[key], rtol=1e-5, atol=1e-6)
    assert plasticity.measure(model, x, y, protocol=protocol, progress=False).equals(m.rates)
    bare = plasticity.measurement(model, x, y, protocol=protocol, batch_size=5, progress=False,
                                  keep=6, statistics=False)
    assert bare.statistics is None and bare.rates.equals(m.rates)
    assert all(torch.equal(bare.inputs[k], v) for k, v in m.inputs.items())


def test_summary_and_ranking(model, images):
    df = plasticity.measure(model, *images, progress=False)
    s = plasticity.summarize(df)
    assert len(s) == 10 and (s["n"] == 24).all()
    row = s.iloc[0]
    sub = df[(df.layer == row.layer) & (df.component == row.component)]["rate"]
    assert row.plasticity == pytest.approx(sub.mean())
    assert row.ci95 == pytest.approx(1.96 * sub.std() / 24 ** 0.5)
    r = plasticity.ranking(df)
    assert sorted(r["rank"]) == [1, 2, 3, 4, 5]
    assert plasticity.order(r).count(">") == 4


def test_pairs(images):
    x, y = images
    px, py = plasticity.make_pairs(x, y, n_pairs=10).tensors()
    assert torch.equal(px, x[:10]) and torch.equal(py, y[:10])
    within = plasticity.make_pairs(x, n_pairs=50, seed=3)
    wx, _ = within.tensors()
    assert wx.shape == (50, 1, 16, 16) and len(within) == 50
    assert torch.equal(wx, plasticity.make_pairs(x, n_pairs=50, seed=3).tensors()[0])
    with pytest.raises(ValueError, match="differ in shape"):
        plasticity.make_pairs(x, torch.zeros(5, 1, 8, 8))


def test_streamed_pairs_equal_tensors(model, images):
    x, y = images
    labelled = torch.utils.data.TensorDataset(y, torch.zeros(len(y)))  # a dataset source
    pairs = plasticity.make_pairs(x, labelled, n_pairs=20)
    streamed = plasticity.measure(model, pairs, batch_size=6, progress=False)
    direct = plasticity.measure(model, x[:20], y[:20], progress=False)
    assert streamed.equals(direct)


def test_errors(model, images):
    x, y = images
    with pytest.raises(ValueError, match="valid: \\['hidden', 'embedding'\\]"):
        plasticity.measure(model, x, y, protocol="input")
    with pytest.raises(ValueError, match="identical"):
        plasticity.measure(model, x, x.clone(), progress=False)
    with pytest.raises(ValueError, match="no pairs"):
        plasticity.measure(model, x[:0], y[:0])
    with pytest.raises(ValueError, match="as many x as y"):
        plasticity.measure(model, x[:3], y[:2])


def test_hooks_removed_even_after_an_error(model):
    with pytest.raises(RuntimeError):
        with plasticity.hooks(model, lambda key, module, inp, out: None):
            model.forward_features(torch.randn(3, 1, 16, 16))  # odd batch still runs
            raise RuntimeError("boom")
    assert all(not m._forward_hooks for m in model.modules())


def test_unsupported_architectures_fail_clearly():
    import timm

    eva = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, patch_size=14)
    with pytest.raises(TypeError, match="EVA"):
        components.component_modules(eva)
    with pytest.raises(TypeError, match="no `blocks`"):
        components.component_modules(torch.nn.Linear(2, 2))
