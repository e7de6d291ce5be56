"""The keys of a finetuning run, declared once: ``KEYS``, one ``Key`` row each (name, type,
default, range or choices, description, and what it is to a run).

Paper: section 2 (the finetuning protocol; PAPER.md section 2's recipe lies in the ranges).

Everything else is read from this table:

- ``finetune.train``'s keyword defaults (``DEFAULTS``);
- the run keys (``vitplast.experiments.runs``): ``RUN_KEYS`` (hashed: what a run computes),
  ``RUNTIME_KEYS`` (stored, never hashed: how it executes), ``TRAIN_KEYS`` (the ``train``
  keywords a run passes on) and ``TRAIN_DEFAULTS`` (a run's recipe settings before its recipe);
- the runtime flags that are run keys (``vitplast.experiments.runtime.FLAGS``: their type,
  range and choices);
- the published run schema, ``vitplast/schemas/run.schema.json`` (``run_schema``), generated:
  ``python -m vitplast.train.keys`` writes it, a test holds the file equal to the table.

``RECIPES`` are the named sets of settings a run starts from (``runs.make_run``'s ``recipe``).

The table's order is the schema's and the stores': its hashed keys first. A run's hash is
over its hashed keys that are not ``None`` (``runs.run_hash``), so a new hashed key with a
``None`` default re-hashes no stored run. A new hashed key with another default is required
by the run schema (``run_schema``): no stored run holds it, so each fails the schema (nothing
is re-hashed), and ``make_run`` fills it only if it is a recipe key (``TRAIN_DEFAULTS``) or one
of its own parameters, else its runs fail too. Importing this module imports no torch (the
command line reads it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

#: The optimizers ``finetune.train`` builds (``trainees``): SGD with momentum, or AdamW.
OPTIMIZERS = ("sgd", "adamw")
#: A run's numeric precisions (what each means: ``passes``, which reads them from here).
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: The default of a key that has none: a run always names it (``task``, the embedded ``model``).
NO_DEFAULT = "<no default>"
#: Python type -> its JSON Schema type.
JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object",
              list: "array"}
#: Where the published run schema lies (package data, read by ``vitplast.schema``).
SCHEMA_FILE = Path(__file__).parents[1] / "schemas" / "run.schema.json"


@dataclass(frozen=True)
class Key:
    """One key of a run.

    Attributes:
        name: the run key (and, when ``train``, the ``finetune.train`` keyword).
        type: ``int``, ``float``, ``str``, ``bool``, ``dict`` or ``list`` (None: ``schema``
            says it all).
        default: its value when not given (``finetune.train``'s, for a training key); None:
            left out of the run; ``NO_DEFAULT``: none (a run always names it).
        about: its description in the run schema.
        hashed: a run key, in the run's hash (what it computes); else a runtime key, stored
            and never hashed (how it executes).
        train: a ``finetune.train`` keyword that a run passes on.
        recipe: a recipe's setting (``RECIPES`` override it; ``TRAIN_DEFAULTS``).
        nullable: ``None`` (null) is valid.
        minimum, maximum, below, above: its range (``below``/``above``: exclusive bounds).
        choices: its valid values; empty: any of its type.
        schema: more of its JSON Schema property (e.g. ``minLength``, ``items``), or, with
            ``type=None``, all of it.
    """

    name: str
    type: type | None
    default: object = None
    about: str = ""
    hashed: bool = True
    train: bool = False
    recipe: bool = False
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple = ()
    schema: dict = field(default_factory=dict)

    def property(self) -> dict:
        """Its property in the run schema: type (with null when ``nullable``) or choices, range,
        ``schema``'s keywords and ``about``."""
        out: dict = {}
        if self.choices:
            out["enum"] = [*self.choices, *([None] if self.nullable else [])]
        elif self.type is not None:
            kind = JSON_TYPES[self.type]
            out["type"] = [kind, "null"] if self.nullable else kind
        for word, value in (("minimum", self.minimum), ("maximum", self.maximum),
                            ("exclusiveMinimum", self.above),
                            ("exclusiveMaximum", self.below)):
            if value is not None:
                out[word] = value
        out.update(self.schema)
        return {**out, **({"description": self.about} if self.about else {})}


_NAME = {"minLength": 1}
_RUNTIME = dict(hashed=False, nullable=True)
#: The keys of a run, declared once (module docstring). Hashed keys first, in the stores' order.
KEYS = (
    # what is finetuned, on what
    Key("kind", None, "finetune", schema={"const": "finetune"}, about="what a run is"),
    Key("model", str, NO_DEFAULT, schema=_NAME,
        about="the model vitplast.models.load_model loads"),
    Key("checkpoint", str, "final", schema=_NAME, about="a stage of its pretraining"),
    Key("pretrained", bool, True),
    Key("model_kwargs", dict, nullable=True, about="keywords of load_model"),
    Key("task", str, NO_DEFAULT, schema=_NAME, about="a name of vitplast.tasks.TASKS"),
    Key("severity", int, 5, minimum=1, maximum=5, about="corruption severity"),
    Key("train_size", int, 5000, minimum=1, about="images drawn for train+val"),
    Key("test_size", int, 2000, minimum=1, about="images drawn for test"),
    Key("data_seed", int, 0, about="fixes the splits"),
    Key("img_size", int, nullable=True, minimum=1, about="a paper dataset's image side"),
    # how: the configuration and the recipe
    Key("config", None, "full", train=True, schema={
        "type": ["string", "array"], "minLength": 1, "minItems": 1,
        "items": {"type": "string", "minLength": 1}},
        about="what is finetuned: a configuration name or parameter-name patterns"),
    Key("train_head", bool, True, train=True, recipe=True),
    Key("lr", float, 1e-2, train=True, above=0, about="the peak learning rate"),
    Key("seed", int, 0, train=True, about="data order and the new head's init"),
    Key("optimizer", str, "sgd", train=True, recipe=True, choices=OPTIMIZERS),
    Key("momentum", float, 0.9, train=True, recipe=True, minimum=0, below=1,
        about="SGD momentum"),
    Key("weight_decay", float, 0.0, train=True, recipe=True, minimum=0),
    Key("betas", None, (0.9, 0.999), train=True, recipe=True, schema={
        "type": "array", "minItems": 2, "maxItems": 2,
        "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}},
        about="AdamW's (beta1, beta2)"),
    Key("clip_grad_norm", float, 1.0, train=True, recipe=True, nullable=True, minimum=0,
        about="the gradient-norm clipping threshold; 0 or null: no clipping"),
    Key("warmup_steps", int, 0, train=True, recipe=True, minimum=0),
    Key("steps", int, 400, train=True, recipe=True, minimum=1, about="optimisation steps"),
    Key("batch_size", int, 128, train=True, recipe=True, minimum=1,
        about="images per step, at most the task's training split"),
    Key("eval_every", int, 100, train=True, recipe=True, minimum=1,
        about="steps between evaluations"),
    Key("label_smoothing", float, 0.0, train=True, recipe=True, minimum=0, below=1),
    Key("lr_scales", dict, train=True, nullable=True,
        schema={"additionalProperties": {"type": "number", "minimum": 0}},
        about="parameter-name pattern -> learning-rate multiplier"),
    # ablations (``vitplast.train.ablations``): a model change before training, and its arguments
    Key("prepare", str, nullable=True, schema=_NAME,
        about="an ablation's name (ablations.PREPARE)"),
    Key("ablation", dict, nullable=True, about="the ablation's arguments"),
    # runtime keys: how a run executes (most are runtime flags, ``runtime.FLAGS``)
    Key("device", str, **_RUNTIME),
    Key("workers", int, 0, train=True, minimum=0, about="data loader workers", **_RUNTIME),
    Key("precision", str, "auto", train=True, choices=PRECISIONS, **_RUNTIME),
    Key("accum_steps", int, 1, train=True, minimum=1,
        about="micro-batches per step; divides batch_size", **_RUNTIME),
    Key("data_root", str, **_RUNTIME),
    Key("weights_file", str, **_RUNTIME),
    Key("log_every", int, 10, train=True, minimum=1, about="steps between logged rows",
        **_RUNTIME),
)
#: Each key by its name.
KEY = {k.name: k for k in KEYS}
#: ``finetune.train``'s keyword defaults (its training keys').
DEFAULTS = {k.name: k.default for k in KEYS if k.train}

_DESCRIPTION = (
    "One run as vitplast.experiments.runs.make_run makes it: the record of a run holds it "
    "under `run`. Run keys define the run (its hash names its record); runtime keys change how "
    "it executes, never what it computes. A run whose settings fail this schema is refused "
    "before any work. Besides: a run's micro-batch (batch_size / accum_steps) is at most its "
    "task's training split (checked when a sweep is planned, since the split depends on the "
    "task).")


def run_schema() -> dict:
    """The published run schema, from ``KEYS``: a property per key; required, every hashed
    key whose default is not None (a valid run holds it); no other key."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:vitplast:schema:run",
        "title": "A finetuning run's settings",
        "description": _DESCRIPTION,
        "type": "object",
        "required": [k.name for k in KEYS if k.hashed and k.default is not None],
        "additionalProperties": False,
        "properties": {k.name: k.property() for k in KEYS}}


def schema_text() -> str:
    """``run_schema`` as the published file holds it: one property a line."""
    doc = run_schema()
    head = {k: v for k, v in doc.items() if k != "properties"}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    props = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc["properties"].items()]
    return "{\n" + "\n".join(lines) + '\n "properties": {\n' + ",\n".join(props) + "\n }\n}\n"


def write_schema(path: Path = SCHEMA_FILE) -> Path:
    """Write ``schema_text`` to ``path`` (default: the published file); return it."""
    path.write_text(schema_text())
    return path


#: Named recipes (keyword arguments of ``train``). ``paper`` is PAPER.md section 2.
RECIPES = {
    "paper": dict(optimizer="sgd", momentum=0.9, weight_decay=0.0, clip_grad_norm=1.0,
                  warmup_steps=2000, steps=10_000, batch_size=512),
    # The paper's optimiser, sized for the embedded model on a CPU (one core: ~30 s a head-only
    # run, ~80 s a full one, as the shipped study measured):
    # 120 steps of 64 images, about 2 epochs of a 4,000-image train split.
    "embedded": dict(optimizer="sgd", momentum=0.9, weight_decay=0.0, clip_grad_norm=1.0,
                     warmup_steps=12, steps=120, batch_size=64, eval_every=20),
}


if __name__ == "__main__":  # python -m vitplast.train.keys: regenerate the published schema
    print(f"wrote {write_schema()}")
