"""``vitplast notebooks`` (``vitplast.cli_notebooks``): a failing notebook's own error on the
command line and in ``summary.csv``, the reading copy (``html``, ``run --html``), and
``copy`` doing what its help says."""

import json

import pandas as pd
import pytest
from helpers import TINY_COURSE, TINY_ERROR, executed_run, png_figure, tiny_course

from vitplast.__main__ import main
from vitplast.cli_notebooks import literal
from vitplast.course import notebooks


@pytest.mark.slow
def test_a_failing_notebook_shows_its_own_message_and_cell_where_the_user_looks(
        tmp_path, monkeypatch, capsys):
    """A real papermill run (one kernel per notebook) of a notebook that raises
    ``ValueError("...")``: the CLI's table and ``summary.csv`` carry the message's first line
    and the cell, not the cell's source; ``--html`` then renders the run."""
    tiny_course(tmp_path / "course", monkeypatch)
    out = tmp_path / "run"
    code = main(["notebooks", "run", "--out", str(out), "--html"])
    printed = capsys.readouterr().out
    expected = "In [2]: ValueError: " + TINY_ERROR.splitlines()[0]
    assert code == 1
    summary = pd.read_csv(out / "summary.csv", keep_default_na=False)
    assert summary.status.tolist() == ["ok", "failed"]
    assert summary.error.tolist() == ["", expected]
    assert f"02_fails failed at {expected}" in printed.splitlines()
    assert "second line" not in printed and "raise ValueError" not in printed
    assert f"reading copy: {out / 'html' / 'index.html'}" in printed
    figure = (out / "html" / "01_figure.html").read_text()
    assert "data:image/png;base64," in figure and "A figure" in figure  # the plot, executed


def test_html_renders_a_run_and_says_where(tmp_path, capsys):
    run = executed_run(tmp_path / "run", png_figure())
    assert main(["notebooks", "html", str(run), "--out", str(tmp_path / "site")]) == 0
    assert capsys.readouterr().out.strip() == (
        f"reading copy: {tmp_path / 'site' / 'index.html'} (open it in a browser)")
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == sorted(
        [f"{nb}.html" for nb in TINY_COURSE] + ["index.html", "mathjax"])


def test_html_of_a_folder_without_a_run_fails_naming_what_it_needs(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["notebooks", "html", str(tmp_path)])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "holds no executed notebook" in err
    assert "runs/<timestamp>-<profile>/" in err and not (tmp_path / "html").exists()


def test_copy_does_what_its_help_says(tmp_path, capsys):
    """The help: files with the same content are fine; one with other content stops the copy
    (nothing copied, the file named) unless --force, which overwrites it."""
    with pytest.raises(SystemExit):
        main(["notebooks", "copy", "--help"])
    assert "nothing is copied and the command names them, unless --force" in " ".join(
        capsys.readouterr().out.split())
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "03_bounds.ipynb").write_text("{}")  # a reader's edits
    with pytest.raises(SystemExit) as done:
        main(["notebooks", "copy", str(dest)])
    assert done.value.code == 2 and "03_bounds.ipynb" in capsys.readouterr().err
    assert [p.name for p in dest.iterdir()] == ["03_bounds.ipynb"]  # nothing copied
    assert main(["notebooks", "copy", str(dest), "--force"]) == 0
    assert json.loads((dest / "03_bounds.ipynb").read_text()) == json.loads(
        (notebooks.NOTEBOOK_DIR / "03_bounds.ipynb").read_text())
    assert main(["notebooks", "copy", str(dest)]) == 0  # the same content again: fine


def test_parameter_values_are_python_literals_or_strings():
    assert literal("3") == 3 and literal("[1, 2]") == [1, 2] and literal("'a'") == "a"
    assert literal("/data/paper") == "/data/paper" and literal("digits") == "digits"


def test_dry_run_checks_and_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """``run --dry-run``: each notebook with the parameters it would get, no kernel, no output
    folder; a bad parameter fails as without it."""
    monkeypatch.chdir(tmp_path)
    assert main(["notebooks", "run", "--profile", "smoke", "--only", "01", "03",
                 "-p", "n_pairs", "16", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "01_definitions n_pairs=16 n_samples=500",
        "03_bounds n_pairs=16 n_seeds=2 power_iters=5 n_lipschitz=4"]
    assert list(tmp_path.iterdir()) == []  # no runs/ folder
    assert main(["notebooks", "run", "--only", "01", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "01_definitions (its defaults)"
    with pytest.raises(SystemExit):
        main(["notebooks", "run", "--only", "01", "-p", "n_pairs", "abc", "--dry-run"])
    assert "parameter n_pairs of 01_definitions takes int" in capsys.readouterr().err
