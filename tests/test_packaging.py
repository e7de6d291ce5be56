"""The installable kit: a wheel holds the checkpoints (the embedded model's and the
no-weight-decay model's), their manifests and the notebooks; an installed copy works from any
folder (console script, embedded model, notebooks), and runs the course: every notebook of the
smoke profile runs, or stops in its first cell naming VITPLAST_DATA, without the shipped
results; all run with them."""

import ast
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest

import vitplast
from vitplast.course import notebooks, parameters

ROOT = Path(__file__).resolve().parents[1]
#: The wheel's size budget: the embedded checkpoints (6 x 4.8 MB) and the no-weight-decay
#: model's final checkpoint, compressed, and the code (31.6 MB measured).
WHEEL_MB = 35


def need_data_in_smoke(empty: Path) -> list[str]:
    """The notebooks that, in the smoke profile, read a shipped store (``parameters.READS``):
    without ``VITPLAST_DATA`` they stop in their first cell. Found with ``VITPLAST_DATA``
    pointing at the folder ``empty``, in the course order."""
    env = dict(os.environ, VITPLAST_DATA=str(empty))
    return subprocess.run([sys.executable, "-c", _NEEDING], env=env, check=True,
                          capture_output=True, text=True, timeout=300).stdout.split()


#: A child process that prints the smoke notebooks missing a shipped store.
_NEEDING = ("from vitplast.course import notebooks, parameters\n"
            "print(' '.join(nb for nb, params in notebooks.plan('smoke') if "
            "parameters.missing_stores(nb, {**notebooks.notebook_parameters(nb), **params})))")


def test_the_notebooks_needing_data_in_smoke_are_read_off_the_course(tmp_path):
    """Derived from the course list and ``parameters.READS``, not a copy: 04 and 05 compute
    their own small studies in the smoke profile and read nothing shipped."""
    needing = need_data_in_smoke(tmp_path)
    assert needing and needing == [nb for nb in notebooks.NOTEBOOKS if nb in needing]
    assert set(needing) <= set(parameters.READS)
    assert {"04_finetuning", "05_confounds"} & set(needing) == set()

#: Seconds within which such a notebook stops (kernel start, imports, the check), on a machine
#: that imports the kit in ``STOP_BASELINE`` seconds or less; on a slower (loaded) one the limit
#: grows in proportion.
STOP_SECONDS, STOP_BASELINE = 10.0, 4.0


def _env() -> dict:
    """The environment without PYTHONPATH and VITPLAST_DATA: an installed copy must see
    neither the checkout nor its shipped results."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VITPLAST_DATA")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel . --no-deps``: offline with this environment's setuptools when it has it."""
    out = tmp_path_factory.mktemp("wheel")
    isolation = []
    try:
        import setuptools  # noqa: F401

        isolation = ["--no-build-isolation"]
    except ImportError:  # pip fetches setuptools from the package index
        pass
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                    *isolation, "-w", str(out)], check=True, env=_env(), cwd=out, timeout=300)
    wheel, = out.glob("vitplast-*.whl")
    return wheel


def test_wheel_holds_checkpoints_notebooks_and_the_console_script(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("vitplast/checkpoints/checkpoints.json"))
        checkpoints = manifest["checkpoints"]
        assert len(checkpoints) == 6
        for entry in checkpoints.values():  # every file, bit for bit what the manifest says
            blob = z.read(f"vitplast/checkpoints/{entry['file']}")
            assert hashlib.sha256(blob).hexdigest() == entry["sha256"], entry["file"]
        assert "vitplast/checkpoints/README.md" in names  # the model card
        other = "vitplast/checkpoints/pretrain_no_weight_decay"  # its final checkpoint only
        final = json.loads(z.read(f"{other}/checkpoints.json"))["checkpoints"]["final"]
        assert hashlib.sha256(z.read(f"{other}/{final['file']}")).hexdigest() == final["sha256"]
        assert f"{other}/README.md" in names
        assert len([n for n in names if n.endswith(".safetensors")]) == 7
        for nb in notebooks.NOTEBOOKS:
            assert f"vitplast/notebooks/{nb}.ipynb" in names
        assert "vitplast/notebooks/README.md" in names
        assert "vitplast/notebooks/solutions.md" in names  # the exercises' answers
        from vitplast import schema  # every published schema, for other tools to read

        assert {f"vitplast/schemas/{k}.schema.json" for k in schema.KINDS} <= names
        dist = f"vitplast-{vitplast.__version__}.dist-info"
        entry_points = z.read(f"{dist}/entry_points.txt").decode()
        metadata = z.read(f"{dist}/METADATA").decode()
    assert "[console_scripts]" in entry_points
    assert "vitplast = vitplast.__main__:main" in entry_points
    assert "Requires-Python: >=3.11" in metadata
    assert "Requires-Dist: submitit" in metadata
    assert "Requires-Dist: jsonschema" in metadata
    # the shipped study results are not package data
    assert not [n for n in names if n.startswith("data/") or "/finetune/" in n]
    assert wheel.stat().st_size < WHEEL_MB * 2**20


def test_the_install_page_lists_the_registry_s_stores_and_names_no_notebook_list():
    """The stores are the registry's; which notebooks read them is ``parameters.READS``, named,
    not copied (a new notebook changes no page)."""
    text = " ".join((ROOT / "docs" / "install.md").read_text().split())
    stores = re.search(r"shipped_stores\(\)`\): (.*?); or from an explicit folder", text)
    assert re.findall(r"`([a-z_]+)/`", stores.group(1)) == parameters.shipped_stores()
    reads = re.search(r"The notebooks of `vitplast.course.parameters.READS` read some of them "
                      r"\(the others none\)", text)
    assert reads and set(parameters.READS) <= set(notebooks.NOTEBOOKS)


#: The documents a user reads or runs outside the package: their code references must resolve.
DOCUMENTS = ["README.md", "Makefile", ".ci/run",
             *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
             "vitplast/notebooks/README.md", "vitplast/notebooks/solutions.md",
             "vitplast/checkpoints/README.md"]


def _resolves(dotted: str) -> bool:
    """Whether ``vitplast.a.b.c`` names a module, or an attribute of the longest module prefix."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def _references(text: str) -> list[str]:
    """Every ``from vitplast... import name`` (as ``vitplast....name``) and dotted
    ``vitplast.module.name`` in ``text``."""
    refs = [f"{m[1]}.{name.strip()}"
            for m in re.finditer(r"from (vitplast[\w.]*) import ([\w, ]+)", text)
            for name in m[2].split(",") if name.strip()]
    return refs + re.findall(r"(?<![\w.])(vitplast(?:\.\w+)+)", text)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_code_reference_in_the_documents_resolves(document):
    """``make data`` once ran ``from vitplast import data`` after the module had moved: every
    ``from vitplast... import name`` and dotted ``vitplast.module.name`` in the documents names
    something that exists (``metadata.vitplast...`` keys of an executed notebook excepted)."""
    assert [ref for ref in _references((ROOT / document).read_text()) if not _resolves(ref)] == []


def _python_sources():
    """(where, source) of every module of the package, the tests and the benchmarks, and of
    every notebook's code cell (IPython's ``%`` and ``!`` lines read as ``pass``)."""
    for path in [*(ROOT / "vitplast").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                 *(ROOT / "benchmarks").glob("*.py")]:
        yield str(path.relative_to(ROOT)), path.read_text()
    for path in (ROOT / "vitplast" / "notebooks").glob("*.ipynb"):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                yield (f"{path.relative_to(ROOT)} cell {i}",
                       re.sub(r"(?m)^(\s*)[%!].*$", r"\1pass", "".join(cell["source"])))


def _child_code(tree: ast.Module) -> list[tuple[int, str | None]]:
    """(line, code) of every ``"-c", CODE`` among a call's arguments or in a list or tuple:
    CODE a string literal, or a name assigned one string literal in the enclosing function
    (else in the module); ``None`` for any other CODE."""
    parents = {c: node for node in ast.walk(tree) for c in ast.iter_child_nodes(node)}

    def assigned(name: str, node: ast.AST) -> str | None:
        while node in parents and not isinstance(node, ast.FunctionDef):
            node = parents[node]
        for scope in (node, tree):
            values = [a.value.value for a in ast.walk(scope) if isinstance(a, ast.Assign)
                      and isinstance(a.value, ast.Constant) and isinstance(a.value.value, str)
                      and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)]
            if values:
                return values[0] if len(values) == 1 else None
        return None

    found = []
    for node in ast.walk(tree):
        items = (node.args if isinstance(node, ast.Call) else
                 node.elts if isinstance(node, (ast.List, ast.Tuple)) else [])
        for flag, code in zip(items, items[1:]):
            if isinstance(flag, ast.Constant) and flag.value == "-c":
                found.append((code.lineno, code.value if isinstance(code, ast.Constant)
                              and isinstance(code.value, str) else
                              assigned(code.id, code) if isinstance(code, ast.Name) else None))
    return sorted(found, key=lambda f: f[0])


def _child_code_problems(where: str, source: str) -> list[str]:
    """What is wrong with each ``-c`` string of ``source``: not a string literal, not
    Python, or a vitplast reference that does not resolve."""
    problems = []
    for line, code in _child_code(ast.parse(source)):
        if code is None:
            problems.append(f"{where}:{line}: not a string literal (move the code into an "
                            "importable function, or hold it in one string)")
            continue
        try:
            compile(code, f"{where}:{line}", "exec")
        except SyntaxError as e:
            problems.append(f"{where}:{line}: {e}")
            continue
        problems += [f"{where}:{line}: {ref}" for ref in _references(code) if not _resolves(ref)]
    return problems


def test_every_code_string_for_a_child_process_compiles_and_its_references_resolve():
    """``benchmarks/plasticity_memory.py``'s child process once ran ``from vitplast import
    plasticity`` long after the module had moved: every ``python -c CODE`` held in the package,
    the tests, the benchmarks and the notebooks compiles, and its vitplast references resolve."""
    found, problems = 0, []
    for where, source in _python_sources():
        found += len(_child_code(ast.parse(source)))
        problems += _child_code_problems(where, source)
    # at least the 8 of test_cli, test_studies, test_claims, test_store and this module
    assert found >= 8 and problems == []


def test_the_child_code_check_reads_names_and_fails_on_a_moved_module():
    source = ("import subprocess, sys\nCHILD = 'from vitplast import models, plasticity'\n"
              "def child(n):\n    code = 'import vitplast.measure.plasticity'\n"
              "    subprocess.run([sys.executable, '-c', CHILD, str(n)])\n"
              "    subprocess.run([sys.executable, '-c', code])\n"
              "    subprocess.run((sys.executable, '-c', 'x = (1'))\n"
              "    subprocess.run([sys.executable, '-c', f'print({n})'])\n")
    assert _child_code_problems("x.py", source) == [
        "x.py:5: vitplast.plasticity",
        "x.py:7: '(' was never closed (x.py:7, line 1)",
        "x.py:8: not a string literal (move the code into an importable function, or hold it "
        "in one string)"]


def _installed_venv(wheel, folder: Path) -> Path:
    """A fresh venv in ``folder`` that sees this environment's packages (torch is not
    reinstalled) but not the checkout, with the wheel installed (--no-deps)."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # --system-site-packages of a venv's python reaches the base interpreter's packages, not
    # this venv's: a .pth line adds them (its own .pth files, e.g. an editable vitplast, are
    # not processed, so the checkout stays out of sight).
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True,
                             env=_env()).stdout.strip()
    Path(purelib, "_parent_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--ignore-installed", str(wheel)], check=True, env=_env(),
                   timeout=300)
    return venv


@pytest.mark.slow
def test_installed_wheel_works_from_any_folder(wheel, tmp_path):
    """Everything runs from an unrelated folder, the checkout out of sight."""
    venv = _installed_venv(wheel, tmp_path)
    python = venv / "bin" / "python"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args):
        return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True,
                              cwd=elsewhere, env=_env(), timeout=300).stdout

    assert run(venv / "bin" / "vitplast", "--version").strip() == f"vitplast {vitplast.__version__}"
    listing = run(venv / "bin" / "vitplast", "notebooks", "list")
    assert all(nb in listing for nb in notebooks.NOTEBOOKS) and "n_pairs: int = 512" in listing
    where = run(python, "-c", "from vitplast import models; "
                "from vitplast.course import notebooks; m = models.load_model('vitplast_fmnist'); "
                "print(models.__file__, notebooks.NOTEBOOK_DIR, sum(p.numel() for p in "
                "m.parameters()))").split()
    assert Path(where[0]).is_relative_to(venv) and Path(where[1]).is_relative_to(venv)
    assert where[2] == "1199882"
    other = run(python, "-c", "from vitplast import models; m = models.load_pretrained("
                "'pretrain_no_weight_decay'); print(models.pretrained_folder("
                "'pretrain_no_weight_decay'), sum(p.numel() for p in m.parameters()))").split()
    assert Path(other[0]).is_relative_to(venv) and other[1] == "1199882"  # package data too
    # the shipped study stores are not installed: reading one says so, naming VITPLAST_DATA
    err = subprocess.run([str(venv / "bin" / "vitplast"), "sweep", "--status"], cwd=elsewhere,
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert err.returncode == 2 and "VITPLAST_DATA" in err.stderr


def _course(venv: Path, folder: Path, name: str, env: dict, only=()) -> pd.DataFrame:
    """``vitplast notebooks run --profile smoke`` of the installed copy from ``folder`` (of the
    notebooks ``only`` names, by number, when given)."""
    subprocess.run([str(venv / "bin" / "vitplast"), "notebooks", "run", "--profile", "smoke",
                    "--out", name, *(["--only", *only] if only else [])], cwd=folder, env=env,
                   capture_output=True, text=True, timeout=3600)
    summary = pd.read_csv(folder / name / "summary.csv", keep_default_na=False)
    print(f"\n{name}:\n{summary.to_string(index=False)}")
    return summary.set_index("notebook")


@pytest.mark.slow
def test_an_installed_copy_runs_the_course_with_and_without_the_shipped_results(wheel,
                                                                                 tmp_path):
    """The smoke profile of every notebook from an installed wheel: without a results folder
    each runs or stops in its first cell within seconds, with one message naming VITPLAST_DATA
    and the folders it needs; with ``VITPLAST_DATA`` (a copy of the checkout's data/) those run
    too (the others ran already: the results folder changes nothing for them)."""
    venv = _installed_venv(wheel, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(_env(), VITPLAST_CACHE=str(tmp_path / "cache"))
    start = time.perf_counter()  # how long this machine takes to import the kit, cold
    subprocess.run([str(venv / "bin" / "python"), "-c", "from vitplast.course.parameters import "
                    "setup"], check=True, cwd=elsewhere, env=env, timeout=300)
    limit = STOP_SECONDS * max(1.0, (time.perf_counter() - start) / STOP_BASELINE)
    bare = _course(venv, elsewhere, "no-data", env)
    assert list(bare.index) == notebooks.NOTEBOOKS
    (tmp_path / "empty").mkdir()
    needing = need_data_in_smoke(tmp_path / "empty")
    for nb, row in bare.iterrows():
        if nb not in needing:
            assert row["status"] == "ok", (nb, row["error"])
            continue
        assert row["status"] == "failed" and row["seconds"] < limit, (nb, row["seconds"], limit)
        assert re.match(r"In \[3\]: FileNotFoundError: " + nb, row["error"])  # the setup cell
        assert "Set VITPLAST_DATA=FOLDER holding" in row["error"], row["error"]
        folders = re.search(r"holding (.*?) \(", row["error"]).group(1).split(" and ")
        assert folders and set(folders) <= {f"{s}/" for s in parameters.shipped_stores()}
    data = shutil.copytree(ROOT / "data", tmp_path / "data")  # the installed copy may not write
    full = _course(venv, elsewhere, "with-data", dict(env, VITPLAST_DATA=str(data)),
                   only=[nb.split("_")[0] for nb in needing])
    assert list(full.index) == needing
    assert (full["status"] == "ok").all(), full[full["status"] != "ok"]["error"].to_dict()
