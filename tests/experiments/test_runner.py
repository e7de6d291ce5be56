"""The runner: a run's body (a new seeded head, the run's keywords, its ablation looked up in
the preparations it is given) and no clipping kept as no clipping
(``vitplast.experiments.runner``)."""

import pytest
import torch
from helpers import TINY

from vitplast import models
from vitplast.experiments import runner, runs, sweep
from vitplast.experiments.runs import TRAIN_KEYS, run_hash
from vitplast.train import ablations, finetune

#: The training loop itself, as imported (the ``fake_train`` fixture replaces the module's).
TRAIN = finetune.train


def test_run_one_passes_the_config_and_seeds_the_new_head(fake_train, monkeypatch):
    config = runs.make_run("digits", "LN2", lr=0.5, seed=3, optimizer="adamw",
                              **{**TINY, "pretrained": True})
    record = runner.run_one(config)
    assert record["status"] == "ok" and record["test_acc"] == 0.25
    model, kwargs = fake_train.calls[0]
    expected = {k: config[k] for k in TRAIN_KEYS if k in config}
    expected["betas"] = (0.9, 0.999)
    assert {k: kwargs[k] for k in expected} == expected
    assert kwargs["device"] == torch.device("cpu") and model.head.out_features == 10
    runner.run_one(config)
    runner.run_one({**config, "seed": 4})
    heads = [m.head.weight for m, _ in fake_train.calls]
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])
    # a new head although the task has as many classes as the pretrained one; norm kept
    pretrained = models.load_model(models.EMBEDDED_NAME, pretrained=True)
    assert pretrained.head.out_features == 10 and not torch.equal(heads[0], pretrained.head.weight)
    assert not torch.allclose(fake_train.calls[0][0].head.bias, pretrained.head.bias)
    assert torch.equal(fake_train.calls[0][0].norm.weight, pretrained.norm.weight)

    marked = {**ablations.PREPARE, "mark": lambda m, c: setattr(m, "mark", c["ablation"])}
    runner.run_one({**config, "prepare": "mark", "ablation": {"c": 3}}, preparations=marked)
    assert fake_train.calls[-1][0].mark == {"c": 3}
    calls = len(fake_train.calls)
    for refuse in (lambda: runner.run_one({**config, "prepare": "nope"}, preparations=marked),
                   lambda: sweep.run_sweep([{**config, "prepare": "nope"}], "unused",
                                           progress=False, preparations=marked)):
        with pytest.raises(ValueError, match="^unknown prepare 'nope'; valid: \\['gauge', "
                                             "'lora', 'mark', .*'rescale_ln'"):
            refuse()  # refused before any work, with one message, not recorded as failed
    with pytest.raises(ValueError, match="^unknown prepare 'mark'"):  # not known by default
        runner.run_one({**config, "prepare": "mark"})
    assert len(fake_train.calls) == calls


def test_no_clipping_means_no_clipping_end_to_end(fake_train):
    """``clip_grad_norm=None`` (or 0) is stored as 0.0 and trains without a clip; a run dict
    made by hand with None reaches the loop as None (no clip), never the default 1.0."""
    config = runs.make_run("digits", lr=0.5, clip_grad_norm=None, **TINY)
    assert config["clip_grad_norm"] == 0.0
    assert run_hash(config) == run_hash(runs.make_run("digits", lr=0.5, clip_grad_norm=0.0,
                                                        **TINY))
    runner.run_one(config)
    runner.run_one({**config, "clip_grad_norm": None})
    assert [kw["clip_grad_norm"] for _, kw in fake_train.calls] == [0.0, None]


#: Settings a sweep refuses before any work: (key, value, the message's core).
REFUSED = [
    ("momentum", 1.5, "a run's settings: momentum=1.5 is not valid: expected a number >= 0 and "
                      "< 1 (SGD momentum) (schema: schemas/run.schema.json)"),
    ("label_smoothing", 1.5, "a run's settings: label_smoothing=1.5 is not valid: expected a "
                             "number >= 0 and < 1 (schema: schemas/run.schema.json)"),
    ("weight_decay", -0.1, "a run's settings: weight_decay=-0.1 is not valid: expected a "
                           "number >= 0 (schema: schemas/run.schema.json)"),
    ("clip_grad_norm", -1.0, "a run's settings: clip_grad_norm=-1.0 is not valid: expected a "
                             "number >= 0, or null (the gradient-norm clipping threshold; 0 or "
                             "null: no clipping) (schema: schemas/run.schema.json)"),
    ("batch_size", 1151, "batch_size=1151 is larger than the training split{of} (1150 "
                         "images); batch_size takes an integer from 1 to 1150 here"),
]


@pytest.mark.parametrize("key, value, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_every_entry_refuses_what_a_sweep_refuses_with_its_message(tmp_path, fake_train,
                                                                   monkeypatch, key, value,
                                                                   message):
    """``make_run``, ``run_one`` and ``finetune.train`` refuse, before any work, what
    ``run_sweep`` refuses, with the same message (after the run in a few words where the
    entry has a run: ``runs.describe``); nothing is trained nor stored, not even as failed."""
    good = runs.make_run("digits", "LN1", lr=0.3, **TINY)
    bad, of = {**good, key: value}, " of task 'digits'"
    said = {}
    for entry, call in (
            ("run_sweep", lambda: sweep.run_sweep([bad], tmp_path, progress=False)),
            ("make_run", lambda: runs.make_run("digits", "LN1", lr=0.3, **{**TINY, key: value})),
            ("run_one", lambda: runner.run_one(bad))):
        with pytest.raises(ValueError) as refused:
            call()
        said[entry] = str(refused.value)
    core = message.format(of=of)
    if key == "batch_size":  # the run, then the message
        assert set(said.values()) == {f"{runs.describe(good)}: {core}"}
    else:
        assert said["make_run"] == said["run_one"] == core
        assert said["run_sweep"] == (f"run 0 of 1 ({runs.describe(good)}) is refused before "
                                     f"the sweep starts: {core}")
    assert fake_train.calls == [] and not list(tmp_path.glob("*.json"))
    model, task, kwargs = runner.build(good)
    monkeypatch.setattr(finetune, "_loop", lambda *a, **k: pytest.fail("it trained"))
    with pytest.raises(ValueError) as refused:  # the real loop (fake_train stands in for it)
        TRAIN(model, task.train, task.val, task.test, **{**kwargs, key: value,
                                                          "progress": False})
    assert str(refused.value) == message.format(of="")


def test_an_unknown_task_is_refused_at_every_entry_with_one_message(tmp_path, fake_train):
    good = runs.make_run("digits", "LN1", lr=0.3, **TINY)
    said = set()
    for call in (lambda: runs.make_run("digitz", "LN1", lr=0.3, **TINY),
                 lambda: runner.run_one({**good, "task": "digitz"}),
                 lambda: sweep.run_sweep([{**good, "task": "digitz"}], tmp_path,
                                         progress=False)):
        with pytest.raises(ValueError, match="unknown task 'digitz'; valid: embedded tasks") as e:
            call()
        said.add(str(e.value).rpartition("is refused before the sweep starts: ")[2])
    assert len(said) == 1 and fake_train.calls == []
