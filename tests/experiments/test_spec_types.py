"""Study specs as frozen values: fields, not dict keys; at most three primaries."""

import dataclasses

import pytest

from vitplast.experiments import study_specs
from vitplast.experiments.spec_types import Grid


def test_a_spec_is_frozen_and_caps_its_primaries():
    spec = Grid(tasks=("digits",), lrs={"head": (0.1,)}, seeds=(0,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.tasks = ("fmnist_contrast",)
    assert spec.fixed == {} and spec.primaries == ()
    four = study_specs.MAIN_PRIMARIES + study_specs.MAIN_PRIMARIES[:1]
    with pytest.raises(ValueError, match="declares 4 primaries; at most 3"):
        Grid(tasks=("digits",), lrs={}, seeds=(0,), primaries=four)


def test_the_task_pair_and_the_start_lrs_are_written_once():
    """The studies that start from the pair (hardest shift, new domain) and from the suite's
    start LRs read them from one place."""
    pair = study_specs.PAIR
    assert study_specs.MAIN.tasks[:2] == study_specs.BUDGET.tasks == pair
    assert study_specs.CONFOUNDS.scale_tasks == study_specs.CONFOUND_TASKS[:2] == pair
    assert study_specs.LENGTH.tasks[:2] == pair
    gauge = study_specs.GAUGE.configs
    assert all(gauge[c] == study_specs.STARTS[c] for c in ("head", "LN1", "MHA", "FC2"))
