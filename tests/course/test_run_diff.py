"""``vitplast notebooks diff``: what two executed runs printed, compared."""

import json

import pytest

from vitplast.__main__ import main
from vitplast.course import run_diff


def _write(run, name, outputs):
    run.mkdir(parents=True, exist_ok=True)
    cells = [{"cell_type": "markdown", "source": "# title"},
             {"cell_type": "code", "source": "x", "outputs": outputs}]
    (run / name).write_text(json.dumps({"cells": cells}))


def _outputs(value, run, noise="0%"):
    return [{"output_type": "stream", "name": "stderr", "text": f"progress {noise}"},
            {"output_type": "stream", "name": "stdout", "text": f"saved {run}/figures/a.png\n"},
            {"output_type": "display_data",
             "data": {"text/plain": f"rate {value}", "image/png": f"bytes{noise}"}}]


def test_runs_that_printed_the_same_do_not_differ_whatever_their_folder_stderr_or_images(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "01.ipynb", _outputs(1.5, a, noise="10%"))
    _write(b, "01.ipynb", _outputs(1.5, b, noise="90%"))
    assert run_diff.diff(a, b) == []
    assert main(["notebooks", "diff", str(a), str(b)]) == 0


def test_a_moved_number_or_a_missing_notebook_is_named(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "01.ipynb", _outputs(1.5, a))
    _write(b, "01.ipynb", _outputs(1.6, b))
    _write(a, "02.ipynb", [])
    found = run_diff.diff(a, b)
    assert found == ["02.ipynb: only in " + str(a),
                     "01.ipynb, cell 1: -rate 1.5 | +rate 1.6"]
    assert main(["notebooks", "diff", str(a), str(b)]) == 1
    assert "01.ipynb, cell 1" in capsys.readouterr().out


def test_the_first_line_each_side_is_named_and_a_missing_run_is_refused(tmp_path):
    """Two lines in a row that differ: the first of each side is named (not two of one side);
    papermill's injected parameters cell, there only where parameters were given, pairs no
    cell; a run folder that is not there is an error, not a list of "only in" lines."""
    a, b = tmp_path / "a", tmp_path / "b"
    block = [{"output_type": "stream", "name": "stdout", "text": t} for t in ("a\nx1\nx2\nb",)]
    _write(a, "01.ipynb", block)
    _write(b, "01.ipynb", [dict(block[0], text="a\ny1\ny2\nb")])
    assert run_diff.diff(a, b) == ["01.ipynb, cell 1: -x1 | +y1"]
    nb = json.loads((b / "01.ipynb").read_text())
    nb["cells"].insert(1, {"cell_type": "code", "source": "p = 1", "outputs": [],
                           "metadata": {"tags": ["injected-parameters"]}})
    (b / "01.ipynb").write_text(json.dumps(nb))
    assert run_diff.diff(a, b) == ["01.ipynb, cell 2: -x1 | +y1"]
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        run_diff.diff(a, tmp_path / "typo")
