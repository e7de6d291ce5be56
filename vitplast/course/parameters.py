"""The parameters a notebook receives, checked where it runs, and the shipped stores it reads.

A notebook declares its parameters in its cell tagged ``parameters``, one typed literal a line
(``n_pairs: int = 512  # comment``): ``declared`` reads them (default and type), ``fits`` says
whether a value is of its declared type, and ``check`` returns the values coerced to it or
raises naming the parameter. A value given as text becomes its declared type when it reads as
a Python or JSON literal of that type: plain papermill passes ``-p tasks '["digits"]'`` as the
string ``'["digits"]'``, which becomes the list ``["digits"]``.

``setup(name, namespace)`` is every notebook's first code cell, so that papermill, JupyterLab
and ``vitplast notebooks run`` give the same messages: it checks and coerces the parameters in
the notebook's namespace, checks the task names they hold, returns the notebook's model as a
value (``model_name`` with its ``weights_file`` and ``model_args``: ``models.model_spec``), which
the notebook passes to every function that loads it, and stops at once when the notebook
would read a shipped study store that is not there, with one message naming ``VITPLAST_DATA``
and the folders it needs (``missing_stores``, from ``READS`` and the study registry). The
stores a notebook reads are declared in the notebook itself (its metadata's ``vitplast``:
``reads``), so a new notebook changes no list here.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

from vitplast import files, models, weights
from vitplast.datasets import tasks
from vitplast.experiments import archive, studies

#: The notebooks' folder (package data): the parameters cells ``setup`` reads.
NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def reads(notebook: str) -> list[tuple[str | None, str]]:
    """The study stores ``notebook`` reads, as its own metadata declares them (``vitplast``:
    ``reads``): (the parameter naming the store's folder, whose empty value means the study's
    own store, or None where no parameter replaces it; the study: a name of
    ``studies.STUDIES``, ``"study"`` for the notebook's ``study`` parameter or
    ``"study.baselines"`` for that study's baselines). With ``recompute`` on, the study of the
    ``study`` parameter (and its baselines) is read from its cache copy, not the shipped store."""
    nb = json.loads((NOTEBOOK_DIR / f"{notebook}.ipynb").read_text())
    return [(param, study) for param, study in nb["metadata"].get("vitplast", {}).get("reads", [])]


#: Notebook -> the study stores it reads (``reads``), for every notebook that reads any.
READS: dict[str, list[tuple[str | None, str]]] = {
    p.stem: found for p in sorted(NOTEBOOK_DIR.glob("*.ipynb")) if (found := reads(p.stem))}


def reads_in_words(notebook: str) -> list[str]:
    """``reads`` of ``notebook`` in words, one store each ("the suite study's store, or the
    folder results_dir names"), for ``vitplast notebooks list``; empty where it reads none."""
    words = {"study": "the store of the study named by `study`",
             "study.baselines": "that study's baselines"}
    return [words.get(which, f"the {which} study's store")
            + (f", or the folder {param} names" if param else "")
            for param, which in READS.get(notebook, [])]


#: Parameters that name tasks (``vitplast.datasets.tasks.TASKS``); an empty ``source`` names none.
TASK_PARAMETERS = ("task", "tasks", "pretraining_tasks", "source")


def _parameters_cell(path: Path) -> str:
    nb = json.loads(Path(path).read_text())
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return "".join(cell["source"])
    raise ValueError(f"{Path(path).name} has no cell tagged 'parameters'")


def declared(path: str | Path) -> dict[str, tuple]:
    """Each parameter of the notebook at ``path``: (default value, declared type as written in
    its annotation, e.g. ``"list[float]"``, else the type name of its default)."""
    out = {}
    for node in ast.parse(_parameters_cell(Path(path))).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        for target in targets:
            value = ast.literal_eval(node.value)
            kind = (ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign)
                    else type(value).__name__)
            out[target.id] = (value, kind)
    return out


def fits(value, kind: str) -> bool:
    """Whether ``value`` is of the declared type ``kind`` (an int is a float; a list's
    elements are checked when the annotation names them, e.g. ``list[str]``; a dict's keys are
    text)."""
    base, _, inner = kind.partition("[")
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    kinds = {"str": str, "bool": bool, "list": list, "dict": dict, "NoneType": type(None)}
    if base not in kinds or not isinstance(value, kinds[base]):
        return base not in kinds  # an annotation vitplast does not know: not checked
    if base == "list" and inner:
        return all(fits(v, inner.rstrip("]")) for v in value)
    if base == "dict":
        return all(isinstance(k, str) for k in value)
    return True


def _read(text: str):
    """``text`` as a Python literal, else as JSON (``true``, ``null``), else None."""
    for parse in (ast.literal_eval, json.loads):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def check(notebook: str, params: dict, kinds: dict[str, tuple]) -> dict:
    """``params`` with each value of a parameter of ``kinds`` (``declared``'s) of its declared
    type: as given, or read from text as a Python or JSON literal of that type.

    Raises:
        ValueError: a value of another type, naming the parameter, its type and default, and
            how values are written.
    """
    out = dict(params)
    for key, value in params.items():
        if key not in kinds:
            continue
        default, kind = kinds[key]
        if not fits(value, kind) and isinstance(value, str) and not kind.startswith("str"):
            read = _read(value)
            value = read if read is not None and fits(read, kind) else value
        if not fits(value, kind):
            raise ValueError(f"parameter {key} of {notebook} takes {kind} (default {default!r}); "
                             f"got {value!r} ({type(value).__name__}). Values are read as Python "
                             "or JSON literals: -p n_pairs 64, -p tasks '[\"digits\"]', "
                             "-p model_args '{\"img_size\": 32}', -p data_root /data/paper")
        out[key] = value
    return out


def check_task_names(notebook: str, params: dict) -> None:
    """Every task a notebook's parameters name is a task (``tasks.source``: "unknown task",
    naming the valid ones)."""
    for key in TASK_PARAMETERS:
        value = params.get(key)
        for name in value if isinstance(value, list) else [value] if value else []:
            try:
                tasks.source(name, params.get("data_root"))
            except ValueError as err:
                raise ValueError(f"{notebook}: {key}: {err}") from None


def shipped_stores() -> list[str]:
    """The folders ``VITPLAST_DATA`` holds for an installed copy: the store of every shipped
    study of the registry (``Study.shipped``), in registry order."""
    return list(archive.shipped_stores())


def missing_stores(notebook: str, params: dict) -> list[tuple[str | None, studies.Study]]:
    """The shipped study stores ``notebook`` would read with ``params`` (``READS``) that are
    not there: (the parameter that would name another folder, or None; the study)."""
    out = []
    for param, which in READS.get(notebook, []):
        if param and params.get(param):
            continue  # a folder of one's own: the notebook reads (and checks) it
        name, _, part = which.partition(".")
        recompute = name == "study" and bool(params.get("recompute"))
        study = studies.get(params["study"] if name == "study" else name)
        study = study.baselines if part == "baselines" else study
        if study.shipped and not recompute and not study.root().is_dir():
            out.append((param, study))
    return out


def data_message(notebook: str, missing: list[tuple[str | None, studies.Study]]) -> str:
    """One line: which shipped stores ``notebook`` needs, that ``VITPLAST_DATA`` points at a
    folder holding them, and how to make one or name each store."""
    folders = list(dict.fromkeys(f"{s.folder}/" for _, s in missing))
    where = (f"{files.DATA_ENV}={os.environ[files.DATA_ENV]}" if os.environ.get(
        files.DATA_ENV) else f"{files.DATA_ENV} is not set and there is no checkout data/")
    own = [f"-p {p} FOLDER" for p, _ in missing if p]
    return (f"{notebook} reads the shipped study results {', '.join(folders)} (studies "
            f"{', '.join(dict.fromkeys(s.name for _, s in missing))}), not found ({where}): "
            "an installed copy does not hold them. Set "
            f"{files.DATA_ENV}=FOLDER holding {' and '.join(folders)} (a checkout's data/, or "
            "`vitplast data unpack ARCHIVE FOLDER` of a checkout's `vitplast data pack DIR`)"
            + (f", or give each store's folder ({', '.join(own)})" if own else "") + ".")


def kept_folder(measured_dir: str, model_name: str = models.EMBEDDED_NAME) -> Path | None:
    """Where a notebook keeps its measurements of the embedded model (``cached.kept_table``'s
    ``root``): ``measured_dir`` as a folder, else the shipped store of that name
    (``files.results_root``: a checkout's ``data/``); None (the user's cache) for another
    model, an empty ``measured_dir``, or a folder that is not there (an installed copy)."""
    if model_name != models.EMBEDDED_NAME or not measured_dir:
        return None
    return next((p for p in (Path(measured_dir), files.results_root(measured_dir))
                 if p.is_dir()), None)


def setup(notebook: str, namespace: dict) -> str | weights.ModelSpec | None:
    """A notebook's first code cell: check and coerce its parameters in ``namespace`` (its
    globals, as papermill or the kit left them), check the tasks they name, and stop before
    anything is computed when a shipped store it reads is missing; return its model, one value
    the notebook passes wherever the model is loaded (``models.model_spec``): its
    ``model_name`` with its ``weights_file`` and ``model_args`` as a ``weights.ModelSpec``, or
    the name alone when it has neither (None: a notebook without ``model_name``).

    Raises:
        ValueError: a parameter of another type (naming it), an unknown task, ``model_args``
            or a weights file for the embedded model.
        FileNotFoundError: a shipped study store the notebook reads is not there (one line
            naming ``VITPLAST_DATA`` and the folders: ``data_message``); a missing weights
            file.
    """
    kinds = declared(NOTEBOOK_DIR / f"{notebook}.ipynb")
    given = {k: namespace[k] for k in kinds if k in namespace}
    namespace.update(check(notebook, given, kinds))
    params = {k: namespace.get(k, default) for k, (default, _) in kinds.items()}
    check_task_names(notebook, params)
    if "checkpoints" in kinds and params.get("model_name") != models.EMBEDDED_NAME and params[
            "checkpoints"] == kinds["checkpoints"][0]:  # a timm model has one: its weights
        namespace["checkpoints"] = ["final"]  # as ``notebooks.plan`` gives it
    spec = models.model_spec(params["model_name"], params.get("weights_file", ""), params.get(
        "model_args", {})) if "model_name" in params else None
    if missing := missing_stores(notebook, params):
        raise FileNotFoundError(data_message(notebook, missing))
    return spec
