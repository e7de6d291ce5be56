"""A run's keys: which define its hash, which are runtime knobs; its checks (the published run
schema, and a batch no larger than its task's training split)."""

import inspect
import json

import pytest
from helpers import TINY

from vitplast.datasets import paper_datasets
from vitplast.experiments import runs
from vitplast.experiments.store import Store
from vitplast.train import finetune, keys

BASE = dict(task="digits", config="MHA", lr=0.1, seed=0)


def _hash(**changes):
    return runs.run_hash(runs.make_run(**{**BASE, **changes}))


@pytest.mark.parametrize("knob, value", [("device", "cuda"), ("workers", 8), ("log_every", 1),
                                         ("precision", "fp32"), ("accum_steps", 4),
                                         ("weights_file", "w.pt")])
def test_a_runtime_knob_keeps_the_hash(knob, value):
    assert knob in runs.RUNTIME_KEYS and knob not in runs.RUN_KEYS
    assert _hash(**{knob: value}) == _hash()


def test_where_the_paper_data_lies_is_not_part_of_a_run():
    assert _hash(task="pet", data_root="/data") == _hash(task="pet", data_root="/scratch/data")


@pytest.mark.parametrize("key, value", [("lr", 0.3), ("seed", 1), ("config", "FC1"),
                                        ("task", "fmnist_snow"), ("steps", 10),
                                        ("batch_size", 32), ("clip_grad_norm", None),
                                        ("checkpoint", "init"), ("optimizer", "adamw"),
                                        ("eval_every", 5), ("ablation", {"c": 2.0})])
def test_a_defining_key_changes_the_hash(key, value):
    assert _hash(**{key: value}) != _hash()


def test_a_new_training_keyword_does_not_rehash_the_store(monkeypatch):
    """``make_run`` never reads ``finetune.train``'s signature: a new keyword there (with
    any default) leaves every config and hash as it was."""
    before = runs.make_run(**BASE)

    def train(*args, new_knob=3, **kwargs):
        return finetune.train(*args, **kwargs)

    monkeypatch.setattr(finetune, "train", train)
    assert "new_knob" in inspect.signature(finetune.train).parameters
    after = runs.make_run(**BASE)
    assert after == before and runs.run_hash(after) == runs.run_hash(before)


def test_none_valued_keys_are_left_out_of_the_hash():
    config = runs.make_run(**BASE)
    assert runs.run_hash({**config, "prepare": None}) == runs.run_hash(config)
    assert "prepare" not in runs.defining({**config, "prepare": None})


def test_every_key_of_a_run_is_declared():
    config = runs.make_run(**BASE, workers=2, data_root=None)
    assert set(config) <= set(runs.RUN_KEYS) | set(runs.RUNTIME_KEYS)
    with pytest.raises(ValueError, match="wrokers is not a known key \\(did you mean 'workers'"
                       "\\?\\); valid: \\['kind', 'model'"):
        runs.make_run(**BASE, wrokers=2)


def test_the_store_finds_a_run_whatever_its_runtime_knobs(tmp_path):
    config = runs.make_run(**BASE)
    Store(tmp_path).save({**config, "workers": 4}, dict(status="diverged"))
    assert Store(tmp_path).has(config) and Store(tmp_path).has({**config, "device": "cuda"})
    assert not Store(tmp_path).has({**config, "lr": 1.0})
    Store(tmp_path).save({**config, "lr": 1.0}, {})  # a record without a status
    assert not Store(tmp_path).has({**config, "lr": 1.0})


def test_grid_size_order_and_recipes():
    configs = runs.grid(["digits", "fmnist"], ["full", "MHA", ["blocks.0.attn.*"]],
                         [1e-2, 1e-3], [0, 1], **TINY)
    assert len(configs) == 2 * 3 * 2 * 2
    assert len({runs.run_hash(c) for c in configs}) == 24
    assert [(c["task"], c["config"], c["lr"], c["seed"]) for c in configs[:5]] == [
        ("digits", "full", 1e-2, 0), ("digits", "full", 1e-2, 1), ("digits", "full", 1e-3, 0),
        ("digits", "full", 1e-3, 1), ("digits", "MHA", 1e-2, 0)]
    assert configs[8]["config"] == ["blocks.0.attn.*"] and configs[-1]["task"] == "fmnist"
    c = configs[0]
    for key in ("kind", "model", "checkpoint", "task", "severity", "train_size", "config",
                "train_head", "optimizer", "lr", "seed", "steps", "batch_size", "warmup_steps",
                "momentum", "weight_decay", "clip_grad_norm", "eval_every"):
        assert key in c, key
    assert c["warmup_steps"] == keys.RECIPES["embedded"]["warmup_steps"]
    assert c["steps"] == 2 and c["pretrained"] is False and c["kind"] == "finetune"
    assert json.loads(json.dumps(c)) == c
    paper = runs.make_run("pet", "LN1", lr=1e-3, recipe="paper", data_root="/data",
                             ablation={"c": 2.0})
    assert paper["steps"] == paper_datasets.PAPER_STEPS["pet"]
    assert paper["batch_size"] == keys.RECIPES["paper"]["batch_size"]
    assert paper["ablation"] == {"c": 2.0} and "ablation" not in c
    with pytest.raises(ValueError, match="valid: \\['paper', 'embedded'\\]"):
        runs.make_run("digits", lr=1.0, recipe="fast")
    with pytest.raises(ValueError, match="unknown task 'pet'.*data_root"):
        runs.make_run("pet", lr=1.0)
    with pytest.raises(ValueError, match="unknown configuration 'attention'"):
        runs.make_run("digits", "attention", lr=1.0)


def test_a_run_loads_its_task_through_the_one_registry(monkeypatch):
    """Embedded and paper tasks alike go through ``tasks.load``, with the options the run's
    keys set (a paper dataset at 224 px unless the run says otherwise)."""
    from vitplast.datasets import tasks

    calls, made = [], [runs.make_run("digits", lr=0.1, severity=3, data_seed=2),
                        runs.make_run("pet", lr=0.1, data_root="/data", recipe="paper")]
    monkeypatch.setattr(tasks, "load", lambda *a, **k: calls.append((a, k)))
    for run in made:
        runs.task_of(run)
    assert calls == [(("digits", None), dict(severity=3, seed=2, train_size=5000,
                                            test_size=2000)),
                     (("pet", "/data"), dict(severity=5, seed=0, img_size=224))]


def test_a_batch_no_larger_than_the_training_split_passes_and_one_image_more_is_refused():
    """``check_batches``: digits trains on 1,150 images (80% of 80% of 1,797); with
    ``accum_steps`` the micro-batch counts, and the batch must split into equal ones."""
    assert len(runs.task_of(runs.make_run("digits", lr=0.1)).train) == 1150
    edge = [runs.make_run("digits", lr=0.1, batch_size=1150),
            runs.make_run("digits", lr=0.1, batch_size=2300, accum_steps=2)]
    runs.check_batches(edge)
    with pytest.raises(ValueError, match=r"task 'digits', config 'full', lr 0.1, seed 0: "
                                         r"batch_size=1151 is larger than the training split"):
        runs.check_batches([runs.make_run("digits", lr=0.1, batch_size=1151)])
    with pytest.raises(ValueError, match=r"batch_size=2302 .*micro-batches of batch_size / "
                                         r"accum_steps=2\); batch_size takes an integer from 1 "
                                         r"to 2300"):
        runs.check_batches([runs.make_run("digits", lr=0.1, batch_size=2302, accum_steps=2)])
    with pytest.raises(ValueError, match=r"batch_size=65 is not divisible by accum_steps=2"):
        runs.check_batches([runs.make_run("digits", lr=0.1, batch_size=65, accum_steps=2)])


def test_task_options_are_the_options_a_run_builds_its_task_with():
    """``task_options`` names what ``task_of`` loads (a study's probe is fitted on the same
    splits: ``GridStudy.task_options``)."""
    assert runs.task_options(dict(data_seed=3, train_size=160, lr=0.1, steps=4)) == dict(
        seed=3, train_size=160)
    run = runs.make_run("fmnist_contrast", lr=0.1, train_size=160, test_size=64)
    task = runs.task_of(run)
    assert (len(task.train), len(task.val), len(task.test)) == (128, 32, 64)


def test_a_model_spec_s_weights_and_architecture_are_run_keys():
    """A ``weights.ModelSpec`` given as the model sets its run's ``weights_file`` and
    ``model_kwargs``: its runs are not the stock model's (another hash); the embedded spec's
    are the plain name's (the same hash, no extra keys)."""
    from vitplast import models, weights

    plain = runs.make_run("digits", lr=0.1)
    assert runs.make_run("digits", lr=0.1, model=weights.ModelSpec(models.EMBEDDED_NAME)) == plain
    own = weights.ModelSpec("vit_tiny_patch16_224", "tiny.safetensors",
                            {"img_size": 32, "patch_size": 4})
    run = runs.make_run("digits", lr=0.1, model=own)
    assert run["model_kwargs"] == {"img_size": 32, "patch_size": 4}
    assert run["weights_file"] == "tiny.safetensors" and run["model"] == "vit_tiny_patch16_224"
    stock = runs.make_run("digits", lr=0.1, model="vit_tiny_patch16_224")
    assert runs.run_hash(run) != runs.run_hash(stock)


def test_a_grid_loads_no_task_and_make_run_refuses_a_batch_larger_than_the_split(monkeypatch):
    """Listing a study (``grid``) loads no task: the batch is checked where its runs train;
    ``make_run`` itself refuses a batch larger than the split, as a sweep and ``run_one`` do."""
    from vitplast.datasets import tasks

    with pytest.raises(ValueError, match=r"^task 'digits', config 'full', lr 0.1, seed 0: "
                                         r"batch_size=1151 is larger than the training split of "
                                         r"task 'digits' \(1150 images\)"):
        runs.make_run("digits", lr=0.1, batch_size=1151)
    monkeypatch.setattr(tasks, "load", lambda *a, **k: pytest.fail("a task was loaded"))
    monkeypatch.setattr(runs, "_train_split", lambda keys: pytest.fail("a split was read"))
    assert len(runs.grid(["digits", "fmnist_contrast"], ["head"], [0.1], [0, 1],
                         batch_size=99_999)) == 4


def test_runs_of_a_fetched_model_without_its_weights_are_refused_saying_how_to_get_them(
        tmp_path, monkeypatch):
    """A sweep of the real-model study on a machine without the weights refuses before any run
    trains (``runs.check_ready``), in one line naming the command that fetches them; the runs
    of other models pass."""
    from vitplast.experiments import runner, study_specs

    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    run = runs.make_run("digits", "MHA", lr=0.1, **study_specs.REAL_RUN)
    with pytest.raises(FileNotFoundError, match="`vitplast weights get dinov2-small`"):
        runs.check_ready([run])
    with pytest.raises(FileNotFoundError, match="vitplast weights get"):
        runner.run_one(run)
    runs.check_ready([runs.make_run("digits", "MHA", lr=0.1)])
