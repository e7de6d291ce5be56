"""The published schemas (``vitplast.schema``, ``vitplast/schemas/``): valid JSON Schema documents
in step with the code; every range of the run schema holds at its edges; a value that fails is
worded with its key, the value found and what is expected."""

import copy
import fnmatch
import json
import math
import random
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from vitplast import cached, schema
from vitplast.experiments import runs, runtime, store
from vitplast.measure.components import names
from vitplast.train import keys, preflight
from vitplast.train.passes import PRECISIONS

RUN = runs.make_run("digits", lr=0.1)


def test_every_document_is_draft_2020_12_and_names_its_kind():
    assert set(schema.KINDS) >= {"after", "cache-index", "layers", "plasticity", "probe",
                                 "record", "run", "scales", "study"}  # and any kind added
    for kind in schema.KINDS:
        doc = schema.document(kind)
        jsonschema.Draft202012Validator.check_schema(doc)
        assert doc["$id"] == schema.ID_PREFIX + kind and doc["title"] and doc["description"]
    with pytest.raises(ValueError, match=r"unknown schema 'runs'; valid: \['advise', 'after', "):
        schema.problems("runs", {})
    defs = [name for kind in schema.KINDS for name in schema.document(kind).get("$defs", {})]
    assert len(defs) == len(set(defs))  # a local $ref names one definition of them all


def test_the_schemas_are_in_step_with_the_code():
    """Keys, choices and statuses are written in the documents; each matches its home here."""
    run = schema.document("run")  # generated from keys.KEYS: tests/train/test_keys.py
    assert list(run["properties"]) == [*runs.RUN_KEYS, *runs.RUNTIME_KEYS]
    assert run["properties"]["optimizer"]["enum"] == list(preflight.OPTIMIZERS)
    assert run["properties"]["precision"]["enum"] == [*PRECISIONS, None]
    for flag in (f for f in runtime.FLAGS if f.run):  # a run key's flag: its key's range
        assert flag.minimum == run["properties"][flag.name].get("minimum")
        assert list(flag.choices) == [c for c in run["properties"][flag.name].get("enum", [])
                                      if c is not None]
    assert set(run["required"]) == set(RUN) - {"lr_scales", "prepare", "ablation"}
    assert "enum" not in schema.document("plasticity")["$defs"]["component"]  # the table's
    # names are the component table's, given where used (components=): no copy of them here
    assert schema.document("record")["properties"]["status"]["enum"] == list(store.STATUSES)
    assert sorted(set(cached.COMPANIONS.values())) == sorted(
        set(schema.KINDS) - {"run", "record", "cache-index"})
    for recipe in keys.RECIPES:  # every recipe makes a valid run
        assert schema.problems("run", runs.make_run("digits", lr=0.1, recipe=recipe)) == []


#: (key, values at the edge that pass, values just past it that fail, the expected range)
EDGES = [
    ("lr", [1e-12, 10.0], [0, -1e-12, math.nan, math.inf, True], "a number > 0"),
    ("clip_grad_norm", [0.0, 0, 1e-9, None, 5.0], [-1e-9, -1.0, math.inf],
     "a number >= 0, or null"),
    ("momentum", [0.0, 0.999], [1.0, -1e-9, 1.5], "a number >= 0 and < 1"),
    ("weight_decay", [0.0, 5e-4], [-1e-9, -0.1], "a number >= 0"),
    ("label_smoothing", [0.0, 0.999], [1.0, 1.5, -0.1], "a number >= 0 and < 1"),
    ("steps", [1, 10_000], [0, -3, 1.0, True], "an integer >= 1"),
    ("batch_size", [1, 512], [0, -8, 16.0], "an integer >= 1"),
    ("warmup_steps", [0, 12], [-1, 1.5], "an integer >= 0"),
    ("eval_every", [1, 20], [0, 2.0], "an integer >= 1"),
    ("severity", [1, 5], [0, 6], "an integer >= 1 and <= 5"),
    ("train_size", [1], [0], "an integer >= 1"),
    ("test_size", [1], [0], "an integer >= 1"),
    ("seed", [-1, 0, 2**40], [1.5, "0", None], "an integer"),
    ("data_seed", [0, 7], [0.5], "an integer"),
    ("betas", [[0.0, 0.0], [0.9, 0.999]], [[0.9], [0.9, 1.0], [0.9, 0.99, 0.9], "0.9"],
     "an array of 2 (each a number >= 0 and < 1)"),  # [0.9, 1.0]: betas[1]=1.0 is not valid
    ("optimizer", ["sgd", "adamw"], ["adam", None], "one of ['sgd', 'adamw']"),
    ("config", ["full", ["blocks.0.*"]], ["", [], [3], 3], "a non-empty string or an array"),
    ("kind", ["finetune"], ["pretrain"], "exactly 'finetune'"),
    ("task", ["digits"], ["", 3], "a non-empty string"),
    ("pretrained", [True, False], [1, "yes"], "a boolean"),
    ("train_head", [True, False], [0, None], "a boolean"),
    ("model", ["vitplast_fmnist"], ["", None], "a non-empty string"),
    ("checkpoint", ["final"], [""], "a non-empty string"),
    ("prepare", ["gauge", None], ["", 3], "a non-empty string, or null"),
    ("img_size", [1, 224, None], [0], "an integer >= 1, or null"),
    ("lr_scales", [{"blocks.*": 0.0}, None], [{"blocks.*": -1.0}, [1]], "an object whose"),
    ("workers", [0, 8, None], [-1], "an integer >= 0, or null"),
    ("log_every", [1, None], [0], "an integer >= 1, or null"),
    ("accum_steps", [1, 4, None], [0], "an integer >= 1, or null"),
    ("precision", [*PRECISIONS, None], ["fp8"], "one of ['auto', 'fp32', 'bf16', 'fp16', null]"),
]


def test_every_ranged_setting_is_tested_at_its_edges():
    """A setting with a range or a set of choices (bounds, length, enum, const) is in EDGES."""
    ranged = {k for k, p in schema.document("run")["properties"].items()
              if {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minItems",
                  "minLength", "enum", "const", "additionalProperties"} & set(p)}
    assert ranged - {e[0] for e in EDGES} == set()


@pytest.mark.parametrize("key, good, bad, expected", EDGES, ids=[e[0] for e in EDGES])
def test_every_range_of_the_run_schema_holds_at_its_edges(key, good, bad, expected):
    for value in good:
        assert schema.problems("run", {**RUN, key: value}) == [], value
    for value in bad:  # the value, or the item of it that fails (betas[1], lr_scales.x)
        found = schema.problems("run", {**RUN, key: value})
        assert len(found) == 1 and found[0].startswith(f"{key}"), found
        if found[0].startswith(f"{key}="):
            assert found[0].startswith(f"{key}={value!r} is not valid: expected {expected}")
        with pytest.raises(ValueError, match=f"a run's settings: {re.escape(found[0])}"):
            runs.check_run({**RUN, key: value})


def test_a_missing_or_unknown_key_is_named_with_what_is_valid():
    assert schema.problems("run", {k: v for k, v in RUN.items() if k != "lr"}) == [
        "lr is missing: expected a number > 0 (the peak learning rate)"]
    assert schema.problems("run", {**RUN, "lrr": 0.1})[0].startswith(
        "lrr is not a known key (did you mean 'lr'?); valid: ['kind', 'model'")
    assert schema.problems("run", [RUN]) == [
        f"the value {[RUN]!r}"[:67] + "... is not valid: expected an object with "
        f"{schema.document('run')['required']}"]


def test_problems_name_the_path_the_value_and_the_range_in_nested_files():
    rows = {"task": "t", "n_pairs": 8, "protocol": "hidden", "rows": [1, 2, 3]}
    assert schema.problems("plasticity", rows) == [
        f"rows[{i}]={i + 1} is not valid: expected an object with ['layer', 'component', "
        "'plasticity']" for i in range(3)]
    record = {"run": {**RUN, "clip_grad_norm": -1.0}, "status": "ok", "test_acc": 2.0,
              "best_val_acc": 0.5, "history": [{"step": 0, "loss": "x"}]}
    assert schema.problems("record", record) == [
        "history[0].loss='x' is not valid: expected a number >= 0, or null",
        "run.clip_grad_norm=-1.0 is not valid: expected a number >= 0, or null (the "
        "gradient-norm clipping threshold; 0 or null: no clipping)",
        "test_acc=2.0 is not valid: expected a number >= 0 and <= 1, or null (a fraction; "
        "null when not measured)"]
    after = {"run": RUN, "n_pairs": 8, "before": {"FC9": 1.0}, "after": {"FC1": 1.0}}
    assert schema.problems("after", after, components=names()) == [
        "before has a key 'FC9' that is not valid: expected one of ['LN1', 'MHA', 'LN2', "
        "'FC1', 'FC2']"]


def test_an_ok_record_must_hold_its_results():
    ok = {"run": RUN, "status": "ok", "test_acc": 0.9, "best_val_acc": 0.8,
          "history": [{"step": 0, "loss": 1.0}]}
    assert schema.problems("record", ok) == []
    assert schema.problems("record", {**ok, "test_acc": None, "history": []}) == [
        "history=[] is not valid: expected an array of at least 1 (an ok run holds its results)",
        "test_acc=None is not valid: expected a number (an ok run holds its results)"]
    assert schema.problems("record", {**ok, "status": "diverged", "test_acc": None}) == []


def test_json_numbers_are_finite_and_integers_are_not_floats():
    probe = dict(task="t", model="m", probe="p", test_acc=50.0, val_acc=50.0, train_acc=50.0)
    for bad in (math.nan, math.inf, "50", True):
        assert schema.problems("probe", {**probe, "test_acc": bad}) == [
            f"test_acc={bad!r} is not valid: expected a number >= 0 and <= 100 (in %)"]
    assert schema.problems("probe", {**probe, "n_train": 10.0}) == [
        "n_train=10.0 is not valid: expected an integer >= 1"]


def test_many_problems_are_cut_saying_how_many_more():
    rows = {"task": "t", "n_pairs": 8, "protocol": "hidden", "rows": list(range(9))}
    found = schema.problems("plasticity", rows)
    assert len(found) == schema.MAX_PROBLEMS + 1 and found[-1] == "... and 4 more"
    with pytest.raises(ValueError, match=r"plasticity-x.json: rows\[0\]=0 .*\(schema: "
                                         r"schemas/plasticity.schema.json\)"):
        schema.check("plasticity", rows, "plasticity-x.json")


def test_expected_words_a_schema_from_the_document_itself():
    assert schema.expected({"type": ["number", "null"], "minimum": 0, "description": "d"}) == (
        "a number >= 0, or null (d)")
    assert schema.expected({"type": "integer", "minimum": 1, "maximum": 5}) == (
        "an integer >= 1 and <= 5")
    assert schema.expected({"$ref": "urn:vitplast:schema:plasticity#/$defs/protocol"}) == (
        "one of ['hidden', 'embedding']")


def _shipped_files() -> dict[str, list]:
    """Kind -> the contents of shipped files of that kind: two of each kind per store (a
    record's ``run`` is a run, a kept ``.npz`` table's index a cache index)."""
    out: dict[str, list] = {kind: [] for kind in schema.KINDS}
    for folder in sorted(Path(__file__).resolve().parents[1].joinpath("data").iterdir()):
        taken: dict[str, int] = {}  # two files of each kind per folder
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            kinds = ["record"] if re.fullmatch(r"[0-9a-f]{16}", path.stem) else [
                k for pattern, k in cached.COMPANIONS.items()
                if fnmatch.fnmatch(path.name, pattern)]
            if kinds and taken.get(kinds[0], 0) < 2:
                taken[kinds[0]] = taken.get(kinds[0], 0) + 1
                out[kinds[0]].append(json.loads(path.read_text()))
        for path in sorted(folder.glob("*.npz"))[:2] if folder.is_dir() else ():
            with np.load(path, allow_pickle=False) as z:
                out["cache-index"].append(json.loads(str(z["schema"])))
    out["run"] = [record["run"] for record in out["record"]]
    return out


def _damaged(value, rng) -> list:
    """Copies of ``value`` each with one damage: a leaf replaced (wrong type, out of range,
    1.0 for an integer, NaN, a tuple), a key dropped or one added."""
    leaves = []

    def walk(node, path):
        items = node.items() if isinstance(node, dict) else (
            enumerate(node) if isinstance(node, list) else ())
        for key, child in items:
            leaves.append((*path, key))
            walk(child, (*path, key))

    walk(value, ())
    swaps = (None, -1, 0, 1.0, 0.5, 2.0, 1e9, "", "x", True, [], {}, math.nan, (1, 2))
    out = []
    for path in rng.sample(leaves, min(len(leaves), 12)):
        for swap in (*rng.sample(swaps, 3), "drop"):
            damaged = copy.deepcopy(value)
            node = damaged
            for key in path[:-1]:
                node = node[key]
            if swap == "drop":
                node.pop(path[-1]) if isinstance(node, dict) else node.pop()
            else:
                node[path[-1]] = swap
            out.append(damaged)
    if isinstance(value, dict):
        out.append({**value, "not_a_key": 1})
    return out


def test_the_compiled_check_decides_as_the_reference_on_shipped_and_damaged_files():
    """The fast engine accepts exactly what ``jsonschema`` accepts on plain JSON, and leaves
    everything else (NaN, tuples) to it: ``problems`` is the reference's verdict, faster."""
    rng = random.Random(0)
    compared = accepted = 0
    shipped = _shipped_files()
    assert all(shipped.values()), [k for k, v in shipped.items() if not v]  # every kind
    for kind, values in shipped.items():
        for value in values:
            assert schema._compiled_accepts(kind, value), kind  # every shipped file: the fast path
            for damaged in _damaged(value, rng):
                reference = not any(schema._validator(kind).iter_errors(damaged))
                fast = schema._compiled_accepts(kind, damaged)
                assert fast == reference or (not fast and _not_plain_json(damaged)), (
                    kind, damaged)
                compared, accepted = compared + 1, accepted + fast
    assert compared > 1000 and 0 < accepted < compared  # both verdicts met, many times


def _not_plain_json(value) -> bool:
    try:
        return json.loads(json.dumps(value, allow_nan=False)) != value
    except ValueError:
        return True


def test_a_run_inside_a_record_is_held_to_the_same_types():
    """A ``$ref`` to another document keeps the kit's types (an integer is not a float, a
    number is finite) in both engines."""
    record = {"run": RUN, "status": "ok", "test_acc": 0.9, "best_val_acc": 0.8,
              "history": [{"step": 0, "loss": 1.0}]}
    assert schema.problems("record", {**record, "run": {**RUN, "steps": 120.0}}) == [
        "run.steps=120.0 is not valid: expected an integer >= 1 (optimisation steps)"]
    assert schema.problems("record", {**record, "run": {**RUN, "lr": math.inf}}) == [
        "run.lr=inf is not valid: expected a number > 0 (the peak learning rate)"]
    assert not schema._compiled_accepts("record", {**record, "run": {**RUN, "steps": 120.0}})
