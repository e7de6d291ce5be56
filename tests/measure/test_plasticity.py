"""The estimator: one streamed pass gives rates, statistics and inputs; summaries; streamed
pairs; errors. Pairs themselves: ``test_pairs.py``; one batch's rates (hooks, protocols,
chunked distances): ``test_rates.py``."""

import pytest
import torch
from helpers import direct_rates

from vitplast.measure import components, pairs, plasticity, rates
from vitplast.measure.pairs import make_pairs


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


@pytest.mark.parametrize("protocol", pairs.PROTOCOLS)
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
    stats = direct_statistics(model, rates.component_inputs(
        model, torch.cat([x[kept], y[kept]]), protocol))
    assert len(m.statistics) == 10
    for row in m.statistics.to_dict("records"):
        expected = stats[(row["layer"], row["component"])]
        assert {k for k, v in row.items() if v == v} == {"layer", "component", *expected}
        for k, v in expected.items():
            assert row[k] == pytest.approx(v, rel=1e-5, abs=1e-9), (row["layer"], k)
    first = rates.component_inputs(model, x[kept[:6]], protocol)
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


def test_streamed_pairs_equal_tensors(model, images):
    x, y = images
    labelled = torch.utils.data.TensorDataset(y, torch.zeros(len(y)))  # a dataset source
    pairs = make_pairs(x, labelled, n_pairs=20)
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
