"""Study presets: their runs, the budget check's LRs, reading a study from a store."""

import pandas as pd
import pytest

from vitplast import runs, store, studies


def test_main_study_grids_are_half_decade_ladders_per_configuration():
    main = studies.MAIN
    assert set(main["lrs"]) == {"full", "head", "LN1", "MHA", "LN2", "FC1", "FC2"}
    for lrs in main["lrs"].values():
        assert lrs == sorted(lrs) and set(lrs) <= set(studies.LR_LADDER)
        steps = [b / a for a, b in zip(lrs, lrs[1:])]
        assert all(s == pytest.approx(10 / 3) or s == pytest.approx(3) for s in steps)
    configs = studies.runs_of(main)
    assert len(configs) == len(main["tasks"]) * len(main["seeds"]) * sum(
        len(v) for v in main["lrs"].values())
    assert len({runs.run_hash(c) for c in configs}) == len(configs)


def test_unknown_study_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: \\['main', 'smoke'\\]"):
        studies.get("mian")


def test_budget_runs_take_the_chosen_lr_and_its_grid_neighbours():
    rows = []
    for config, lrs in studies.MAIN["lrs"].items():
        best = lrs[0] if config == "head" else lrs[3]  # head at its grid's bottom edge
        for c in studies.runs_of(dict(studies.MAIN, tasks=["digits"], lrs={config: lrs})):
            rows.append(dict(run=runs.run_hash(c), task=c["task"], config=config, lr=c["lr"],
                             seed=c["seed"], status="ok", test_acc=0.5,
                             best_val_acc=0.9 if c["lr"] == best else 0.5))
    budget = studies.budget_runs(pd.DataFrame(rows))
    got = {}
    for c in budget:
        got.setdefault(c["config"], set()).add(c["lr"])
        assert c["steps"] == 480 and c["task"] == "digits"
    for config, lrs in studies.MAIN["lrs"].items():
        assert got[config] == (set(lrs[:2]) if config == "head" else set(lrs[2:5]))


def test_load_reads_only_the_study_runs_of_a_store(tmp_path):
    smoke = studies.runs_of(studies.SMOKE)
    for c in smoke[:3]:
        store.save_run(tmp_path, c, dict(status="ok", test_acc=0.5, best_val_acc=0.5))
    other = runs.run_config("digits", "MHA", lr=7.0)
    store.save_run(tmp_path, other, dict(status="ok", test_acc=0.5, best_val_acc=0.5))
    s = studies.load("smoke", str(tmp_path))
    assert len(s.runs) == 3 and s.coverage == {"expected": len(smoke), "ok": 3,
                                               "missing": len(smoke) - 3}
    assert s.budget.empty and s.root == str(tmp_path)
