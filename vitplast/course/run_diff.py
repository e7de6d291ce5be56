"""What two executed runs of the notebooks printed, compared: did a change to the code move any
text, table or finding?

A run is a folder ``vitplast notebooks run`` wrote. Compared are the outputs of every code cell
that a reader reads: printed text (stdout), and each result's and display's plain text and HTML
(tables and findings tables are HTML). Left out are what differs from run to run by nature:
stderr (progress bars, warnings), images (a figure's bytes carry no meaning to compare here:
its data is in the tables beside it), widget states, and papermill's own timings; the run's own
folder reads ``<run>`` wherever it is printed (a figure's path).

``vitplast notebooks diff RUN_A RUN_B`` prints each difference (notebook, cell, the first line
that differs) and exits 1 when there is any.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

#: The output MIME types compared (images and widget views are not).
TEXT_TYPES = ("text/plain", "text/html", "text/markdown")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def cell_texts(notebook: str | Path) -> list[tuple[int, str]]:
    """``(cell index, text)`` for each code cell of an executed notebook (papermill's injected
    parameters cell left out): its stdout and its results' text, in output order, its run
    folder (the notebook's) written ``<run>``."""
    notebook = Path(notebook)
    cells = json.loads(notebook.read_text())["cells"]
    folders = sorted({str(notebook.parent), str(notebook.parent.resolve())}, key=len, reverse=True)
    out = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or "injected-parameters" in cell.get("metadata", {}).get(
                "tags", []):  # papermill's cell of the parameters given: only where some were
            continue
        parts = []
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream" and o.get("name") == "stdout":
                parts.append(_text(o["text"]))
            elif o["output_type"] in ("execute_result", "display_data"):
                parts += [_text(o["data"][t]) for t in TEXT_TYPES if t in o.get("data", {})]
            elif o["output_type"] == "error":
                parts.append(f"{o['ename']}: {o['evalue']}")
        text = "\n".join(parts)
        for folder in folders:
            text = text.replace(folder, "<run>")
        out.append((i, text))
    return out


def diff(run_a: str | Path, run_b: str | Path) -> list[str]:
    """One line per difference between two runs' executed notebooks: a notebook in one run only,
    a different number of code cells, or a code cell whose texts differ (its index in
    ``run_b``'s notebook, with the first line that differs on each side; code cells are paired
    in order, so an edited markdown cell moves nothing). Empty when the runs printed the
    same."""
    a, b = Path(run_a), Path(run_b)
    for run in (a, b):
        if not run.is_dir():
            raise FileNotFoundError(f"{run} is not a folder: give two folders that `vitplast "
                                    "notebooks run` wrote")
    names_a = {p.name for p in a.glob("*.ipynb")}
    names_b = {p.name for p in b.glob("*.ipynb")}
    if not names_a and not names_b:
        raise FileNotFoundError(f"no executed notebooks in {a} or {b}")
    found = [f"{n}: only in {a}" for n in sorted(names_a - names_b)]
    found += [f"{n}: only in {b}" for n in sorted(names_b - names_a)]
    for name in sorted(names_a & names_b):
        cells_a, cells_b = cell_texts(a / name), cell_texts(b / name)
        if len(cells_a) != len(cells_b):
            found.append(f"{name}: {len(cells_a)} code cells against {len(cells_b)}")
            continue
        for (_, ta), (i, tb) in zip(cells_a, cells_b):  # code cells in order; b's index named
            if ta != tb:
                lines = [d for d in difflib.unified_diff(ta.splitlines(), tb.splitlines(),
                                                         lineterm="", n=0)
                         if d[:1] in "+-" and d[:3] not in ("---", "+++")]
                first = [next((d for d in lines if d[0] == side), None) for side in "-+"]
                found.append(f"{name}, cell {i}: " + " | ".join(filter(None, first))[:400])
    return found


__all__ = ["TEXT_TYPES", "cell_texts", "diff"]
