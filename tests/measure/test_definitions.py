"""Definition 1 on functions one can check by hand (``vitplast.measure.definitions``): a linear
map's rates lie between its smallest and largest singular values, with sqrt(mean sigma^2) exact;
LayerNorm's plasticity falls exactly as 1/scale while a linear map's does not move; every 1-D
map's rates stay below its Lipschitz constant."""

import math

import pytest
import torch

from vitplast.measure import definitions


def test_a_linear_map_s_rates_lie_between_its_singular_values():
    layer = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.diag(torch.tensor([3.0, 1.0])))
    value = dict(definitions.linear_table(layer).itertuples(index=False))
    assert value["sqrt(mean sigma^2)"] == pytest.approx(math.sqrt(5))
    assert value["Lipschitz = sigma_max"] == pytest.approx(3.0)
    assert value["sigma_min"] == pytest.approx(1.0)
    assert 1.0 <= value["plasticity (mean rate)"] <= math.sqrt(5)  # Jensen: below the RMS
    assert value["max observed rate"] <= 3.0 + 1e-6


def test_layernorm_plasticity_falls_as_one_over_the_scale_a_linear_map_s_does_not():
    torch.manual_seed(0)
    modules = {"LayerNorm": torch.nn.LayerNorm(8, eps=0.0), "linear": torch.nn.Linear(8, 8)}
    table = definitions.scale_table(modules, (4, 8), [1.0, 10.0], n=64)
    p = table.set_index(["module", "scale"])["plasticity"]
    assert p[("LayerNorm", 10.0)] == pytest.approx(p[("LayerNorm", 1.0)] / 10, rel=1e-5)
    # the same draws scaled: a linear map's bias cancels in f(x) - f(y)
    assert p[("linear", 10.0)] == pytest.approx(p[("linear", 1.0)], rel=1e-5)


def test_every_1d_map_s_rates_stay_below_its_lipschitz_constant():
    table = definitions.maps_1d_table([0.3, 3.0], n=500)
    assert len(table) == 2 * len(definitions.MAPS_1D)
    assert (table["plasticity"] <= table["max_rate"]).all()
    assert (table["max_rate"] <= table["lipschitz"] * (1 + 1e-5)).all()
