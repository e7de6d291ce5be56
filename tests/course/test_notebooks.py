"""The notebook sequence: committed clean, parameters declared, smoke runs with papermill."""

import ast
import json
import re
from pathlib import Path

import pytest

from vitplast.__main__ import main
from vitplast.course import kernels, notebooks, parameters


@pytest.mark.parametrize("name", notebooks.available())
def test_notebook_source_is_clean_and_parametrised(name):
    nb = json.loads((notebooks.NOTEBOOK_DIR / f"{name}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and not c.get("execution_count") for c in code)
    params = notebooks.notebook_parameters(name)
    assert params, "a parameters cell with at least one parameter"
    for profile in notebooks.PROFILES:  # every profile override is a declared parameter
        assert set(notebooks.PROFILES[profile].get(name, {})) <= set(params)
    first = "".join(nb["cells"][0]["source"])
    assert first.startswith(f"# {name.split('_')[0]} ·") and "What this shows" in json.dumps(nb)
    # the conclusions are the findings table's rows, rendered by ``verdicts.render`` or
    # ``sentences.read``, never typed
    last = "".join(code[-1]["source"])
    renders = ("print(verdicts.render(", "sentences.read(", "sentences.appendix(")
    assert any(s in last for s in renders)


@pytest.mark.slow
@pytest.mark.parametrize("name", notebooks.available())
def test_notebook_runs_in_the_smoke_profile(name, tmp_path):
    from vitplast.report import sentences

    summary = notebooks.run("smoke", only=[name.split("_")[0]], out_dir=tmp_path, progress=False)
    assert summary.status.tolist() == ["ok"], summary.error.tolist()
    assert (tmp_path / f"{name}.ipynb").exists()
    # what the executed notebook says in words: no correlation interval outside [-1, 1], no
    # "not resolved" beside an interval excluding 0 without why, no n = 0, no signed count
    nb = json.loads((tmp_path / f"{name}.ipynb").read_text())
    said = "\n".join("".join(o.get("data", {}).get("text/markdown", []))
                     + "".join(o.get("text", []))
                     for c in nb["cells"] for o in c.get("outputs", []))
    assert sentences.problems(said) == []


def test_plan_rejects_unknown_names_before_running():
    with pytest.raises(ValueError, match="valid: \\['smoke', 'default', 'paper'\\]"):
        notebooks.plan("fast")
    with pytest.raises(ValueError, match="unknown notebook"):
        notebooks.plan("smoke", only=["99"])
    with pytest.raises(ValueError, match="unknown parameter"):
        notebooks.plan("smoke", params={"n_pair": 3})
    (name, params), = notebooks.plan("smoke", only=["01"], params={"n_pairs": 7})
    assert name == "01_definitions" and params["n_pairs"] == 7


def test_only_selects_a_notebook_by_its_number_before_a_prefix():
    """"02" is 02_plasticity alone (02b_gauge sorts after it and starts with "02"), "02b" is
    02b_gauge, "0" is every notebook."""
    assert [nb for nb, _ in notebooks.plan("smoke", only=["02"])] == ["02_plasticity"]
    assert [nb for nb, _ in notebooks.plan("smoke", only=["02b"])] == ["02b_gauge"]
    assert [nb for nb, _ in notebooks.plan("smoke", only=["02", "02b"])] == [
        "02_plasticity", "02b_gauge"]
    assert [nb for nb, _ in notebooks.plan("smoke", only=["0"])] == notebooks.available()
    assert notebooks.NOTEBOOKS.index("02b_gauge") == notebooks.NOTEBOOKS.index(
        "02_plasticity") + 1


def test_the_course_list_is_every_notebook_in_the_order_of_its_number():
    """``NOTEBOOKS`` is the one list: every notebook of the package folder is on it, in the
    order of the numbers (the course order), and its first cell gives the title and minutes
    (``outline``) that ``vitplast notebooks list`` and the README's course table show."""
    assert notebooks.NOTEBOOKS == sorted(p.stem for p in notebooks.NOTEBOOK_DIR.glob("*.ipynb"))
    for name in notebooks.NOTEBOOKS:
        title, minutes = notebooks.outline(name)
        assert title and " · " not in title and 0 < minutes <= 60, (name, title, minutes)
    assert notebooks.outline("05_confounds") == ("Confounds: plasticity or parameter count?", 60)


def test_notebooks_list_names_the_stores_each_notebook_reads(capsys):
    """Under each notebook, a line per store its metadata declares (``READS``), naming the
    parameter that replaces the store where one does; no such line for the others."""
    assert main(["notebooks", "list"]) == 0
    blocks = re.split(r"^(?=\S)", capsys.readouterr().out, flags=re.M)
    said = {b.split(":")[0]: [line for line in b.splitlines() if line.startswith("  reads ")]
            for b in blocks if b}
    assert list(said) == notebooks.NOTEBOOKS
    for name, lines in said.items():
        declared = parameters.READS.get(name, [])
        assert len(lines) == len(declared), (name, lines)
        for line, (param, which) in zip(lines, declared):
            assert (f"or the folder {param} names" in line) == bool(param), line
            assert which.split(".")[0] in line, line
    assert said["05_confounds"][1] == "  reads that study's baselines"


#: The places a new notebook is written (issue 58: at most 4 files): the notebook, the course
#: list (``NOTEBOOKS``, with its profile overrides), its worked answers and its README row.
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_PLACES = ("vitplast/course/notebooks.py", "vitplast/notebooks/solutions.md", "README.md")


def copies_of_the_course(root: Path = ROOT) -> list[str]:
    """Every test that holds a literal list (or dict) of every notebook, and every page that
    names every notebook, but for ``NOTEBOOK_PLACES``: copies of the course list a new
    notebook would have to be added to."""
    names, out = set(notebooks.NOTEBOOKS), []
    for path in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            items = (node.keys if isinstance(node, ast.Dict) else node.elts
                     if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else [])
            if names <= {i.value for i in items if isinstance(i, ast.Constant)}:
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    pages = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "data").rglob("*.md"),
             *(root / "vitplast" / "notebooks").glob("*.md")]
    for page in sorted(pages):
        if str(page.relative_to(root)) not in NOTEBOOK_PLACES and names <= set(
                re.findall(r"\b\d\d[a-z]?_[a-z_]+\b", page.read_text())):
            out.append(str(page.relative_to(root)))
    return out


def test_no_test_or_page_copies_the_course_list(tmp_path):
    """A new notebook is added to ``NOTEBOOK_PLACES`` and the notebook itself, nowhere else:
    the tests read ``NOTEBOOKS``, the pages name it. A planted copy, in a test and in a
    page, is found."""
    assert copies_of_the_course() == []
    (tmp_path / "tests").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("")
    (tmp_path / "tests" / "test_x.py").write_text(f"NOTEBOOKS = {notebooks.NOTEBOOKS!r}\n")
    (tmp_path / "docs" / "page.md").write_text(" then ".join(notebooks.NOTEBOOKS))
    assert copies_of_the_course(tmp_path) == ["tests/test_x.py:1", "docs/page.md"]


def test_cli_errors_exit_before_any_kernel(capsys):
    with pytest.raises(SystemExit) as err:
        main(["notebooks", "run", "--profile", "fast"])
    assert err.value.code == 2 and "valid: ['smoke'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["notebooks", "run", "-p", "no_such_param", "1"])


def test_notebook_defaults_are_the_shipped_studies():
    from vitplast.experiments import studies

    assert notebooks.notebook_parameters("04_finetuning")["study"] == "main"
    assert notebooks.notebook_parameters("05_confounds")["study"] == "confounds"
    for nb, full in (("04_finetuning", "main"), ("04b_advise", "main"),
                     ("05_confounds", "confounds")):
        # the smoke studies are derived from the full ones, not copies
        assert studies.get(notebooks.PROFILES["smoke"][nb]["study"]) == studies.smoke(
            studies.get(full))


def test_paper_profile_fails_early_without_gpu_or_data(monkeypatch, tmp_path):
    import torch

    todo = notebooks.plan("paper", only=["02"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        notebooks.check_requirements("paper", todo)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(FileNotFoundError, match="data_root"):
        notebooks.check_requirements("paper", [(n, {**p, "data_root": str(tmp_path / "no")})
                                               for n, p in todo])
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        notebooks.check_requirements("paper", [(n, {**p, "data_root": str(tmp_path)})
                                               for n, p in todo])


@pytest.mark.parametrize("name", notebooks.NOTEBOOKS)
def test_papermill_sees_every_parameters_type(name):
    """``papermill --help-notebook`` shows types: it reads them from the annotations."""
    import papermill as pm

    inspected = pm.inspect_notebook(str(notebooks.NOTEBOOK_DIR / f"{name}.ipynb"))
    declared = notebooks.notebook_parameter_types(name)
    assert {k: v["inferred_type_name"] for k, v in inspected.items()} == declared
    assert "None" not in declared.values() and all(v["help"] for v in inspected.values())


def test_parameter_values_of_the_wrong_type_fail_before_any_kernel(capsys):
    with pytest.raises(ValueError, match="parameter n_pairs of 01_definitions takes int"):
        notebooks.plan("smoke", only=["01"], params={"n_pairs": "abc"})
    with pytest.raises(ValueError, match="scales of 01_definitions takes list\\[float\\]"):
        notebooks.plan("smoke", only=["01"], params={"scales": ["a"]})
    (_, params), = notebooks.plan("smoke", only=["01"], params={"scales": [1, 2.5]})
    assert params["scales"] == [1, 2.5]  # ints are floats; lists come parsed
    with pytest.raises(SystemExit) as err:
        main(["notebooks", "run", "--only", "01", "-p", "n_pairs", "abc"])
    assert err.value.code == 2 and "takes int" in capsys.readouterr().err


def test_weights_file_is_a_parameter_of_the_model_notebooks(tmp_path):
    weights = tmp_path / "vit_b16.safetensors"
    weights.write_bytes(b"")
    todo = dict(notebooks.plan("paper", only=["01", "02", "03"],
                               params={"weights_file": str(weights)}))
    assert todo["02_plasticity"]["weights_file"] == str(weights)  # ViT-B in the paper profile
    assert "weights_file" not in todo["01_definitions"]  # the embedded model: its own weights
    with pytest.raises(ValueError, match="weights_file is for a timm model_name"):
        notebooks.plan("default", only=["02"], params={"weights_file": str(weights)})
    (_, params), = notebooks.plan("default", only=["03"], params={
        "weights_file": str(weights), "model_name": "vit_base_patch16_224.orig_in21k"})
    assert params["weights_file"] == str(weights)
    with pytest.raises(FileNotFoundError, match="no_such.safetensors"):
        notebooks.check_requirements("default", [("02_plasticity", {
            "weights_file": str(tmp_path / "no_such.safetensors")})])


class FakePapermill:
    """Stands in for ``papermill.execute_notebook``: copies the source, records the call, and
    raises ``KeyboardInterrupt`` on notebook ``interrupt_at`` (Ctrl-C while it runs)."""

    def __init__(self, interrupt_at=None):
        self.calls, self.interrupt_at = [], interrupt_at

    def __call__(self, source, target, parameters, **kwargs):
        self.calls.append((source, parameters, kwargs))
        with open(source) as f, open(target, "w") as g:
            g.write(f.read())
        if len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt


def test_run_names_each_notebook_and_saves_figures_in_the_run(tmp_path, monkeypatch):
    import papermill

    fake = FakePapermill()
    monkeypatch.setattr(papermill, "execute_notebook", fake)
    summary = notebooks.run("smoke", only=["01", "02"], out_dir=tmp_path / "out")
    assert summary.status.tolist() == ["ok", "ok"]
    descs = [kwargs["progress_bar"]["desc"] for _, _, kwargs in fake.calls]
    assert sorted(descs) == ["[1/2] 01_definitions", "[2/2] 02_plasticity"]  # side by side
    figures = str((tmp_path / "out" / "figures").resolve())
    assert [params["fig_dir"] for _, params, _ in fake.calls] == [figures, figures]
    meta = json.loads((tmp_path / "out" / "01_definitions.ipynb").read_text())["metadata"]
    assert meta["vitplast"]["status"] == "ok" and meta["vitplast"]["profile"] == "smoke"


def test_a_store_folder_given_relative_reaches_the_notebook_absolute(tmp_path, monkeypatch):
    """A notebook runs in its output folder: every parameter naming a store it reads (its
    metadata's ``reads``, e.g. 02b's ``suite_dir``) is made absolute from where ``run`` was
    called, as ``results_dir`` is."""
    import papermill

    fake = FakePapermill()
    monkeypatch.setattr(papermill, "execute_notebook", fake)
    monkeypatch.chdir(tmp_path)
    assert {p for found in parameters.READS.values() for p, _ in found if p} <= set(
        notebooks.PATH_PARAMETERS)
    notebooks.run("smoke", only=["02b"], params={"suite_dir": "mine/suite"},
                  out_dir=tmp_path / "out", progress=False)
    [(_, params, _)] = fake.calls
    assert params["suite_dir"] == str(tmp_path / "mine" / "suite")


def test_ctrl_c_is_recorded_as_interrupted_and_the_cli_says_one_line(tmp_path, monkeypatch,
                                                                      capsys):
    import pandas as pd
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", FakePapermill(interrupt_at=2))
    with pytest.raises(notebooks.Interrupted) as stop:
        notebooks.run("smoke", only=["01", "02", "03"], out_dir=tmp_path / "api", progress=False,
                      jobs=1)
    assert isinstance(stop.value, KeyboardInterrupt) and stop.value.notebook == "02_plasticity"
    summary = pd.read_csv(tmp_path / "api" / "summary.csv")
    assert summary.status.tolist() == ["ok", "interrupted", "not run"]
    meta = json.loads((tmp_path / "api" / "02_plasticity.ipynb").read_text())["metadata"]
    assert meta["vitplast"]["status"] == "interrupted"

    monkeypatch.setattr(papermill, "execute_notebook", FakePapermill(interrupt_at=1))
    code = main(["notebooks", "run", "--profile", "smoke", "--only", "01",
                 "--out", str(tmp_path / "cli")])
    err = capsys.readouterr().err.strip()
    assert code == 130 and len(err.splitlines()) == 1
    assert "interrupted during 01_definitions" in err and "Traceback" not in err


def test_notebooks_run_side_by_side_keep_their_order_status_and_message(tmp_path,
                                                                         monkeypatch):
    """``jobs=2`` (the default): two notebooks in flight at once (seen by the fake), the
    summary in the notebooks' order with each one's status and message; after Ctrl-C the
    notebooks not started are not run."""
    import threading
    import time

    import pandas as pd
    import papermill

    lock, now, most = threading.Lock(), [0], [0]

    def fake(source, target, parameters, **kwargs):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.3)
        with lock:
            now[0] -= 1
        with open(source) as f, open(target, "w") as g:
            g.write(f.read())
        if "02_plasticity" in source:
            raise ValueError("no such thing")

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    summary = notebooks.run("smoke", only=["01", "02", "03", "04"], out_dir=tmp_path / "a",
                            progress=False)
    assert most[0] == 2 and summary.notebook.tolist() == [
        "01_definitions", "02_plasticity", "03_bounds", "04_finetuning"]
    assert summary.status.tolist() == ["ok", "failed", "ok", "ok"]
    assert "ValueError: no such thing" in summary.error[1]
    assert pd.read_csv(tmp_path / "a" / "summary.csv").status.tolist() == summary.status.tolist()

    def interrupted(source, target, parameters, **kwargs):
        time.sleep(0.3)
        with open(source) as f, open(target, "w") as g:
            g.write(f.read())
        raise KeyboardInterrupt  # both in flight are interrupted; the rest never start

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    with pytest.raises(notebooks.Interrupted) as stop:
        notebooks.run("smoke", only=["01", "02", "03", "04"], out_dir=tmp_path / "b",
                      progress=False)
    assert stop.value.notebook == "01_definitions"
    assert pd.read_csv(tmp_path / "b" / "summary.csv").status.tolist() == [
        "interrupted", "interrupted", "not run", "not run"]
    with pytest.raises(ValueError, match="jobs takes a whole number"):
        notebooks.run("smoke", only=["01"], out_dir=tmp_path / "c", jobs=0)


@pytest.mark.parametrize("profile", list(notebooks.PROFILES))
def test_every_profile_fits_the_declared_types(profile):
    todo = notebooks.plan(profile)
    assert [nb for nb, _ in todo] == notebooks.available()


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["in a cell", "between cells"])
def test_a_real_ctrl_c_stops_the_run_with_one_line(tmp_path, moment):
    """Ctrl-C in a terminal reaches the whole process group (the CLI; a kernel runs in its own
    session): the CLI exits 130 with one line, the notebook is recorded as interrupted. Also
    when it lands while the kernel is between cells, where a kernel ignores an interrupt."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    # Settings whose measurements no kept table holds, into an empty cache: seconds of work
    # after the first cell (the smoke profile's own settings are read, done in a second)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vitplast", "notebooks", "run", "--profile", "smoke", "--only",
         "01", "--out", "run",  # a relative output folder, like the default runs/...
         "-p", "n_pairs", "4096", "-p", "n_samples", "200000", "-p", "measured_dir", '""'],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "PYTHONPATH": str(root),
                                     "VITPLAST_CACHE": str(tmp_path / "cache")},
        # as a terminal starts a foreground job: Ctrl-C at its default, even when these tests
        # run as a shell's background job (which ignores SIGINT and hands that on)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    at = _running_a_cell if moment == "in a cell" else _between_cells
    deadline = time.monotonic() + 300  # on a loaded machine a kernel can take long to start
    while not at(out / "01_definitions.ipynb") and proc.poll() is None:
        assert time.monotonic() < deadline, "the notebook never got past its setup cell"
        time.sleep(0.2 if moment == "in a cell" else 0.005)
    assert proc.poll() is None, f"the notebook ended before a Ctrl-C {moment} could be sent"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "interrupted during 01_definitions")
    assert pd.read_csv(out / "summary.csv").status.tolist() == ["interrupted"]
    meta = json.loads((out / "01_definitions.ipynb").read_text())["metadata"]
    assert meta["vitplast"]["status"] == "interrupted"


def _cell_states(path) -> list | None:
    """Papermill's status of each cell after the setup cell in its copy of a notebook, with
    the cell's type (None before the kernel has imported the kit: the setup cell not yet
    completed)."""
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return None
    states = [(c["cell_type"], c.get("metadata", {}).get("papermill", {}).get("status"))
              for c in cells]
    setup = next(i for i, c in enumerate(cells) if "setup(" in "".join(c["source"]))
    return states[setup + 1:] if states[setup][1] == "completed" else None


def _running_a_cell(path) -> bool:
    """Whether a cell after the setup cell is running (a Ctrl-C lands in the notebook's work)."""
    return any(status == "running" for _, status in _cell_states(path) or [])


def _between_cells(path) -> bool:
    """Whether, past the setup cell, no cell is running and a code cell is still to run."""
    states = _cell_states(path)
    return states is not None and all(status != "running" for _, status in states) and (
        ("code", "pending") in states)


def test_a_misspelled_task_is_an_unknown_task_before_any_kernel(capsys):
    """Named with the valid tasks, whichever parameter holds it (not "share no task")."""
    from vitplast.measure import empirical

    for key, value in (("pretraining_tasks", ["digit"]), ("tasks", ["fmnist_contrast", "digts"]),
                       ("source", "fmnst")):
        with pytest.raises(SystemExit) as err:
            main(["notebooks", "run", "--only", "02", "-p", key, repr(value)])
        out = capsys.readouterr().err
        assert err.value.code == 2 and "unknown task" in out and "'digits'" in out, out
    with pytest.raises(ValueError, match="unknown task 'digit'.*valid: embedded tasks"):
        empirical.plasticity_study("vitplast_fmnist", ["digits"], checkpoints=["init", "final"],
                                   pretraining_tasks=["digit"])


def test_notebooks_copy_puts_the_sequence_where_jupyterlab_opens_it(tmp_path, capsys):
    dest = tmp_path / "my notebooks"
    assert main(["notebooks", "copy", str(dest)]) == 0
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted([f"{nb}.ipynb" for nb in notebooks.NOTEBOOKS]
                           + ["README.md", "solutions.md"])
    assert (dest / "02_plasticity.ipynb").read_bytes() == (
        notebooks.NOTEBOOK_DIR / "02_plasticity.ipynb").read_bytes()
    assert main(["notebooks", "copy", str(dest)]) == 0  # the same files again: fine
    (dest / "03_bounds.ipynb").write_text("{}")  # a reader's edits are not overwritten
    with pytest.raises(SystemExit) as err:
        main(["notebooks", "copy", str(dest)])
    assert err.value.code == 2 and "03_bounds.ipynb" in capsys.readouterr().err
    assert (dest / "03_bounds.ipynb").read_text() == "{}"
    assert main(["notebooks", "copy", str(dest), "--force"]) == 0
    assert (dest / "03_bounds.ipynb").read_text() != "{}"


def test_a_kernel_that_never_answers_ctrl_c_is_killed_after_the_grace(tmp_path, monkeypatch):
    """An interrupt that lands in a kernel's message handling leaves its cell's reply unsent:
    ``GRACE`` seconds after Ctrl-C the kernel is killed and the notebook recorded as
    interrupted, rather than the run waiting forever."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    import pandas as pd
    import papermill
    from nbclient.exceptions import DeadKernelError

    deaf = []

    def never_answers(source, target, parameters, **kwargs):
        with open(source) as f, open(target, "w") as g:
            g.write(f.read())
        deaf.append(subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal("
                                      "signal.SIGINT, signal.SIG_IGN); print(flush=True); "
                                      "time.sleep(60)"], stdout=subprocess.PIPE))
        deaf[0].stdout.readline()  # it ignores SIGINT from here on
        kernels._RUNNING.add(deaf[0].pid)  # a kernel the run knows, as manager() adds it
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C
        deaf[0].wait()  # what papermill waits on: a reply this kernel never sends
        deaf[0].stdout.close()
        kernels._RUNNING.discard(deaf[0].pid)
        raise DeadKernelError("Kernel died")

    monkeypatch.setattr(papermill, "execute_notebook", never_answers)
    monkeypatch.setattr(kernels, "GRACE", 1.0)
    # Ctrl-C as a terminal's foreground process has it, even when these tests run as a
    # shell's background job (which starts them with SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    start = time.monotonic()
    try:
        with pytest.raises(notebooks.Interrupted):
            notebooks.run("smoke", only=["01"], out_dir=tmp_path, progress=False, jobs=2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 30 and deaf[0].returncode == -signal.SIGKILL
    assert pd.read_csv(tmp_path / "summary.csv").status.tolist() == ["interrupted"]


@pytest.mark.parametrize("ctrl_c", [True, False])
def test_a_kernel_that_died_is_interrupted_only_after_ctrl_c(tmp_path, monkeypatch, ctrl_c):
    """Ctrl-C can kill a kernel outright (nbclient then raises ``DeadKernelError``): after a
    Ctrl-C that is an interruption; a kernel that died on its own is a failure."""
    import papermill
    from nbclient.exceptions import DeadKernelError

    def dies(source, target, parameters, **kwargs):
        if ctrl_c:
            kernels.INTERRUPTED.set()  # what the run's SIGINT handler does
        raise DeadKernelError("Kernel died")

    monkeypatch.setattr(papermill, "execute_notebook", dies)
    if ctrl_c:
        with pytest.raises(notebooks.Interrupted):
            notebooks.run("smoke", only=["01"], out_dir=tmp_path, progress=False)
    else:
        summary = notebooks.run("smoke", only=["01"], out_dir=tmp_path, progress=False)
        assert summary.status.tolist() == ["failed"]
