"""Sweeps: the store by hash, resume after a kill, divergence and failure recorded, executors,
and run selection (``vitplast.experiments.sweep``)."""

import json
import math

import pytest
import torch
from helpers import TINIER, TINY

from vitplast import files
from vitplast.experiments import results, runner, runs, sweep
from vitplast.experiments.runs import run_hash
from vitplast.experiments.store import Store
from vitplast.report import finetuning_tables
from vitplast.train import ablations


def test_a_real_run_is_stored_under_its_hash_and_not_rerun(tmp_path, monkeypatch):
    config = runs.make_run("digits", "MHA", lr=1e-2, **TINY)
    summary = sweep.run_sweep([config, config], tmp_path, device="cpu", progress=False).table
    path = tmp_path / f"{run_hash(config)}.json"
    # no claim nor temp file left: only the record and the store's (git-ignored) lock file
    assert {p.name for p in tmp_path.iterdir()} == {"claims.lock", path.name}
    assert path.stat().st_mode & 0o777 == 0o644  # readable by all, like any plain file
    record = json.loads(path.read_text())
    assert record["run"] == config and record["status"] == "ok"
    assert 0.0 <= record["test_acc"] <= 1.0 and 0.0 <= record["best_val_acc"] <= 1.0
    assert record["best_step"] == 1 and record["device"] == "cpu"
    assert 0.0 <= record["initial_val_acc"] <= 0.3  # a new head: about chance before training
    # MHA (qkv, proj) of 6 blocks + the new head + the final norm
    assert record["trainable"] == 6 * (128 * 384 + 384 + 128 * 128 + 128) + 1290 + 256
    assert [h["step"] for h in record["history"]] == [0, 1] and "val_acc" in record["history"][1]
    assert record["machine"].endswith("cores") and record["torch"] == torch.__version__
    assert len(summary) == 1 and summary.loc[0, "run"] == path.stem

    curves = results.history(tmp_path)
    assert list(curves.columns) == ["run", "step", "metric", "value"]
    assert len(curves) == sum(len(h) - 1 for h in record["history"])
    val = curves[curves.metric == "val_acc"]
    assert val["value"].tolist() == [record["best_val_acc"]] and val["step"].tolist() == [1]

    monkeypatch.setattr(runner, "run_lrs", lambda *a, **k: pytest.fail("re-ran a stored run"))
    again = sweep.run_sweep([config], tmp_path, progress=False).table
    assert again.loc[0, "test_acc"] == record["test_acc"]


def test_resume_after_a_kill_loses_and_duplicates_nothing(tmp_path, fake_train):
    configs = [runs.make_run("digits", lr=lr, **TINY) for lr in (1, 2, 3, 4, 5)]
    fake_train.kill_at = 3
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(configs, tmp_path, progress=False)
    assert len(fake_train.calls) == 3
    assert sorted(results.records_table(tmp_path)["lr"]) == [1, 2]
    # debris of a kill: a half-written temp file, a truncated record of the 4th run
    (tmp_path / f".{run_hash(configs[2])}.json.x.tmp").write_text('{"run": {')
    full = json.dumps({"run": configs[3], "status": "ok"})
    Store(tmp_path).path(configs[3]).write_text(full[: len(full) // 2])
    assert sorted(results.records_table(tmp_path)["lr"]) == [1, 2]

    done = sweep.run_sweep(configs, tmp_path, progress=False)  # the same sweep again
    summary = done.table
    assert [kw["lr"] for _, kw in fake_train.calls[3:]] == [3, 4, 5]  # first two not re-run
    table = results.records_table(tmp_path)
    assert sorted(table["lr"]) == [1, 2, 3, 4, 5] and table["run"].is_unique
    assert summary["lr"].tolist() == [1, 2, 3, 4, 5] and (summary["status"] == "ok").all()
    assert done.complete and done.trained == 3
    assert done.says() == "complete: 5 of 5 runs stored (5 ok, 0 diverged)"


def test_the_preparations_are_read_only_and_a_job_uses_those_it_is_given(tmp_path, fake_train):
    """``ablations.PREPARE`` cannot be patched; a job (``run_pack``, what a cluster runs) uses
    the preparations it receives with its pack, nothing set in another process."""
    with pytest.raises(TypeError):
        ablations.PREPARE["mark"] = lambda m, c: None
    with pytest.raises(TypeError):
        del ablations.PREPARE["gauge"]
    config = runs.make_run("digits", "LN2", lr=0.5, seed=3, prepare="mark",
                           ablation={"c": 2}, **TINY)
    marked = {**ablations.PREPARE, "mark": lambda m, c: setattr(m, "mark", c["ablation"])}
    store = Store(tmp_path)
    assert sweep.run_pack([[(config, None)]], store, "cpu", preparations=marked) == ["ok"]
    assert fake_train.calls[-1][0].mark == {"c": 2}
    assert "mark" not in ablations.PREPARE


def test_diverged_and_failed_runs_are_recorded_and_the_sweep_goes_on(tmp_path):
    diverge = runs.make_run("digits", lr=1e30, clip_grad_norm=None, **TINY)
    fail = runs.make_run("digits", ["nothing.*"], lr=1e-2, train_head=False, **TINY)
    ok = runs.make_run("digits", "LN1", lr=1e-2, **TINIER)
    done = sweep.run_sweep([diverge, fail, ok], tmp_path, device="cpu", progress=False)
    summary = done.table
    assert summary["status"].tolist() == ["diverged", "failed", "ok"]
    assert not done.complete and done.counts == dict(ok=1, diverged=1, failed=1, missing=0)
    assert done.says() == ("incomplete: 0 of 3 runs not stored, 1 stored failed (1 ok, 1 "
                           "diverged); to resume: the same sweep with retry_failed=True")
    assert "ValueError: configuration ['nothing.*'] selects no parameter" in summary["error"][1]
    assert math.isnan(summary["test_acc"][0]) and math.isnan(summary["test_acc"][1])
    text = Store(tmp_path).path(diverge).read_text()
    record = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert record["history"][-1]["loss"] is None and record["test_acc"] is None
    table = results.records_table(tmp_path)
    assert set(table["status"]) == {"diverged", "failed", "ok"}
    main = finetuning_tables.main_table(table)  # a real table: None and list-valued settings
    assert main["task"].tolist() == ["digits"] * 3 + ["average"] * 3  # 3 settings
    ok_acc = 100 * summary["test_acc"][2]
    for task in ("digits", "average"):
        acc = main[main.task == task].set_index("config")["test_acc_mean"]
        assert math.isnan(acc["full"]) and math.isnan(acc['["nothing.*"]'])
        assert acc["LN1"] == pytest.approx(ok_acc)


@pytest.mark.parametrize("cluster", ["debug", pytest.param("local", marks=pytest.mark.slow)])
def test_submitit_jobs_store_their_own_records(tmp_path, cluster):
    """debug: in this process; local: one subprocess per job (~20 s on 2 busy cores)."""
    pytest.importorskip("submitit")
    configs = [runs.make_run("digits", c, lr=1e-2, **TINIER) for c in ("LN1", "FC2")]
    summary = sweep.run_sweep(configs, tmp_path / "runs", executor="submitit", cluster=cluster,
                              folder=tmp_path / "logs", timeout_min=5, slurm_partition="gpu",
                              device="cpu", progress=False).table
    assert summary["status"].tolist() == ["ok", "ok"]
    assert all(Store(tmp_path / "runs").has(c) for c in configs)
    assert list((tmp_path / "logs").iterdir())  # submitit's job files went there


def test_unknown_executor_names_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="valid: \\['serial', 'submitit'\\]"):
        sweep.run_sweep([], tmp_path, executor="slurm")


BAD_SETTINGS = [("clip_grad_norm", -1.0, r"clip_grad_norm=-1.0 is not valid: expected a "
                                         r"number >= 0, or null"),
                ("momentum", 1.5, r"momentum=1.5 is not valid: expected a number >= 0 and < 1"),
                ("weight_decay", -0.1, r"weight_decay=-0.1 is not valid: expected a number >= 0"),
                ("label_smoothing", 1.5, r"label_smoothing=1.5 is not valid"),
                ("batch_size", 1151, r"batch_size=1151 is larger than the training split of "
                                     r"task 'digits' \(1150 images\); batch_size takes an "
                                     r"integer from 1 to 1150 here")]


@pytest.mark.parametrize("key, value, message", BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
def test_bad_settings_are_refused_when_the_sweep_is_planned(tmp_path, fake_train, key, value,
                                                            message):
    """Refused before any run trains, naming the run, the setting and its range: nothing is
    recorded (not even as failed), nothing trained; the good run beside it waits too."""
    good = runs.make_run("digits", "LN1", lr=0.3, **TINY)
    bad = {**runs.make_run("digits", "full", lr=0.3, **TINY), key: value}
    with pytest.raises(ValueError, match=message):
        sweep.run_sweep([good, bad], tmp_path, progress=False)
    assert fake_train.calls == [] and Store(tmp_path).records() == []
    assert not list(tmp_path.glob("*.json"))
    at_the_edge = {**bad, "batch_size": 1150} if key == "batch_size" else good
    edge = sweep.run_sweep([at_the_edge], tmp_path, progress=False)
    assert edge.table["status"].tolist() == ["ok"] and edge.complete


def test_a_batched_sweep_stores_what_one_by_one_stores(tmp_path):
    """``batch_lrs``: the runs of one setting that differ in LR train together
    (``vitplast.train.batched``) into records equal to separate runs' (losses within 1e-5), each
    saying how many trained with it; a run another process claims is left to it; runs the
    batched path refuses (AdamW) train one by one."""
    lrs = (0.01, 0.1, 1.0)
    configs = [runs.make_run("digits", "LN1", lr=lr, **TINY) for lr in lrs]
    adamw = runs.make_run("digits", "LN1", lr=0.01, optimizer="adamw", **TINY)
    with Store(tmp_path / "b").claim(configs[2]):  # another process holds the third
        sweep.run_sweep(configs + [adamw], tmp_path / "b", progress=False, batch_lrs=True)
    assert not Store(tmp_path / "b").has(configs[2])
    sweep.run_sweep(configs, tmp_path / "a", progress=False)
    for c in configs[:2]:
        one, batch = (files.read_json(Store(tmp_path / s).path(c)) for s in "ab")
        assert batch["batched"] == 2 and "batched" not in one
        assert batch["test_acc"] == one["test_acc"] and batch["status"] == one["status"] == "ok"
        assert [r["loss"] for r in batch["history"]] == pytest.approx(
            [r["loss"] for r in one["history"]], abs=1e-5)
    assert files.read_json(Store(tmp_path / "b").path(adamw))["status"] == "ok"
    assert "batched" not in files.read_json(Store(tmp_path / "b").path(adamw))
    with pytest.raises(ValueError, match="differ only in their lr"):
        runner.run_lrs([configs[0], adamw])
