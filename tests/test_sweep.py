"""Sweeps: grids, the store by hash, resume after a kill, divergence, executors, tables."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_vit

from vitplast import finetune, models, paper_datasets, provenance, results, store, studies, sweep, tasks
from vitplast.runs import TRAIN_KEYS, run_hash

#: A random embedded ViT on digits, a few steps: seconds on a CPU.
TINY = dict(pretrained=False, steps=2, batch_size=16, eval_every=100)
#: A smaller random timm ViT, for runs whose numbers the test does not read.
TINIER = dict(TINY, model="vit_tiny_patch16_224", model_kwargs=dict(
    img_size=28, patch_size=7, in_chans=1, embed_dim=32, depth=1, num_heads=2))


class FakeTrain:
    """Stands in for ``finetune.train``: records (model, kwargs) per call, and raises
    ``KeyboardInterrupt`` at call number ``kill_at`` (a sweep killed during that run)."""

    def __init__(self):
        self.calls, self.kill_at = [], None

    def __call__(self, model, train_set, val_set, test_set, **kwargs):
        self.calls.append((model, kwargs))
        if len(self.calls) == self.kill_at:
            raise KeyboardInterrupt
        return finetune.TrainResult(history=[{"step": 0, "loss": 1.5}], best_val_acc=0.5,
                                    best_step=0, test_acc=0.25, trainable=7)


@pytest.fixture
def fake_train(monkeypatch):
    fake = FakeTrain()
    monkeypatch.setattr(finetune, "train", fake)
    return fake


def test_grid_size_order_and_recipes():
    configs = sweep.grid(["digits", "fmnist"], ["full", "MHA", ["blocks.0.attn.*"]],
                         [1e-2, 1e-3], [0, 1], **TINY)
    assert len(configs) == 2 * 3 * 2 * 2
    assert len({run_hash(c) for c in configs}) == 24
    assert [(c["task"], c["config"], c["lr"], c["seed"]) for c in configs[:5]] == [
        ("digits", "full", 1e-2, 0), ("digits", "full", 1e-2, 1), ("digits", "full", 1e-3, 0),
        ("digits", "full", 1e-3, 1), ("digits", "MHA", 1e-2, 0)]
    assert configs[8]["config"] == ["blocks.0.attn.*"] and configs[-1]["task"] == "fmnist"
    c = configs[0]
    for key in ("kind", "model", "checkpoint", "task", "severity", "train_size", "config",
                "train_head", "optimizer", "lr", "seed", "steps", "batch_size", "warmup_steps",
                "momentum", "weight_decay", "clip_grad_norm", "eval_every"):
        assert key in c, key
    assert c["warmup_steps"] == finetune.RECIPES["embedded"]["warmup_steps"]
    assert c["steps"] == 2 and c["pretrained"] is False and c["kind"] == "finetune"
    assert json.loads(json.dumps(c)) == c
    paper = sweep.run_config("pet", "LN1", lr=1e-3, recipe="paper", data_root="/data",
                             ablation={"c": 2.0})
    assert paper["steps"] == paper_datasets.PAPER_STEPS["pet"]
    assert paper["batch_size"] == finetune.RECIPES["paper"]["batch_size"]
    assert paper["ablation"] == {"c": 2.0} and "ablation" not in c
    with pytest.raises(ValueError, match="valid: \\['paper', 'embedded'\\]"):
        sweep.run_config("digits", lr=1.0, recipe="fast")
    with pytest.raises(ValueError, match="unknown task 'pet'.*data_root"):
        sweep.run_config("pet", lr=1.0)
    with pytest.raises(ValueError, match="unknown configuration 'attention'"):
        sweep.run_config("digits", "attention", lr=1.0)


def test_a_real_run_is_stored_under_its_hash_and_not_rerun(tmp_path, monkeypatch):
    config = sweep.run_config("digits", "MHA", lr=1e-2, **TINY)
    summary = sweep.run_sweep([config, config], tmp_path, device="cpu", progress=False)
    path = tmp_path / f"{run_hash(config)}.json"
    # no claim nor temp file left: only the record and the store's (git-ignored) lock file
    assert {p.name for p in tmp_path.iterdir()} == {"claims.lock", path.name}
    assert path.stat().st_mode & 0o777 == 0o644  # readable by all, like any plain file
    record = json.loads(path.read_text())
    assert record["config"] == config and record["status"] == "ok"
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

    monkeypatch.setattr(sweep, "run_one", lambda *a, **k: pytest.fail("re-ran a stored run"))
    again = sweep.run_sweep([config], tmp_path, progress=False)
    assert again.loc[0, "test_acc"] == record["test_acc"]


def test_resume_after_a_kill_loses_and_duplicates_nothing(tmp_path, fake_train):
    configs = [sweep.run_config("digits", lr=lr, **TINY) for lr in (1, 2, 3, 4, 5)]
    fake_train.kill_at = 3
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(configs, tmp_path, progress=False)
    assert len(fake_train.calls) == 3
    assert sorted(results.results(tmp_path)["lr"]) == [1, 2]
    # debris of a kill: a half-written temp file, a truncated record of the 4th run
    (tmp_path / f".{run_hash(configs[2])}.json.x.tmp").write_text('{"config": {')
    full = json.dumps({"config": configs[3], "status": "ok"})
    store.run_path(tmp_path, configs[3]).write_text(full[: len(full) // 2])
    assert sorted(results.results(tmp_path)["lr"]) == [1, 2]

    summary = sweep.run_sweep(configs, tmp_path, progress=False)  # the same sweep again
    assert [kw["lr"] for _, kw in fake_train.calls[3:]] == [3, 4, 5]  # first two not re-run
    table = results.results(tmp_path)
    assert sorted(table["lr"]) == [1, 2, 3, 4, 5] and table["run"].is_unique
    assert summary["lr"].tolist() == [1, 2, 3, 4, 5] and (summary["status"] == "ok").all()


def test_run_one_passes_the_config_and_seeds_the_new_head(fake_train, monkeypatch):
    config = sweep.run_config("digits", "LN2", lr=0.5, seed=3, optimizer="adamw",
                              **{**TINY, "pretrained": True})
    record = sweep.run_one(config)
    assert record["status"] == "ok" and record["test_acc"] == 0.25
    model, kwargs = fake_train.calls[0]
    expected = {k: config[k] for k in TRAIN_KEYS if k in config}
    expected["betas"] = (0.9, 0.999)
    assert {k: kwargs[k] for k in expected} == expected
    assert kwargs["device"] == torch.device("cpu") and model.head.out_features == 10
    sweep.run_one(config)
    sweep.run_one({**config, "seed": 4})
    heads = [m.head.weight for m, _ in fake_train.calls]
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])
    # a new head although the task has as many classes as the pretrained one; norm kept
    pretrained = models.load_model(models.EMBEDDED_NAME, pretrained=True)
    assert pretrained.head.out_features == 10 and not torch.equal(heads[0], pretrained.head.weight)
    assert not torch.allclose(fake_train.calls[0][0].head.bias, pretrained.head.bias)
    assert torch.equal(fake_train.calls[0][0].norm.weight, pretrained.norm.weight)

    monkeypatch.setitem(sweep.PREPARE, "mark", lambda m, c: setattr(m, "mark", c["ablation"]))
    sweep.run_one({**config, "prepare": "mark", "ablation": {"c": 3}})
    assert fake_train.calls[-1][0].mark == {"c": 3}
    failed = sweep.run_one({**config, "prepare": "nope"})
    assert failed["status"] == "failed" and "valid: [" in failed["error"]
    assert "'mark'" in failed["error"] and "'rescale_ln'" in failed["error"]
    with pytest.raises(ValueError, match="unknown prepare \\['nope'\\]; valid: \\['lora', 'mark'"):
        sweep.run_sweep([{**config, "prepare": "nope"}], "unused", progress=False)


def test_diverged_and_failed_runs_are_recorded_and_the_sweep_goes_on(tmp_path):
    diverge = sweep.run_config("digits", lr=1e30, clip_grad_norm=None, **TINY)
    fail = sweep.run_config("digits", ["nothing.*"], lr=1e-2, train_head=False, **TINY)
    ok = sweep.run_config("digits", "LN1", lr=1e-2, **TINIER)
    summary = sweep.run_sweep([diverge, fail, ok], tmp_path, device="cpu", progress=False)
    assert summary["status"].tolist() == ["diverged", "failed", "ok"]
    assert "ValueError: configuration ['nothing.*'] selects no parameter" in summary["error"][1]
    assert math.isnan(summary["test_acc"][0]) and math.isnan(summary["test_acc"][1])
    text = store.run_path(tmp_path, diverge).read_text()
    record = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert record["history"][-1]["loss"] is None and record["test_acc"] is None
    table = results.results(tmp_path)
    assert set(table["status"]) == {"diverged", "failed", "ok"}
    main = results.main_table(table)  # a real table: None and list-valued settings
    assert main["task"].tolist() == ["digits"] * 3 + ["average"] * 3  # 3 settings
    ok_acc = 100 * summary["test_acc"][2]
    for task in ("digits", "average"):
        acc = main[main.task == task].set_index("config")["test_acc_mean"]
        assert math.isnan(acc["full"]) and math.isnan(acc['["nothing.*"]'])
        assert acc["LN1"] == pytest.approx(ok_acc)


def _synthetic(rows):
    """A results-like table from (task, config, lr, seed, status, best_val_acc, test_acc)."""
    return pd.DataFrame(rows, columns=["task", "config", "lr", "seed", "status", "best_val_acc",
                                       "test_acc"])


def test_select_lr_on_validation_not_test():
    rows = [  # (val, test): 1e-2 is better on validation, 1e-3 on test
        ("digits", "MHA", 1e-2, 0, "ok", 0.90, 0.70), ("digits", "MHA", 1e-3, 0, "ok", 0.80, 0.95),
        ("digits", "MHA", 1e-2, 1, "ok", 0.92, 0.72), ("digits", "MHA", 1e-3, 1, "ok", 0.82, 0.97),
        # missing, not zero nor one:
        ("digits", "MHA", 3e-2, 0, "diverged", 1.0, float("nan")),  # val before diverging
        ("digits", "MHA", 1e-2, 2, "failed", float("nan"), 0.0)]
    df = _synthetic(rows)
    by_val = results.select_lr(df)
    assert by_val[["task", "config", "lr", "n_seeds", "selected_on"]].values.tolist() == [
        ["digits", "MHA", 1e-2, 2, "val"]]
    assert by_val["selection_score"][0] == pytest.approx(0.91)
    by_test = results.select_lr(df, on="test")
    assert by_test["lr"].tolist() == [1e-3] and by_test["selected_on"].tolist() == ["test"]
    assert by_test["selection_score"][0] == pytest.approx(0.96)
    with pytest.raises(ValueError, match="'val' or 'test'"):
        results.select_lr(df, on="train")
    # an extra config key given to some runs only (None elsewhere) is one more setting
    df["ablation.c"] = [None, None, None, None, 2.0, None]
    assert results.select_lr(df)["ablation.c"].isna().tolist() == [True]  # 2.0: diverged only
    df.loc[4, "status"] = "ok"
    assert results.select_lr(df)[["lr", "ablation.c"]].fillna(0).values.tolist() == [
        [3e-2, 2.0], [1e-2, 0]]


def test_main_table_mean_and_std_over_seeds_are_exact():
    test = {("a", "MHA"): [0.90, 0.92, 0.94], ("a", "LN1"): [0.80, 0.81, 0.85],
            ("b", "MHA"): [0.60, 0.70, 0.80], ("b", "LN1"): [0.50, 0.50, 0.56]}
    rows = []
    for (task, config), accs in test.items():
        for seed, acc in zip((0, 42, 3407), accs):
            rows.append((task, config, 1e-2, seed, "ok", 0.9, acc))
            rows.append((task, config, 1e-3, seed, "ok", 0.1, 1.0))  # worse on val
    rows.append(("b", "LN1", 1e-2, 7, "diverged", 0.99, float("nan")))  # missing, not zero
    table = results.main_table(_synthetic(rows))
    assert table["task"].tolist() == ["a", "a", "b", "b", "average", "average"]
    for (task, config), accs in test.items():
        row = table[(table.task == task) & (table.config == config)].iloc[0]
        assert row["lr"] == 1e-2 and row["n_seeds"] == 3 and row["selected_on"] == "val"
        assert row["lr_at_edge"]  # 1e-2 is the largest LR of a two-point grid
        assert row["test_acc_mean"] == pytest.approx(100 * np.mean(accs), abs=1e-12)
        assert row["test_acc_std"] == pytest.approx(100 * np.std(accs), abs=1e-12)
    average = table[table.task == "average"].set_index("config")["test_acc_mean"]
    assert average["MHA"] == pytest.approx(50 * (np.mean(test["a", "MHA"]) + 0.7))
    assert average["LN1"] == pytest.approx(50 * (np.mean(test["a", "LN1"]) + 0.52))
    sample = results.main_table(_synthetic(rows), ddof=1)
    assert sample["test_acc_std"][0] == pytest.approx(100 * np.std(test["a", "LN1"], ddof=1))
    middle = results.main_table(_synthetic(rows + [(*r[:2], 1e-1, *r[3:5], 0.0, 0.0)
                                                   for r in rows]))
    assert not middle[middle.task != "average"]["lr_at_edge"].any()  # 1e-2 of 1e-3..1e-1
    # a configuration whose runs on one task all failed: that task is NaN, so is its average
    rows = [r if (r[0], r[1]) != ("b", "MHA") else (*r[:4], "failed", *r[5:]) for r in rows]
    table = results.main_table(_synthetic(rows), on="test")  # picks 1e-3 (test 100%)
    assert table["selected_on"].eq("test").all()
    row = table[(table.task == "b") & (table.config == "MHA")].iloc[0]
    assert math.isnan(row["test_acc_mean"]) and math.isnan(row["lr"])
    average = table[table.task == "average"].set_index("config")["test_acc_mean"]
    assert math.isnan(average["MHA"]) and average["LN1"] == pytest.approx(100.0)


@pytest.mark.parametrize("cluster", ["debug", pytest.param("local", marks=pytest.mark.slow)])
def test_submitit_jobs_store_their_own_records(tmp_path, cluster):
    """debug: in this process; local: one subprocess per job (~20 s on 2 busy cores)."""
    pytest.importorskip("submitit")
    configs = [sweep.run_config("digits", c, lr=1e-2, **TINIER) for c in ("LN1", "FC2")]
    summary = sweep.run_sweep(configs, tmp_path / "runs", executor="submitit", cluster=cluster,
                              folder=tmp_path / "logs", timeout_min=5, slurm_partition="gpu",
                              device="cpu", progress=False)
    assert summary["status"].tolist() == ["ok", "ok"]
    assert all(store.exists(tmp_path / "runs", c) for c in configs)
    assert list((tmp_path / "logs").iterdir())  # submitit's job files went there


def test_unknown_executor_names_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="valid: \\['serial', 'submitit'\\]"):
        sweep.run_sweep([], tmp_path, executor="slurm")


def test_linear_probe_is_deterministic():
    task = tasks.load("digits")
    model = tiny_vit(img_size=28, patch_size=7, num_classes=10)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    first = finetune.linear_probe(model, task)
    assert first == finetune.linear_probe(model, task)
    assert first["n_train"] == len(task.train) and first["n_features"] == 32
    for split in ("train_acc", "val_acc", "test_acc"):
        assert 0.0 <= first[split] <= 1.0
    assert first["test_acc"] > 0.5  # random ViT features of digits are far above chance (0.1)
    assert all(torch.equal(p, before[n]) for n, p in model.state_dict().items())


def test_shipped_results_are_the_complete_study():
    """The shipped records are exactly the main study's runs and its budget check's (run
    hashes did not drift), each finished, each from a new head, on grids that bracket every
    chosen LR and every LR band."""
    shipped = results.results(studies.MAIN_RESULTS)
    main = {run_hash(c) for c in studies.runs_of(studies.MAIN)}
    assert len(main) == 7 * 3 * (9 + 10 + 10 + 9 + 10 + 9 + 9)  # per configuration its LRs
    budget = {run_hash(c) for c in studies.budget_runs(shipped)}
    assert 2 * 7 * 2 * 3 <= len(budget) <= 2 * 7 * 3 * 3  # the chosen LR and 1-2 neighbours
    assert set(shipped["run"]) == main | budget
    assert shipped["status"].isin(["ok", "diverged"]).all()
    # every run started from a new head: before any update, about chance on 10 classes
    assert shipped["initial_val_acc"].max() <= 0.3
    # the grid brackets every best LR and every band within 1 and 2 points of it
    runs = shipped[shipped["run"].isin(main)]
    assert not results.main_table(runs)["lr_at_edge"].any()
    assert results.lr_bands(runs)["bracketed"].all()


@pytest.mark.parametrize("study", ["finetune", "confounds"])
def test_shipped_runs_table_agrees_with_the_shipped_records(study):
    """``runs.csv``, written at the end of each sweep session, lists only stored runs, with
    their stored status and accuracies (it may lag the records of a session cut short)."""
    from vitplast import confounds

    root = {"finetune": studies.MAIN_RESULTS, "confounds": confounds.EMBEDDED_RESULTS}[study]
    stored = results.results(root).set_index("run")
    if not (root / "runs.csv").exists():  # a store no session has filled yet
        assert stored.empty
        return
    table = pd.read_csv(root / "runs.csv").set_index("run")
    assert len(table) > 0 and table.index.isin(stored.index).all()
    for column in ("status", "test_acc", "best_val_acc", "seconds"):
        pd.testing.assert_series_equal(table[column], stored.loc[table.index, column],
                                       check_dtype=False)


def test_cli_shards_split_the_study_without_overlap(tmp_path, fake_train, monkeypatch, capsys):
    """Two ``--shard`` processes over one store run disjoint halves; a bad shard or study is
    refused naming the valid forms; each session is logged in study.json; ``--status`` runs
    nothing and prints the counts."""
    from vitplast.__main__ import main

    monkeypatch.setitem(studies.MAIN, "tasks", ["digits"])
    monkeypatch.setitem(studies.MAIN, "lrs", {"head": [1.0, 3.0], "LN1": [0.1, 0.3, 1.0]})
    monkeypatch.setattr(models, "load_model", lambda *a, **k: torch.nn.Linear(1, 1))
    monkeypatch.setattr(models, "new_head", lambda model, n, seed: model)
    for shard in ("0/2", "1/2"):
        main(["sweep", "--root", str(tmp_path), "--shard", shard, "--limit", "3"])
    seeds = studies.MAIN["seeds"]
    expected = studies.runs_of(studies.MAIN)
    expected.sort(key=lambda c: seeds.index(c["seed"]))  # seed-first
    stored = results.results(tmp_path)
    assert len(fake_train.calls) == 6 and stored["run"].is_unique
    assert set(stored["run"]) == {run_hash(c) for c in expected[0::2][:3]
                                  + expected[1::2][:3]}
    log = store.read_json(tmp_path / "study.json")["sessions"]
    assert [s["command"].split()[-3] for s in log] == ["0/2", "1/2"]
    assert log[-1]["status"] == {"ok": 6}
    table = pd.read_csv(tmp_path / "runs.csv")  # the store as one table, rewritten each session
    assert sorted(table["run"]) == sorted(stored["run"]) and (table["status"] == "ok").all()
    main(["sweep", "--root", str(tmp_path), "--status"])  # runs nothing, logs nothing
    assert len(fake_train.calls) == 6 and len(store.read_json(tmp_path / "study.json")
                                              ["sessions"]) == 2
    total = capsys.readouterr().out.splitlines()[-1].split()  # task, expected, ok, ..., missing
    assert total[:6] == ["all", str(len(expected)), "6", "0", "0", str(len(expected) - 6)]
    for bad in (["--shard", "2/2"], ["--shard", "half"], ["--study", "finetune"],
                ["--precision", "fp8"]):
        with pytest.raises(SystemExit):
            main(["sweep", "--root", str(tmp_path), *bad])


def test_dynamics_follow_each_variant_at_its_own_lr(tmp_path):
    """Variants sharing a configuration (plain MHA, sparse MHA) are selected separately, and
    each run's gradient norms are read on the component it trains."""
    from vitplast import confounds

    def record(config, lr, val, ablation=None):
        c = sweep.run_config("digits", config, lr=lr, **TINY, **(
            {"ablation": ablation} if ablation else {}))
        history = [{"step": 0, "loss": 1.0, "grad_norm/MHA": 10 * lr, "grad_norm/FC1": 20 * lr,
                    "grad_norm_per_param/MHA": lr, "grad_norm_per_param/FC1": 2 * lr}]
        store.save_run(tmp_path, c, dict(status="ok", history=history, best_val_acc=val,
                                         test_acc=val))

    record("MHA", 0.1, 0.9), record("MHA", 1.0, 0.5)
    sparse = dict(variant="MHA sparse", component="MHA", count=5)
    record("MHA", 0.1, 0.5, sparse), record("MHA", 1.0, 0.9, sparse)
    bias = dict(variant="FC1 bias", component="FC1")
    fc1_bias = ["blocks.*.mlp.fc1.bias"]
    record(fc1_bias, 0.1, 0.9, bias), record(fc1_bias, 1.0, 0.1, bias)
    df = confounds.with_variant(results.results(tmp_path))
    norms = results.component_grad_norms(results.dynamics(df, results.history(tmp_path)))
    got = {(r.variant, r.kind): (r.lr, r.value) for r in norms.itertuples()}
    assert got == {("MHA", "total"): (0.1, 1.0), ("MHA", "per parameter"): (0.1, 0.1),
                   ("MHA sparse", "total"): (1.0, 10.0),
                   ("MHA sparse", "per parameter"): (1.0, 1.0),
                   ("FC1 bias", "total"): (0.1, 2.0), ("FC1 bias", "per parameter"): (0.1, 0.2)}


def test_progress_counts_the_study_and_prices_what_is_missing(tmp_path):
    """Per (task, seed): exact counts by status, and the missing runs priced at the mean time
    of the stored ok runs of their configuration (of every ok run where it has none)."""
    configs = sweep.grid(["digits"], ["head", "LN1", "FC1"], [0.1], [0, 42], **TINY)
    by_key = {(c["config"], c["seed"]): c for c in configs}
    for key, status, seconds in [(("head", 0), "ok", 3600.0), (("head", 42), "ok", 10800.0),
                                 (("LN1", 0), "ok", 1800.0), (("FC1", 0), "diverged", 99.0)]:
        store.save_run(tmp_path, by_key[key], dict(config=by_key[key], status=status,
                                                   seconds=seconds))
    table = provenance.study_progress(configs, tmp_path)
    assert table.drop(columns="hours_left").values.tolist() == [
        ["digits", 0, 3, 2, 1, 0, 0], ["digits", 42, 3, 1, 0, 0, 2], ["all", "", 6, 3, 1, 0, 2]]
    # seed 42 lacks LN1 (its ok mean: 0.5 h) and FC1 (none ok: the mean of all ok, 1.5 h)
    assert table["hours_left"].tolist() == [0.0, 2.0, 2.0]
