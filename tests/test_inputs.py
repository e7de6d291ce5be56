"""Argument checks (``vitplast.inputs``): counts, seeds and positive numbers are accepted as
documented and anything else fails naming the argument (and the hint, where given)."""

import math

import numpy as np
import pytest
import torch

from vitplast import inputs


def test_counts_are_integers_at_least_their_minimum():
    assert inputs.check_count("steps", np.int64(3)) == 3
    assert type(inputs.check_count("steps", np.int64(3))) is int
    assert inputs.check_count("workers", 0, minimum=0) == 0
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"steps=.* takes an integer >= 1; e\.g\. 120"):
            inputs.check_count("steps", bad, hint="e.g. 120")


def test_seeds_are_any_integer_and_rates_finite_positive_numbers():
    assert inputs.check_seed("seed", -1) == -1
    for bad in (True, 0.0, "0"):
        with pytest.raises(ValueError, match="seed=.* takes an integer"):
            inputs.check_seed("seed", bad)
    assert inputs.check_positive("lr", 1e-3) == 1e-3
    for bad in (0, -1.0, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="lr=.* takes a finite number > 0"):
            inputs.check_positive("lr", bad)


def test_tensors_follow_a_module_and_a_plain_function_takes_them_as_they_are():
    assert inputs.model_device(lambda t: t) is None
    assert inputs.model_device(torch.nn.ReLU()) is None  # no tensors: nothing to follow
    norm = torch.nn.BatchNorm1d(2, affine=False)  # buffers only
    assert inputs.model_device(norm) == torch.device("cpu")
    x, y = torch.zeros(1, 2), torch.ones(1, 2)
    assert inputs.to_model(lambda t: t, x) is x  # one tensor in, one out
    moved = inputs.to_model(torch.nn.Linear(2, 2), x, y)  # already there: as they are
    assert isinstance(moved, tuple) and moved[0] is x and moved[1] is y


def test_a_device_this_machine_lacks_is_refused_naming_what_is_there(monkeypatch):
    assert inputs.check_device(None) is None  # CUDA when available, decided later
    assert inputs.check_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"device 'gpu' is not a device .*valid: cpu, cuda"):
        inputs.check_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device 'cuda:1': no CUDA GPU is available here"):
        inputs.check_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert inputs.check_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match="device 'cuda:1': only 1 CUDA device"):
        inputs.check_device("cuda:1")
