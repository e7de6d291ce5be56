"""The keys of a run, declared once (``vitplast.train.keys.KEYS``): ``finetune.train``'s and
``make_run``'s defaults, the run keys, train keys and recipe defaults, the runtime flags of run
keys and the published run schema are all read from the table; the published file is the
generated one; adding a key touches the table only, and moves no stored run's hash."""

import inspect
import json

import pytest

from vitplast import schema
from vitplast.experiments import runs, runtime
from vitplast.train import finetune, keys

REGENERATE = "python -m vitplast.train.keys"


def test_the_published_run_schema_is_the_table_s():
    """The file is what ``keys.schema_text`` writes, character for character (a hand edit, or
    a key changed without regenerating, fails here)."""
    published = keys.SCHEMA_FILE.read_text()
    assert published == keys.schema_text(), f"run.schema.json is stale: run `{REGENERATE}`"
    assert json.loads(published) == keys.run_schema() == schema.document("run")


def test_train_s_defaults_are_the_table_s():
    signature = inspect.signature(finetune.train).parameters
    for key in (k for k in keys.KEYS if k.train):
        assert signature[key.name].default == key.default, key.name
    assert set(keys.DEFAULTS) <= set(signature)
    made = inspect.signature(runs.make_run).parameters
    for name in ("config", "seed", "checkpoint", "pretrained", "severity", "train_size",
                 "test_size", "data_seed"):
        assert made[name].default == keys.KEY[name].default, name


#: The hashed keys before the table, in their order: the table's hashed keys start with them.
HASHED_BEFORE = (
    "kind", "model", "checkpoint", "pretrained", "model_kwargs", "task", "severity",
    "train_size", "test_size", "data_seed", "img_size", "config", "train_head", "lr", "seed",
    "optimizer", "momentum", "weight_decay", "betas", "clip_grad_norm", "warmup_steps", "steps",
    "batch_size", "eval_every", "label_smoothing", "lr_scales", "prepare", "ablation")
#: The recipe defaults before the table (every ``make_run`` run holds them).
RECIPE_DEFAULTS_BEFORE = dict(
    train_head=True, optimizer="sgd", momentum=0.9, weight_decay=0.0, betas=[0.9, 0.999],
    clip_grad_norm=1.0, warmup_steps=0, steps=400, batch_size=128, eval_every=100,
    label_smoothing=0.0)


def test_run_keys_train_keys_and_defaults_are_read_from_the_table():
    """The lists are the table's columns, in its order; and, pinned here, what moves hashes:
    the hashed keys and recipe defaults that were before the table come first and are kept, and
    a later hashed key defaults to None (a new row moves no stored hash, and needs no edit
    here)."""
    assert runs.RUN_KEYS == tuple(k.name for k in keys.KEYS if k.hashed)
    assert runs.RUNTIME_KEYS == tuple(k.name for k in keys.KEYS if not k.hashed)
    assert runs.TRAIN_KEYS == tuple(k.name for k in keys.KEYS if k.train)
    assert runs.RUN_KEYS[:len(HASHED_BEFORE)] == HASHED_BEFORE
    later = runs.RUN_KEYS[len(HASHED_BEFORE):]
    assert all(keys.KEY[name].default is None for name in later), later
    assert list(runs.TRAIN_DEFAULTS) == [k.name for k in keys.KEYS if k.recipe]
    assert list(runs.TRAIN_DEFAULTS)[:len(RECIPE_DEFAULTS_BEFORE)] == list(RECIPE_DEFAULTS_BEFORE)
    assert runs.TRAIN_DEFAULTS == {**dict.fromkeys(runs.TRAIN_DEFAULTS), **RECIPE_DEFAULTS_BEFORE}
    for recipe in keys.RECIPES.values():  # a recipe sets recipe keys only
        assert set(recipe) <= set(runs.TRAIN_DEFAULTS)
    assert runs.run_hash(runs.make_run("digits", lr=0.1)) == "dd8a628654014c01"  # as before


def test_a_run_key_s_flag_takes_its_type_and_range_from_its_key():
    for flag in (f for f in runtime.FLAGS if f.run):
        key = keys.KEY[flag.name]
        assert (flag.type, flag.choices, flag.minimum) == (key.type, key.choices, key.minimum)
        assert (flag.run == "hashed") == key.hashed
    assert runs.RUNTIME_KEYS == (*(f.name for f in runtime.FLAGS if f.run in ("key", "allowed")),
                                 "log_every")


def test_a_new_key_is_one_row(monkeypatch, tmp_path):
    """A new hashed training key with a None default: one row of the table gives its schema
    property (a float with a minimum), its place in the run keys, and a regenerated file; a
    stored run's hash does not move."""
    row = keys.Key("lr_floor", float, None, "the least learning rate of the schedule",
                   train=True, nullable=True, minimum=0)
    assert row.property() == {"type": ["number", "null"], "minimum": 0,
                              "description": "the least learning rate of the schedule"}
    monkeypatch.setattr(keys, "KEYS", (*keys.KEYS, row))
    doc = keys.run_schema()
    assert doc["properties"]["lr_floor"] == row.property()
    assert "lr_floor" not in doc["required"]  # a None default: runs without it stay valid
    written = keys.write_schema(tmp_path / "run.schema.json")
    assert json.loads(written.read_text()) == doc
    run = runs.make_run("digits", lr=0.1)
    assert runs.run_hash({**run, "lr_floor": None}) == runs.run_hash(run)
    # With another default the schema requires it: stored runs, which lack it, would fail.
    other = keys.Key("lr_floor", float, 0.0, "the least learning rate of the schedule",
                     train=True, minimum=0)
    monkeypatch.setattr(keys, "KEYS", (*keys.KEYS[:-1], other))
    assert "lr_floor" in keys.run_schema()["required"]


@pytest.mark.parametrize("name", [k.name for k in keys.KEYS])
def test_every_default_passes_its_own_property(name):
    key = keys.KEY[name]
    if key.default in (None, keys.NO_DEFAULT):
        return
    value = json.loads(json.dumps(key.default))  # as a stored run holds it
    assert not schema.problems("run", {**runs.make_run("digits", lr=0.1), name: value})
