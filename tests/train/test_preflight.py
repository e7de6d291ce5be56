"""What a training run refuses before any work (``vitplast.train.preflight``): each refusal
names the argument and what is valid; the recipe's ranges are the run schema's; a batch that
does not fit its split gets the one message of every entry; and ``finetune.train`` refuses
before its first step. The same refusals at ``make_run``, ``run_one`` and a sweep:
``tests/experiments/test_runner.py``; more bad inputs: ``tests/test_bad_inputs.py``."""

import inspect
import math

import pytest
import torch
from helpers import tiny_vit, toy_task

from vitplast import schema
from vitplast.experiments import runs
from vitplast.train import finetune, keys, preflight

#: ``train``'s keywords at their defaults: what ``finetune.run`` hands ``check_args``.
ARGS = {k: p.default for k, p in inspect.signature(finetune.train).parameters.items()
        if p.default is not inspect.Parameter.empty and k not in ("val_set", "test_set")}


def test_train_defaults_pass():
    assert preflight.check_args(dict(ARGS), [ARGS["lr"]]) is None
    for recipe in keys.RECIPES.values():  # every named recipe passes too
        assert preflight.check_args({**ARGS, **recipe}, [ARGS["lr"]]) is None


@pytest.mark.parametrize("key, value, message", [
    ("optimizer", "adam", "unknown optimizer 'adam'; valid: ['sgd', 'adamw']"),
    ("precision", "fp8", "unknown precision 'fp8'; valid: ['auto', "),
    ("steps", 0, "steps=0 is not valid: steps takes an integer >= 1; optimisation steps"),
    ("batch_size", 2.5, "batch_size=2.5 is not valid: batch_size takes an integer >= 1"),
    ("accum_steps", 0, "accum_steps=0 is not valid: accum_steps takes an integer >= 1"),
    ("warmup_steps", -1, "warmup_steps=-1 is not valid: warmup_steps takes an integer >= 0"),
    ("eval_every", 0, "eval_every=0 is not valid"),
    ("log_every", 0, "log_every=0 is not valid"),
    ("workers", -1, "workers=-1 is not valid: workers takes an integer >= 0"),
    ("seed", 0.5, "seed=0.5 is not valid: seed takes an integer"),
])
def test_each_argument_is_refused_naming_it_and_what_is_valid(key, value, message):
    with pytest.raises(ValueError) as refused:
        preflight.check_args({**ARGS, key: value}, [0.1])
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("lr", [0.0, -0.1, math.nan, math.inf, True, "0.1"])
def test_every_run_s_learning_rate_is_refused_as_make_run_refuses_it(lr):
    """Each run's LR (here the second of two) gets the run schema's words: the message
    ``make_run`` gives the same LR."""
    with pytest.raises(ValueError) as refused:
        preflight.check_args(dict(ARGS), [0.1, lr])
    with pytest.raises(ValueError) as made:
        runs.make_run("digits", lr=lr)
    assert str(refused.value) == str(made.value)
    assert str(refused.value).startswith(f"a run's settings: lr={lr!r} is not valid: expected")


def test_grad_masks_need_no_weight_decay():
    mask = {"head.weight": torch.ones(2, 2, dtype=torch.bool)}
    assert preflight.check_args({**ARGS, "grad_masks": mask}, [0.1]) is None
    with pytest.raises(ValueError, match="^grad_masks need weight_decay=0"):
        preflight.check_args({**ARGS, "grad_masks": mask, "weight_decay": 1e-4}, [0.1])


def test_the_recipe_is_refused_with_the_run_schema_s_words():
    """Every ``SCHEMA_CHECKED`` keyword is a keyword of ``train`` and a key of the run schema;
    a value out of its range is refused with the words ``schema.check`` gives a run (all the
    keys at fault in one message), and a non-finite number too (JSON has none)."""
    properties = schema.document("run")["properties"]
    assert set(preflight.SCHEMA_CHECKED) <= set(ARGS) & set(properties)
    with pytest.raises(ValueError) as refused:
        preflight.check_args({**ARGS, "momentum": 1.5, "label_smoothing": -0.1}, [0.1])
    assert str(refused.value) == (
        f"a run's settings: momentum=1.5 is not valid: expected "
        f"{schema.expected(properties['momentum'])}; label_smoothing=-0.1 is not valid: "
        f"expected {schema.expected(properties['label_smoothing'])} "
        "(schema: schemas/run.schema.json)")
    for key, value in (("betas", (0.9, math.inf)), ("clip_grad_norm", math.nan),
                       ("train_head", "yes")):
        with pytest.raises(ValueError, match=rf"^a run's settings: {key}="):
            preflight.check_args({**ARGS, key: value}, [0.1])
    assert preflight.check_args({**ARGS, "clip_grad_norm": None, "betas": (0.5, 0.5)},
                                [0.1]) is None


def test_a_batch_fits_its_split_in_equal_micro_batches():
    preflight.check_batch(16, 1, 16)  # the whole split in one batch
    preflight.check_batch(32, 2, 16)  # two micro-batches of the whole split
    with pytest.raises(ValueError) as refused:
        preflight.check_batch(17, 1, 16, of=" of task 'digits'")
    assert str(refused.value) == ("batch_size=17 is larger than the training split of task "
                                  "'digits' (16 images); batch_size takes an integer from 1 "
                                  "to 16 here")
    with pytest.raises(ValueError) as refused:
        preflight.check_batch(34, 2, 16)
    assert str(refused.value) == ("batch_size=34 is larger than the training split (16 images"
                                  ", micro-batches of batch_size / accum_steps=2); batch_size "
                                  "takes an integer from 1 to 32 here")
    with pytest.raises(ValueError, match="^batch_size=30 is not divisible by accum_steps=4; "
                                         "batch_size takes a multiple of accum_steps$"):
        preflight.check_batch(30, 4, 1000)


def test_splits_are_not_empty():
    train, empty = toy_task(16), torch.utils.data.Subset(toy_task(16), [])
    preflight.check_splits(train, None, None, 16, 1)  # no validation nor test split
    for name, splits in (("train_set", (empty, None, None)), ("val_set", (train, empty, None)),
                         ("test_set", (train, train, empty))):
        with pytest.raises(ValueError, match=f"^{name} is empty: give it images"):
            preflight.check_splits(*splits, 16, 1)
    with pytest.raises(ValueError, match="^batch_size=17 is larger than the training split"):
        preflight.check_splits(train, None, None, 17, 1)


def test_gradient_masks_match_trainable_parameters():
    trainable = {"w": torch.zeros(2, 3, dtype=torch.float64)}
    out = preflight.check_masks({"w": torch.tensor([[True, False, True]] * 2)}, trainable)
    assert out["w"].dtype == torch.float64 and out["w"].tolist() == [[1, 0, 1]] * 2
    with pytest.raises(ValueError, match="^grad_masks names 'v', which the configuration "
                                         "does not train$"):
        preflight.check_masks({"v": torch.ones(2, 3)}, trainable)
    with pytest.raises(ValueError, match=r"^mask for w has shape \(3, 2\), not \(2, 3\)$"):
        preflight.check_masks({"w": torch.ones(3, 2)}, trainable)


def test_train_refuses_before_any_step(monkeypatch):
    """``finetune.train`` makes these checks before its loop: a refused run never trains."""
    monkeypatch.setattr(finetune, "_loop", lambda *a, **k: pytest.fail("it trained"))
    model = tiny_vit()
    with pytest.raises(ValueError, match=r"valid: \['sgd', 'adamw'\]"):
        finetune.train(model, toy_task(), steps=1, optimizer="adam", progress=False)
    with pytest.raises(ValueError, match="^grad_masks names 'nothing'"):
        finetune.train(model, toy_task(), steps=1, batch_size=16, progress=False,
                       grad_masks={"nothing": torch.ones(1)})
