"""What a training run refuses before any work: ``finetune.train``'s arguments, its splits,
its batch and its gradient masks, each refusal naming the argument and what is valid.

Paper: none (the guard of section 5's runs; PAPER.md section 2's recipe lies in the run
schema's ranges).

``finetune.run`` makes every check here before its first step. An LR, or a keyword of
``SCHEMA_CHECKED`` out of its range, gets the run schema's message (``vitplast.schema.check``,
what a sweep's run and ``make_run`` get); the optimizer, the precision and the ``COUNTS``
keywords are refused here in words of their own (naming the valid values, or the least value
with a hint), within the same ranges (``keys.KEY``). A batch that does not fit a training
split gets ``check_batch``'s message, which ``experiments.runs.check_batches`` gives
``make_run``, ``runner.run_one`` and a sweep too.
"""

from __future__ import annotations

import math

import jsonschema

from vitplast import schema
from vitplast.inputs import check_count, check_seed
from vitplast.train.keys import KEY, OPTIMIZERS, PRECISIONS

#: ``train``'s integer keywords that ``check_args`` checks against their key's minimum
#: (``keys.KEY``), each with what to do.
COUNTS = {"steps": "optimisation steps, e.g. 120", "batch_size": "images per step, e.g. 64",
          "accum_steps": "micro-batches per step, 1 for none",
          "warmup_steps": "0 for no warm-up", "eval_every": "steps between evaluations",
          "log_every": "steps between logged rows",
          "workers": "0 loads batches in this process"}


def check_args(args: dict, lrs: list[float]) -> None:
    """``train``'s scalar arguments (``args``, with one peak LR per run in ``lrs``), each error
    naming the argument and what is valid."""
    optimizer, precision = args["optimizer"], args["precision"]
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {list(OPTIMIZERS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {list(PRECISIONS)}")
    for name, hint in COUNTS.items():  # each key's least value is its row's (keys.KEY)
        check_count(name, args[name], minimum=KEY[name].minimum, hint=hint)
    check_seed("seed", args["seed"])
    if args["grad_masks"] and args["weight_decay"]:
        raise ValueError("grad_masks need weight_decay=0: decay would move masked entries")
    _check_schema_ranges(args, lrs)


#: ``train``'s keywords that ``check_args`` leaves to the published run schema's ranges (and
#: each run's ``lr``).
SCHEMA_CHECKED = ("momentum", "weight_decay", "label_smoothing", "clip_grad_norm", "betas",
                  "train_head")


def _check_schema_ranges(args: dict, lrs: list[float]) -> None:
    """``train``'s ``SCHEMA_CHECKED`` keywords and each run's LR (of ``lrs``) against their run
    schema properties (``keys.KEY``, published as ``vitplast/schemas/run.schema.json``),
    refused with the message a sweep's run, or ``make_run``, gets (``vitplast.schema.check``:
    "a run's settings: momentum=1.5 is not valid: expected ...")."""
    properties = {key: KEY[key].property() for key in (*SCHEMA_CHECKED, "lr")}
    found = []
    for key, value in [(key, args[key]) for key in SCHEMA_CHECKED] + [("lr", lr) for lr in lrs]:
        value = list(value) if isinstance(value, tuple) else value
        numbers = value if isinstance(value, list) else [value]
        finite = all(math.isfinite(v) for v in numbers if isinstance(v, (int, float)))
        if not finite or not jsonschema.Draft202012Validator(properties[key]).is_valid(value):
            found.append(f"{key}={value!r} is not valid: expected "
                         f"{schema.expected(properties[key])}")
    if found:
        raise ValueError(f"a run's settings: {'; '.join(found)} "
                         f"(schema: {schema.FOLDER.name}/run.schema.json)")


def check_batch(batch_size: int, accum_steps: int, split: int, of: str = "") -> None:
    """Refuse a (micro-)batch (``batch_size / accum_steps``) larger than a training split of
    ``split`` images (``of``: whose split, e.g. " of task 'digits'"), or a ``batch_size``
    that ``accum_steps`` does not divide: the one message of every entry (``train``, and
    ``runs.check_batches`` for ``make_run``, ``runner.run_one`` and a sweep)."""
    if batch_size % accum_steps:
        raise ValueError(f"batch_size={batch_size} is not divisible by accum_steps="
                         f"{accum_steps}; batch_size takes a multiple of accum_steps")
    if batch_size // accum_steps > split:
        per = f", micro-batches of batch_size / accum_steps={accum_steps}" * (accum_steps > 1)
        raise ValueError(f"batch_size={batch_size} is larger than the training split{of} "
                         f"({split} images{per}); batch_size takes an integer from 1 to "
                         f"{split * accum_steps} here")


def check_splits(train_set, val_set, test_set, batch_size: int, accum_steps: int) -> None:
    """Non-empty splits, and a train split with at least one (micro-)batch, the batch split
    in equal micro-batches (``check_batch``)."""
    for name, split in (("train_set", train_set), ("val_set", val_set), ("test_set", test_set)):
        if split is not None and len(split) == 0:
            raise ValueError(f"{name} is empty: give it images (or None for val_set/test_set)")
    check_batch(batch_size, accum_steps, len(train_set))


def check_masks(masks: dict, trainable: dict) -> dict:
    """Gradient masks, checked against the trainable parameters."""
    for n, m in masks.items():
        if n not in trainable:
            raise ValueError(f"grad_masks names {n!r}, which the configuration does not train")
        if m.shape != trainable[n].shape:
            raise ValueError(f"mask for {n} has shape {tuple(m.shape)}, "
                             f"not {tuple(trainable[n].shape)}")
    return {n: m.to(trainable[n].device, trainable[n].dtype) for n, m in masks.items()}
