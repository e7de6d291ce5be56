"""The studies' specs (``vitplast.experiments.study_specs``): the main grids are half-decade
ladders, the confound and gauge studies run on the tasks they say, and the recipe-length check is P1
and P2's configurations at two and four times the steps. ``studies.STUDIES`` holds these values."""

from dataclasses import replace

import pytest

from vitplast.datasets import suite
from vitplast.experiments import runs, studies, study_specs
from vitplast.experiments.kinds import grid_runs
from vitplast.experiments.search import LR_LADDER


def test_main_study_grids_are_half_decade_ladders_per_configuration():
    main = studies.get("main").spec
    assert set(main.lrs) == {"full", "head", "LN1", "MHA", "LN2", "FC1", "FC2"}
    for lrs in main.lrs.values():
        assert lrs == sorted(lrs) and set(lrs) <= set(LR_LADDER)
        steps = [b / a for a, b in zip(lrs, lrs[1:])]
        assert all(s == pytest.approx(10 / 3) or s == pytest.approx(3) for s in steps)
    configs = grid_runs(main)
    assert len(configs) == len(main.tasks) * len(main.seeds) * sum(
        len(v) for v in main.lrs.values())
    assert len({runs.run_hash(c) for c in configs}) == len(configs)


def test_the_registry_holds_the_specs_and_their_primaries():
    assert studies.get("main").spec is study_specs.MAIN
    assert studies.get("suite").primaries == study_specs.SUITE_PRIMARIES
    assert studies.get("main-smoke").spec is study_specs.MAIN_SMOKE
    assert study_specs.MAIN_SMOKE == replace(study_specs.MAIN, tasks=("fmnist_contrast",),
                                             seeds=(0,), lrs=study_specs.MAIN_SMOKE.lrs,
                                             fixed=study_specs.SMOKE_RUN)
    # the smoke study's runs, and its probe, build the task's small splits; the main study's
    # keep the defaults (its shipped probes are read as they are)
    assert studies.get("main-smoke").task_options == dict(train_size=160, test_size=64)
    assert studies.get("main").task_options == {}
    assert study_specs.ladder(0.03, 3.0) == [0.03, 0.1, 0.3, 1.0, 3.0]


def test_the_confound_and_gauge_studies_run_on_the_tasks_they_say():
    main_tasks = study_specs.MAIN.tasks
    assert len(study_specs.CONFOUND_TASKS) == 5 and set(study_specs.CONFOUND_TASKS) == set(
        main_tasks) - {"fmnist_motion_blur", "fmnist_speckle_noise"}
    gauge = study_specs.GAUGE
    assert gauge.tasks == tuple(suite.SUITE)[::2] and len(gauge.tasks) == 17
    gauged = {k: v for k, v in gauge.configs.items() if k.endswith("c=8")}
    assert len(gauged) == 5 and all(v["prepare"] == "gauge" and v["ablation"] == dict(c=8.0)
                                    for v in gauged.values())


def test_the_recipe_length_check_is_p1_and_p2_at_two_and_four_times_the_steps():
    """The length study: the configurations of the suite study's P1 and P2, each at 240 and
    480 steps (warm-up scaled alike), the sparse ones the suite's own variants (same masks
    and count), from the suite's start LRs, on four tasks of four families."""
    from vitplast.datasets import suite
    from vitplast.experiments import search

    length, suite_spec = studies.get("length").spec, studies.get("suite").spec
    settings = search.settings(length)
    assert len(settings) == 4 * 6 * 2
    assert {suite.SUITE[t].family for t in length.tasks} >= {
        "shift", "digits", "drawn"}
    suite_sparse = {s["name"]: s for s in search.settings(
        replace(suite_spec, tasks=("digits",)))}
    for s in settings:
        name, length = s["name"].rsplit(" ", 1)
        k = {"2x": 2, "4x": 4}[length]
        assert (s["steps"], s["warmup_steps"]) == (120 * k, 12 * k)
        assert s["start"] == suite_spec.configs[name] == study_specs.STARTS[name]
        if name.endswith("sparse"):
            assert s["ablation"] == suite_sparse[name]["ablation"]
