"""The suite study's tables on synthetic data: complete tasks, primaries per task."""

import math

import pandas as pd
import pytest

from vitplast import decide, studies

PRIMARIES = studies.get("suite").primaries


def _picked(task, acc):
    return [dict(task=task, config=c, test_acc=a) for c, a in acc.items()]


def test_complete_tasks_are_those_whose_every_search_ended():
    state = pd.DataFrame(dict(task=["a", "a", "b", "b"], next=[[], [], [], [0.3]]))
    assert decide.complete_tasks(state) == ["a"]


def test_primaries_per_task():
    acc = {"head": 60, "MHA": 70, "FC1": 68, "FC2": 66, "LN1": 64, "LN2": 62,
           "MHA sparse": 63, "FC1 sparse": 62, "FC2 sparse": 61}
    picked = pd.DataFrame(_picked("t", acc) + _picked("u", {k: 50 for k in acc}))
    plastic = pd.DataFrame(dict(task="t", component=["MHA", "FC1", "FC2", "LN1", "LN2"],
                                plasticity=[5.0, 4.0, 3.0, 2.0, 1.0]))
    p1, p2, _ = PRIMARIES
    wide = decide.accuracy(picked)
    assert p1.values(wide).to_dict() == {"t": pytest.approx(62 - 63), "u": 0.0}
    assert p2.values(wide).to_dict() == {"t": 70 - 64, "u": 0.0}
    rho = decide.spearman_plasticity_gain(picked, plastic)
    assert rho["t"] == pytest.approx(1.0) and math.isnan(rho["u"])  # no plasticity for u
    flipped = plastic.assign(plasticity=plastic["plasticity"][::-1].to_numpy())
    assert decide.spearman_plasticity_gain(picked, flipped)["t"] == pytest.approx(-1.0)
    rows = decide.findings(studies.get("suite"), picked, plastic)
    assert [r["family"] for r in rows] == ["primary"] * 3 and [r["n"] for r in rows] == [2, 2, 1]


def test_secondary_asks_the_primaries_again_on_the_grid_s_choices():
    gauge = studies.get("gauge")
    acc = {"MHA": 70, "FC2": 60, "full": 80, "MHA c=8": 71, "FC2 c=8": 58, "full c=8": 80}
    on_grid = pd.DataFrame(_picked("t", acc) + _picked("u", {k: 50 for k in acc}))
    rows = decide.secondary(gauge, on_grid)
    assert [r["family"] for r in rows] == ["secondary"] * 3
    assert [r["measured"] for r in rows] == [pytest.approx(-1 / 6), 0.5, -1.0]  # means over t, u
    assert all(r["claim"].endswith("; LR from the fixed grid")
               and "each LR tuned" not in r["claim"] for r in rows)


def test_distance_reads_head_only_and_the_probe():
    picked = pd.DataFrame(_picked("t", {"head": 55.0, "MHA": 70.0}))
    probes = pd.DataFrame(dict(task=["t"], test_acc=[48.0]))
    out = decide.distance(picked, probes)
    assert out.to_dict("records") == [dict(task="t", head_acc=55.0, probe_acc=48.0)]


def test_a_task_s_probe_is_computed_once_and_stored_as_a_companion(tmp_path, monkeypatch):
    from vitplast import probes
    from vitplast.experiments.store import Store

    calls = []

    def fake(model_name, tasks):
        calls.append(tasks)
        return pd.DataFrame([dict(task=tasks[0], train_acc=99.0, val_acc=90.0, test_acc=89.5,
                                  n_train=4000, n_features=128)])

    monkeypatch.setattr(probes, "linear_probes", fake)
    assert decide.task_probes(tmp_path, ["digits"]).empty  # nothing stored, nothing computed
    assert decide.task_probe(tmp_path, "digits")["test_acc"] == 89.5
    table = decide.task_probes(tmp_path, ["digits", "fmnist_invert"])
    assert table.to_dict("records") == [dict(task="digits", test_acc=89.5, val_acc=90.0,
                                             train_acc=99.0)]
    assert calls == [["digits"]]  # read back, not recomputed
    assert Store(tmp_path).audit().empty  # a companion, not a foreign file


def test_the_length_check_reads_p1_and_p2_at_each_length_and_applies_its_rule():
    p1, p2, _ = PRIMARIES
    suite_acc = {"MHA": 70, "LN1": 64, "LN2": 62, "MHA sparse": 63, "FC1 sparse": 62,
                 "FC2 sparse": 61, "head": 50}
    picked = pd.DataFrame(_picked("t", suite_acc) + _picked("u", suite_acc)
                          + _picked("v", suite_acc))  # v: no longer runs, left out
    longer = []
    for k, gap in ((2, 1.0), (4, -8.0)):  # P2 (MHA - LN1): +6 at 1x, +7 at 2x, -2 at 4x
        acc = {f"{c} {k}x": a for c, a in suite_acc.items() if c != "head"}
        acc[f"MHA {k}x"] = 70 + gap
        longer += _picked("t", acc) + _picked("u", acc)
    longer += _picked("w", {"MHA 2x": 1.0, "LN1 2x": 2.0})  # w: no 4x runs yet, left out
    values = decide.by_length(pd.DataFrame(longer), picked, (p1, p2))
    assert set(values["task"]) == {"t", "u"} and set(values["steps"]) == {1, 2, 4}
    p2_means = values[values["primary"] == "P2"].groupby("steps")["value"].mean()
    assert p2_means.to_dict() == {1: 6.0, 2: 7.0, 4: -2.0}
    rule = {r["claim"][:2]: r for r in decide.length_rule(values)}
    assert rule["P2"]["verdict"].startswith("changed") and rule["P2"]["n"] == 2
    assert rule["P2"]["measured"] == "+6.00 (1x), +7.00 (2x), -2.00 (4x)"
    assert rule["P1"]["verdict"].startswith("kept")  # P1's configurations did not move


def _gauge_record(root, lr, losses, test_acc, gauge, config="LN1", task="digits"):
    from vitplast import runs
    from vitplast.experiments.store import Store

    run = runs.make_run(task, config, lr=lr)
    if gauge:
        run = dict(run, prepare="gauge", ablation=dict(c=8.0))
    Store(root).save(run, dict(status="ok", test_acc=test_acc, best_val_acc=test_acc,
                               device="cpu", history=[dict(step=i, loss=v)
                                                      for i, v in enumerate(losses)]))


def test_gauge_pairs_match_the_same_run_at_two_gauges_and_the_checks_read_them(tmp_path):
    _gauge_record(tmp_path, 0.1, [2.0, 1.5, 1.0], 0.70, gauge=False)
    _gauge_record(tmp_path, 0.1, [2.0, 1.5002, 1.0], 0.70, gauge=True)  # stable, the same
    _gauge_record(tmp_path, 1.0, [2.0, 3.0, 1.0], 0.60, gauge=False)  # a spike: unstable
    _gauge_record(tmp_path, 1.0, [2.0, 3.5, 1.2], 0.65, gauge=True)
    _gauge_record(tmp_path, 0.3, [2.0, 1.0, 0.5], 0.72, gauge=False)  # no c = 8 twin
    pairs = decide.gauge_pairs(tmp_path).sort_values("lr").reset_index(drop=True)
    assert pairs[["lr", "loss_rose"]].to_dict("list") == dict(lr=[0.1, 1.0],
                                                             loss_rose=[False, True])
    assert pairs["first_diff"].tolist() == [0.0, 0.0]
    assert pairs["max_loss_diff"].tolist() == pytest.approx([2e-4, 0.5])
    assert pairs["test_diff"].tolist() == pytest.approx([0.0, 5.0])
    picked = pd.DataFrame(_picked("a", {"LN1": 70.0, "LN1 c=8": 70.0, "head": 60.0})
                          + _picked("b", {"LN1": 71.0, "LN1 c=8": 73.0, "head": 61.0}))
    picked["loss_rose"] = [0.0, 1.0, 0.0, 1.0, 1.0, float("nan")]
    first, same, rose, ln1 = decide.gauge_checks(pairs, picked)  # head: no c = 8 column
    assert first["verdict"] == "the same, as derived" and first["n"] == 2
    assert same["measured"] == "0.0002 (LR 0.1), 0.5 (LR 1)"
    assert same["verdict"] == ("the same trajectory up to LR 0.1, as derived; above it the "
                               "pairs part by up to 0.5 from first-step differences of at most "
                               "0: large steps amplify rounding (the pairs ran on cpu)")
    assert (rose["measured"], rose["n"]) == (60.0, 5)
    assert rose["verdict"] == "3 of 5 chosen runs had a training loss that rose above its start"
    assert ln1["measured"] == 1.0 and ln1["n"] == 2
    calm = decide.gauge_checks(pairs.assign(max_loss_diff=[2e-4, 5e-4]), picked)[1]
    assert calm["verdict"] == "the same trajectory at every LR stored (up to 1), as derived"
    broken = decide.gauge_checks(pairs.assign(max_loss_diff=[0.01, 0.5], first_diff=[0.01, 0]),
                                 picked)
    assert broken[0]["verdict"].startswith("not the same: the derivation")
    assert broken[1]["verdict"].startswith("not the same at any LR stored")
    assert decide.gauge_checks(pairs.iloc[:0], picked)[0]["verdict"] == "no pair stored yet"


def test_relative_plasticity_is_a_companion_beside_plasticity_with_its_own_hash(tmp_path,
                                                                               monkeypatch):
    """The same mechanism (plasticity-<hash>.json): relative plasticity's settings add
    ``quantity``, so plasticity's stored files keep their names; measured once, read back,
    never measured with ``compute=False``; an unknown quantity names the valid ones."""
    from vitplast import empirical, relative, store
    from vitplast.experiments.store import Store

    calls = []

    def fake(tasks, *, protocol, n_pairs):
        calls.append((tasks, protocol))
        return pd.DataFrame([dict(task=tasks[0], layer=0, component=c, relative_plasticity=r,
                                  plasticity=2 * r, s_in=1.0, s_out=2.0)
                             for c, r in zip(["LN1", "MHA", "LN2", "FC1", "FC2"], range(1, 6))])

    monkeypatch.setattr(relative, "embedded_layers", fake)
    monkeypatch.setattr(empirical, "embedded_layers", lambda *a, **k: pytest.fail("measured"))
    assert decide.component_plasticity(tmp_path, ["digits"], 8, "hidden", "relative",
                                       compute=False).empty
    got = decide.component_plasticity(tmp_path, ["digits"], 8, "hidden", "relative")
    assert got.set_index("component")["relative_plasticity"].to_dict() == dict(
        LN1=1, MHA=2, LN2=3, FC1=4, FC2=5)
    decide.task_plasticity(tmp_path, "digits", 8, "hidden", "relative")  # read back
    assert calls == [(["digits"], "hidden")]
    plain = store.config_hash(dict(task="digits", n_pairs=8, protocol="hidden"))
    assert not (tmp_path / f"plasticity-{plain}.json").exists()
    assert Store(tmp_path).audit().empty
    with pytest.raises(ValueError, match="valid: \\['plasticity', 'relative'\\]"):
        decide.task_plasticity(tmp_path, "digits", quantity="relative plasticity")
    rho = decide.spearman_plasticity_gain(pd.DataFrame(
        [dict(task="digits", config=c, test_acc=a) for c, a in
         zip(["head", "LN1", "MHA", "LN2", "FC1", "FC2"], [50, 51, 52, 53, 54, 55])]),
        got, value="relative_plasticity")
    assert rho["digits"] == pytest.approx(1.0)
