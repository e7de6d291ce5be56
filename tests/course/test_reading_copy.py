"""The reading copy (``vitplast.course.reading_copy``): where an executed notebook failed, its
status in its metadata, and a run folder rendered as a static HTML site (index in the course order,
pages with their figures embedded), on a small executed run written here."""

import base64
import json
import re

import pytest
from helpers import TINY_COURSE, executed_run, png_figure

from vitplast.course import reading_copy


def test_failing_cell_names_the_cell_and_the_exception_s_own_first_line(tmp_path):
    run = executed_run(tmp_path / "run", png_figure())
    assert reading_copy.failing_cell(run / "02_fails.ipynb") == (
        "In [2]: ValueError: the value 3 is not valid: give 1 or 2")
    assert reading_copy.failing_cell(run / "01_figure.ipynb") == ""  # no error in it
    assert reading_copy.failing_cell(run / "absent.ipynb") == ""


def test_record_status_writes_the_outcome_into_the_metadata(tmp_path):
    run = executed_run(tmp_path / "run", png_figure())
    meta = json.loads((run / "02_fails.ipynb").read_text())["metadata"]["vitplast"]
    assert meta == dict(status="failed", profile="default", parameters=dict(value=3))
    assert not list(run.glob(".*.tmp"))  # written atomically: no temp file left
    copy = run / "01_figure.ipynb"  # what the notebook declares there stays
    nb = json.loads(copy.read_text())
    nb["metadata"]["vitplast"] = dict(reads=["suite"], status="running")
    copy.write_text(json.dumps(nb))
    reading_copy.record_status(copy, "ok", "smoke", dict(value=1))
    assert json.loads(copy.read_text())["metadata"]["vitplast"] == dict(
        reads=["suite"], status="ok", profile="smoke", parameters=dict(value=1))


def test_the_site_has_an_index_in_the_course_order_and_pages_with_their_figures(tmp_path):
    png = png_figure()
    run = executed_run(tmp_path / "run", png)
    order = ["00_intro", "02_fails", "01_figure"]  # the order given, not the files' names
    index = reading_copy.write_site(run, order)
    assert index == run / "html" / reading_copy.INDEX
    page = index.read_text()
    rows = re.findall(r"<tr><td>(?:<a href=\"([\w.]+)\">)?([\w]+)", page)
    assert [name for _, name in rows] == ["02_fails", "01_figure", "00_intro"]
    assert [link for link, _ in rows] == ["02_fails.html", "01_figure.html", ""]
    assert "not in this run" in page and "01 · A figure" in page
    assert "In [2]: ValueError: the value 3 is not valid: give 1 or 2" in page
    assert "second line" not in page and re.search(r'class="failed">failed<', page)

    figure = (run / "html" / "01_figure.html").read_text()
    embedded = re.findall(r'<img[^>]+src="data:image/png;base64,([^"]+)"', figure)
    assert [base64.b64decode(e) for e in embedded] == [png]  # the figure itself, in the page
    assert re.search(r"<h1[^>]*>01 · A figure", figure) and "What this shows" in figure
    nav = re.search(r'<nav class="vitplast-nav".*?</nav>', figure).group()
    assert 'href="index.html"' in nav and 'href="02_fails.html"' in nav  # previous in order
    assert "next" not in nav
    failed = (run / "html" / "02_fails.html").read_text()
    assert "ValueError" in failed and 'href="01_figure.html" rel="next"' in failed


def test_notebooks_outside_the_order_follow_it_and_out_is_honoured(tmp_path):
    run = executed_run(tmp_path / "run", png_figure())
    index = reading_copy.write_site(run, ["02_fails"], out=tmp_path / "site")
    assert index.parent == tmp_path / "site"
    assert sorted(p.name for p in index.parent.iterdir()) == [
        "01_figure.html", "02_fails.html", "index.html", reading_copy.MATHJAX]
    names = re.findall(r'<a href="(\w+)\.html">', index.read_text())
    assert names == ["02_fails", "01_figure"]


def test_a_folder_without_executed_notebooks_is_refused(tmp_path):
    for folder in (tmp_path / "absent", tmp_path):
        with pytest.raises(FileNotFoundError, match="holds no executed notebook.*notebooks run"):
            reading_copy.write_site(folder, TINY_COURSE)


def test_title_is_the_first_heading():
    assert reading_copy.title(dict(cells=[
        dict(cell_type="code", source="# a comment, not a heading"),
        dict(cell_type="markdown", source=["Some text\n", "## 03 · Bounds\n"])])) == "03 · Bounds"
    assert reading_copy.title(dict(cells=[])) == ""


def test_missing_templates_say_how_to_fix_them(tmp_path, monkeypatch):
    """nbconvert installed without its templates where Jupyter looks (a borrowed environment):
    one error naming the fix, not nbconvert's traceback."""
    import nbconvert

    class Templateless:
        def __init__(self, **kwargs):
            raise ValueError("No template sub-directory with name 'lab' found in the following "
                             "paths:\n\t/somewhere")

    run = executed_run(tmp_path / "run", png_figure())
    monkeypatch.setattr(nbconvert, "HTMLExporter", Templateless)
    with pytest.raises(RuntimeError, match=r"templates are not where Jupyter looks \(No template "
                       r"sub-directory with name 'lab' found in the following paths\).*"
                       "pip install --force-reinstall nbconvert"):
        reading_copy.write_site(run, TINY_COURSE)


def test_the_site_carries_mathjax_and_each_page_loads_it_by_a_relative_link(tmp_path):
    """Math offline: the site holds MathJax (from jupyter-server-mathjax) with every
    configuration file the pages' link names, each page loads it from the site's folder and no
    MathJax from elsewhere; a second rendering keeps the copy (its version stamp)."""
    run = executed_run(tmp_path / "run", png_figure())
    site = reading_copy.write_site(run, TINY_COURSE).parent
    mathjax = site / reading_copy.MATHJAX
    url, _, query = reading_copy.MATHJAX_URL.partition("?config=")
    assert (site / url).is_file() and url.startswith(f"{reading_copy.MATHJAX}/")
    for config in query.split(","):
        assert (mathjax / "config" / f"{config}.js").is_file(), config
    assert (mathjax / "jax" / "output" / "HTML-CSS" / "fonts" / "STIX-Web").is_dir()
    assert list((mathjax / "fonts" / "HTML-CSS" / "STIX-Web" / "woff").rglob("*.woff"))
    assert sorted(p.name for p in (mathjax / "localization").iterdir()) == ["en"]
    for name in TINY_COURSE:
        sources = re.findall(r'<script[^>]*\ssrc="([^"]+)"', (site / f"{name}.html").read_text())
        assert reading_copy.MATHJAX_URL in sources
        assert [s for s in sources if "mathjax" in s.lower()] == [reading_copy.MATHJAX_URL]
    stamp = mathjax / "jupyter-server-mathjax.version"
    before = (mathjax / "MathJax.js").stat().st_mtime_ns
    reading_copy.write_site(run, TINY_COURSE)
    assert (mathjax / "MathJax.js").stat().st_mtime_ns == before and stamp.is_file()
