"""Schemas: what every stored file and every run's settings must be, as published JSON Schema
documents (``vitplast/schemas/<kind>.schema.json``, shipped in the package; any tool that reads
JSON Schema draft 2020-12 can read them), and the one check that reads them.

A kind (``KINDS``) is the stem of its document: ``run`` (a run's settings), ``record`` (a run
record), ``study`` (a store's session log), the files kept beside a study's records
(``scales``, ``layers``, ``after``, ``plasticity``, ``probe``, ``advise``: which file names are
which kind is ``cached.COMPANIONS``) and ``cache-index`` (the index of a load-or-compute table,
``vitplast.cached``). Documents refer to each other by ``$id`` (``urn:vitplast:schema:<kind>``):
a record's ``run`` is a run.

``problems(kind, value)`` lists, in words, every place where ``value`` fails its kind: the key
(a path such as ``rows[0].plasticity``), the value found and what is expected (type and range,
worded from the schema itself), e.g. ``clip_grad_norm=-1.0 is not valid: expected a number
>= 0, or null (the gradient-norm clipping threshold; 0 or null: no clipping)``. ``check`` raises
them. As in JSON, a number is finite (no NaN or infinity) and an integer is not a float.

Two engines read the documents. ``fastjsonschema`` compiles each one to Python and decides
first: a value it accepts is accepted (many times faster than ``jsonschema``, which matters
to a store of thousands of records read in every notebook). Any other value goes to
``jsonschema``, the reference, which decides and words the problems. The compiled check never
accepts what the reference refuses: every keyword the documents use means the same to both;
integers are ints (``fastjsonschema`` would take 1.0) and a value that is not plain JSON (NaN,
a tuple, a key that is not a string) is left to the reference (``tests/test_schema.py``
compares the two on shipped files of every kind and on damaged copies of them).

The ``run`` document is generated from the table of a run's keys (``vitplast.train.keys``:
``python -m vitplast.train.keys`` rewrites it; a test holds it current), the others are written
by hand. A new kind is one document in ``vitplast/schemas/`` (its stem is its kind); a new companion
kind of a store is that plus one line of ``cached.COMPANIONS`` (and, in its tests, a valid
example and three damages: ``tests/experiments/test_store.py``).
"""

from __future__ import annotations

import functools
import json
import math
import numbers
from pathlib import Path

#: Where the schema documents are (package data).
FOLDER = Path(__file__).parent / "schemas"
#: The kinds with a published schema: the stems of ``FOLDER``'s documents.
KINDS = tuple(sorted(p.name.removesuffix(".schema.json") for p in FOLDER.glob("*.schema.json")))
#: The ``$id`` of kind ``k`` is ``ID_PREFIX + k``.
ID_PREFIX = "urn:vitplast:schema:"
#: At most this many problems are worded per value (then how many more there are).
MAX_PROBLEMS = 5
_TYPE_WORDS = {"number": "a number", "integer": "an integer", "string": "a string",
               "boolean": "a boolean", "null": "null", "object": "an object",
               "array": "an array"}


def document(kind: str) -> dict:
    """The schema document of ``kind`` (a copy); ``ValueError`` naming the kinds for another."""
    return json.loads(json.dumps(_documents()[_kind(kind)]))


def problems(kind: str, value, components: tuple[str, ...] | None = None) -> list[str]:
    """Every way ``value`` fails the schema of ``kind``, worded (module docstring); empty when
    it passes. At most ``MAX_PROBLEMS``, then a line saying how many more. ``components``: the
    names a component may take, those of the table measured with, e.g.
    ``components.names()`` or ``components.names(components.extended(row))`` (None: any
    non-empty name, as the published documents say: the table lives in the measuring layer,
    above this one, and a row added to it changes no document)."""
    names = None if components is None else tuple(components)
    if _compiled_accepts(_kind(kind), value, names):
        return []
    lines = sorted({line for e in _validator(kind, names).iter_errors(value)
                    for line in _words(e)})  # in the order of the keys they name
    if len(lines) > MAX_PROBLEMS:
        lines = lines[:MAX_PROBLEMS] + [f"... and {len(lines) - MAX_PROBLEMS} more"]
    return lines


def check(kind: str, value, what: str = "", components: tuple[str, ...] | None = None):
    """``value`` if it passes the schema of ``kind``, else ``ValueError`` with its
    ``problems`` (after ``what``, e.g. the file's name; ``components`` as ``problems``)."""
    found = problems(kind, value, components)
    if found:
        raise ValueError(f"{what}{': ' if what else ''}{'; '.join(found)} "
                         f"(schema: {FOLDER.name}/{_kind(kind)}.schema.json)")
    return value


def expected(schema: dict) -> str:
    """What ``schema`` (a document or a part of one) accepts, in words: its types, ranges,
    choices and, in parentheses, its description."""
    words = _accepts(schema)
    if "$ref" in schema and "description" not in schema:
        schema = _resolve(schema["$ref"])
    return f"{words} ({schema['description']})" if schema.get("description") else words


def _accepts(schema: dict) -> str:
    if "$ref" in schema:
        return _accepts(_resolve(schema["$ref"]))
    if "allOf" in schema:  # one schema of the parts' keys (their required keys together)
        merged: dict = {}
        for part in schema["allOf"]:
            for key, value in (_resolve(part["$ref"]) if "$ref" in part else part).items():
                merged[key] = merged.get(key, []) + value if key == "required" else value
        return _accepts(merged)
    if "const" in schema:
        return f"exactly {schema['const']!r}"
    if "enum" in schema:
        return f"one of {schema['enum']!r}".replace("None", "null")
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    words = [_one_type(t, schema) for t in types if t != "null"]
    if "required" in schema and not types:
        words.append(f"an object with {schema['required']}")
    text = " or ".join(words)
    return f"{text}, or null" if "null" in types and text else (text or "null" * bool(types))


def _one_type(name: str, schema: dict) -> str:
    """One type of ``schema`` in words, with what narrows it."""
    words = _TYPE_WORDS[name]
    if name in ("number", "integer"):
        bounds = [f"{op} {schema[key]}" for key, op in (
            ("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
            ("exclusiveMaximum", "<")) if key in schema]
        words += (" " + " and ".join(bounds)) if bounds else ""
    elif name == "array":
        if "minItems" in schema and schema.get("maxItems") == schema["minItems"]:
            words = f"an array of {schema['minItems']}"
        elif "minItems" in schema:
            words = f"an array of at least {schema['minItems']}"
        if "items" in schema:
            words += f" (each {_accepts(schema['items'])})"
    elif name == "object":
        if "required" in schema:
            words += f" with {schema['required']}"
        if isinstance(schema.get("additionalProperties"), dict):
            words += f" whose values are each {_accepts(schema['additionalProperties'])}"
    elif name == "string" and schema.get("minLength"):
        words = "a non-empty string"
    return words


def _words(error) -> list[str]:
    """The problem lines of one ``jsonschema`` error."""
    path = _path(error.absolute_path)
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        props = error.schema.get("properties", {})
        return [f"{_join(path, k)} is missing: expected "
                f"{expected(props[k]) if k in props else 'a value'}" for k in missing]
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = list(error.schema.get("properties", {}))
        return [f"{_join(path, k)} is not a known key{_close(k, known)}; valid: {known}"
                for k in sorted(set(error.instance) - set(known))]
    if "propertyNames" in error.relative_schema_path:
        return [f"{path or 'the value'} has a key {error.instance!r} that is not valid: "
                f"expected {_accepts(error.schema)}"]
    schema = error.schema if isinstance(error.schema, dict) else {}
    if not path:  # the whole value: its type, without the document's description
        return [f"the value {_short(error.instance)} is not valid: expected {_accepts(schema)}"]
    if error.validator in ("$ref", "allOf") or not schema:
        return [f"{path or 'the value'}={_short(error.instance)} is not valid: {error.message}"]
    return [f"{path or 'the value'}={_short(error.instance)} is not valid: expected "
            f"{expected(schema)}"]


def _close(key: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key), known, n=2)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown schema {kind!r}; valid: {list(KINDS)} "
                         f"(the documents in vitplast/{FOLDER.name}/)")
    return kind


@functools.lru_cache(maxsize=None)
def _documents(names: tuple[str, ...] | None = None) -> dict[str, dict]:
    """The documents; with ``names``, a component (``plasticity``'s ``$defs``, which the
    others refer to) is one of those names (the published one is any non-empty name)."""
    docs = {k: json.loads((FOLDER / f"{k}.schema.json").read_text()) for k in KINDS}
    if names is not None:
        docs["plasticity"]["$defs"]["component"] = dict(
            docs["plasticity"]["$defs"]["component"], enum=list(names))
    return docs


def _resolve(ref: str) -> dict:
    """The part of a document that ``ref`` (``urn:...:<kind>#/$defs/x``, or ``#/$defs/x`` of
    the document that holds it: ``$defs`` names are unique across the documents) names, for
    wording only."""
    head, _, pointer = ref.partition("#")
    docs = ([_documents()[head.removeprefix(ID_PREFIX)]] if head
            else list(_documents().values()))
    for doc in docs:
        node = doc
        try:
            for part in filter(None, pointer.split("/")):
                node = node[part]
            return node
        except KeyError:
            continue
    return {}


@functools.lru_cache(maxsize=None)
def _validator(kind: str, names: tuple[str, ...] | None = None):
    """A draft 2020-12 validator of ``kind``, its documents registered by ``$id``, with JSON's
    numbers (finite) and integers (no floats, no booleans)."""
    import jsonschema
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    # without their "$schema", the documents a "$ref" reaches are read with these types too
    # (with it, jsonschema would read them with its stock draft 2020-12 types)
    registry = Registry().with_resources(
        (doc["$id"], DRAFT202012.create_resource(
            {k: v for k, v in doc.items() if k != "$schema"}))
        for doc in _documents(names).values())
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine_many({
        "number": lambda _, v: (isinstance(v, numbers.Real) and not isinstance(v, bool)
                                and math.isfinite(v)),
        "integer": lambda _, v: isinstance(v, numbers.Integral) and not isinstance(v, bool)})
    strict = jsonschema.validators.extend(base, type_checker=checker)
    return strict(_documents(names)[kind], registry=registry)


def _compiled_accepts(kind: str, value, names: tuple[str, ...] | None = None) -> bool:
    """Whether ``kind``'s compiled check accepts ``value``: never when the reference refuses it
    (module docstring); False leaves the decision to the reference."""
    if not _plain_json(value):
        return False
    try:
        _compiled(kind, names)(value)
    except ValueError:  # refused (JsonSchemaException)
        return False
    return True


def _plain_json(value) -> bool:
    """Whether ``value`` is JSON as ``json.loads`` makes it, finite: dicts with string keys,
    lists, strings, ints, finite floats, booleans, None (no tuple, no NaN)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_json(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int))  # a bool is an int


def _absolute_refs(node, doc_id: str):
    """``node`` with each local ``$ref`` (``#/$defs/x``) made ``<doc_id>#/$defs/x``: a URN is no
    base that ``fastjsonschema`` joins a bare fragment to."""
    if isinstance(node, dict):
        return {k: doc_id + v if k == "$ref" and v.startswith("#") else _absolute_refs(v, doc_id)
                for k, v in node.items()}
    return [_absolute_refs(v, doc_id) for v in node] if isinstance(node, list) else node


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, names: tuple[str, ...] | None = None):
    """``kind``'s document compiled to Python by ``fastjsonschema`` (the other documents
    reached through their ``$id``), its integers ints: draft 4's type check, not the later
    drafts' that takes a float without a fraction for an integer."""
    from fastjsonschema import RefResolver
    from fastjsonschema.draft04 import CodeGeneratorDraft04
    from fastjsonschema.draft2019 import CodeGeneratorDraft2019

    class Generator(CodeGeneratorDraft2019):
        generate_type = CodeGeneratorDraft04.generate_type

    documents = {doc["$id"]: _absolute_refs(doc, doc["$id"])
                 for doc in _documents(names).values()}
    document = documents[ID_PREFIX + kind]
    resolver = RefResolver.from_schema(document, handlers={"urn": documents.__getitem__},
                                       store={})
    generator = Generator(document, resolver=resolver, use_default=False, use_formats=False)
    scope = generator.global_state
    exec(generator.func_code, scope)  # the validator's source, generated from the document
    return scope[resolver.get_scope_name()]


__all__ = ["FOLDER", "ID_PREFIX", "KINDS", "MAX_PROBLEMS", "check", "document", "expected",
           "problems"]
