"""The reading copy: an executed run of the notebook sequence, read without a kernel.

``vitplast notebooks run`` writes ``runs/<timestamp>-<profile>/``: each executed notebook
(``NN_name.ipynb``, its outcome in ``metadata.vitplast``: ``record_status``), a
``summary.csv`` and the figures. ``failing_cell`` says where and why an executed notebook
failed (the line the CLI and ``summary.csv`` show). ``write_site`` renders such a folder to one
static HTML site a student opens in any browser:

- ``index.html``: the notebooks in the course order (the order ``write_site`` is given:
  ``vitplast.course.notebooks.NOTEBOOKS``), each with its title (its first heading), status, wall
  time and, for a failed one, where and why it failed; a notebook of the order that the run lacks is
  listed as not in this run;
- ``NN_name.html``: the executed notebook (nbconvert's ``lab`` template), code, printed tables
  and figures embedded in the page (no file beside it is needed), with a bar linking the index
  and the previous and next notebooks.

Math is typeset offline: ``write_site`` copies MathJax 2 (the files the
``jupyter-server-mathjax`` package ships, a dependency made to serve them) into the site's
``mathjax/`` folder, and every page loads it from there by a relative link, so the site typesets
its formulas with no network and still does when moved or copied whole. Widgets (notebook 06's
explorers) are drawn only by the widget manager the page loads from its CDN, and never respond
without a kernel; the static figure the notebook draws of each is in the page either way.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from vitplast.files import write_text

#: The site's index page (the other pages are named after their notebooks).
INDEX = "index.html"
#: The site's folder holding MathJax, and the script each page loads from it: the combined
#: configuration the classic notebook used with these files, the ``Safe`` extension (as
#: nbconvert's CDN link), and ``vitplast`` (``_MATHJAX_CONFIG``: the web font the package ships).
MATHJAX = "mathjax"
MATHJAX_URL = f"{MATHJAX}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe,vitplast"
# jupyter-server-mathjax ships STIX-Web, not MathJax's default TeX web font: use it, and no
# image fonts (not shipped); a local STIX install is not looked for (the same on every machine)
_MATHJAX_CONFIG = """MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null,
  webFont: "STIX-Web", imageFont: null}});
MathJax.Ajax.loadComplete("[MathJax]/config/vitplast.js");
"""
_NAV_STYLE = ("position:sticky;top:0;z-index:10;background:#f5f5f5;border-bottom:1px solid #ccc;"
              "padding:6px 16px;font-family:sans-serif;font-size:14px")
_INDEX_STYLE = """body{font-family:sans-serif;max-width:980px;margin:2em auto;line-height:1.45}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:6px;
text-align:left;vertical-align:top}.failed,.interrupted{color:#b00020}.ok{color:#1b5e20}"""


def record_status(path: str | Path, status: str, profile: str, params: dict) -> None:
    """Write a run's outcome into the executed notebook's metadata (``metadata.vitplast``:
    status, profile, parameters, beside what the notebook declares there, such as its
    ``reads``), atomically; nothing when the copy is unreadable."""
    try:
        nb = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return
    nb.setdefault("metadata", {}).setdefault("vitplast", {}).update(
        status=status, profile=profile, parameters=params)
    write_text(path, json.dumps(nb, indent=1, ensure_ascii=False))


def failing_cell(path: str | Path) -> str:
    """Where and why an executed notebook failed: ``In [N]: ValueError: <its message's first
    line>``, N being the cell's number as Jupyter shows it; empty if the copy holds no error."""
    try:
        nb = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return ""
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                message = (out.get("evalue") or "").strip().splitlines()[:1]
                return f"In [{cell.get('execution_count')}]: " + ": ".join(
                    [out.get("ename", "Error"), *message])
    return ""


def title(nb: dict) -> str:
    """A notebook's title: the text of its first Markdown heading, else empty."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def write_site(run_dir: str | Path, order: list[str], out: str | Path | None = None) -> Path:
    """Render the executed notebooks of ``run_dir`` to a static HTML site (module docstring)
    in ``out`` (default ``run_dir/html``); return the index page's path.

    Args:
        run_dir: a folder ``vitplast notebooks run`` wrote.
        order: the course order of the notebooks (``vitplast.course.notebooks.NOTEBOOKS``); executed
            notebooks it does not name follow it, by name.

    Raises:
        FileNotFoundError: ``run_dir`` is not a folder or holds no executed notebook.
        RuntimeError: nbconvert's templates are missing where Jupyter looks (naming the fix).
    """
    run_dir = Path(run_dir)
    found = sorted(p.stem for p in run_dir.glob("*.ipynb")) if run_dir.is_dir() else []
    if not found:
        raise FileNotFoundError(
            f"{run_dir} holds no executed notebook: give a folder that `vitplast notebooks run` "
            "wrote (runs/<timestamp>-<profile>/, with its NN_name.ipynb files)")
    out = Path(out) if out is not None else run_dir / "html"
    names = [nb for nb in order if nb in found] + [nb for nb in found if nb not in order]
    rows = _summary(run_dir)
    copy_mathjax(out / MATHJAX)
    entries = []
    for i, name in enumerate(names):
        nb = json.loads((run_dir / f"{name}.ipynb").read_text())
        nav = _nav(names[i - 1] if i else None, names[i + 1] if i + 1 < len(names) else None)
        write_text(out / f"{name}.html", _page(run_dir / f"{name}.ipynb", nav))
        status = rows.get(name, {}).get("status") or nb.get("metadata", {}).get(
            "vitplast", {}).get("status", "")
        entries.append(dict(notebook=name, title=title(nb), status=status,
                            seconds=rows.get(name, {}).get("seconds", ""),
                            error=failing_cell(run_dir / f"{name}.ipynb")))
    missing = [nb for nb in order if nb not in found]
    return write_text(out / INDEX, _index(run_dir, entries, missing))


def copy_mathjax(dest: str | Path) -> Path:
    """Copy MathJax's files from the ``jupyter-server-mathjax`` package into ``dest`` (other
    languages than English left out), with the site's configuration ``config/vitplast.js``;
    nothing when ``dest`` already holds this version. Returns ``dest``.

    Raises:
        RuntimeError: the package is not installed (naming the fix).
    """
    import shutil
    from importlib import metadata

    try:
        import jupyter_server_mathjax
    except ImportError:
        raise RuntimeError("the reading copy typesets its math with the MathJax files of the "
                           "jupyter-server-mathjax package, which is not installed: pip install "
                           "jupyter-server-mathjax (a dependency of vitplast)") from None
    dest = Path(dest)
    version = metadata.version("jupyter-server-mathjax")
    stamp = dest / "jupyter-server-mathjax.version"
    if stamp.is_file() and stamp.read_text() == version:
        return dest
    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    other_languages = {p.name for p in (source / "localization").iterdir()} - {"en"}
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=lambda folder, names: [
        n for n in names if Path(folder).name == "localization" and n in other_languages])
    write_text(dest / "config" / "vitplast.js", _MATHJAX_CONFIG)
    write_text(stamp, version)  # last: a copy cut short is made again
    return dest


def _summary(run_dir: Path) -> dict[str, dict]:
    """``summary.csv`` by notebook (empty when the run has none)."""
    import pandas as pd

    path = run_dir / "summary.csv"
    if not path.exists():
        return {}
    table = pd.read_csv(path, keep_default_na=False)
    return {row["notebook"]: row for row in table.to_dict("records")}


def _nav(previous: str | None, following: str | None) -> str:
    links = [f'<a href="{INDEX}">index</a>']
    if previous:
        links.append(f'<a href="{previous}.html" rel="prev">&larr; {previous}</a>')
    if following:
        links.append(f'<a href="{following}.html" rel="next">{following} &rarr;</a>')
    return f'<nav class="vitplast-nav" style="{_NAV_STYLE}">{" &middot; ".join(links)}</nav>'


def _page(path: Path, nav: str) -> str:
    """The notebook at ``path`` as a standalone HTML page (figures embedded), the bar ``nav``
    on top."""
    import nbformat
    from jinja2 import TemplateNotFound
    from nbconvert import HTMLExporter

    try:
        exporter = HTMLExporter(template_name="lab", embed_images=True,
                                mathjax_url=MATHJAX_URL)  # the site's copy (copy_mathjax)
        body, _ = exporter.from_notebook_node(nbformat.read(path, as_version=4),
                                              resources=dict(metadata=dict(name=path.stem)))
    except (TemplateNotFound, ValueError) as err:
        if not isinstance(err, TemplateNotFound) and "template" not in str(err):
            raise
        first = str(err).splitlines()[0].rstrip(":")
        raise RuntimeError(
            f"nbconvert's HTML templates are not where Jupyter looks ({first}): "
            "`jupyter --paths` lists those folders; reinstall nbconvert in this environment "
            "(pip install --force-reinstall nbconvert), or add the share/jupyter folder of the "
            "environment it came from to JUPYTER_PATH") from None
    start = body.index(">", body.index("<body")) + 1  # right after the opening body tag
    return body[:start] + nav + body[start:]


def _index(run_dir: Path, entries: list[dict], missing: list[str]) -> str:
    """The index page: one row per notebook, in the course order."""
    esc = html.escape
    rows = "".join(
        f'<tr><td><a href="{esc(e["notebook"])}.html">{esc(e["notebook"])}</a></td>'
        f'<td>{esc(e["title"])}</td><td class="{esc(e["status"])}">{esc(e["status"])}</td>'
        f'<td>{esc(str(e["seconds"]))}</td><td>{esc(e["error"])}</td></tr>' for e in entries)
    rows += "".join(f"<tr><td>{esc(nb)}</td><td></td><td>not in this run</td><td></td>"
                    "<td></td></tr>" for nb in missing)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vitplast: '
            f'{esc(run_dir.name)}</title><style>{_INDEX_STYLE}</style></head><body>'
            f"<h1>vitplast notebooks: {esc(run_dir.name)}</h1><p>The executed notebooks of "
            f"this run, in the course order, readable without a kernel.</p><table><thead><tr>"
            "<th>notebook</th><th>title</th><th>status</th><th>seconds</th><th>error</th></tr>"
            f"</thead><tbody>{rows}</tbody></table></body></html>")


__all__ = ["INDEX", "MATHJAX", "MATHJAX_URL", "copy_mathjax", "failing_cell", "record_status",
           "title", "write_site"]
