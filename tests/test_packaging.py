"""The installable kit: a wheel holds the checkpoints, their manifest and the notebooks, and an
installed copy works from any folder (console script, embedded model, notebooks)."""

import hashlib
import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import vitplast

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ["01_definitions", "02_plasticity", "02b_gauge", "03_bounds", "04_finetuning",
             "05_confounds", "06_explorer"]


def _env() -> dict:
    """The environment without PYTHONPATH: an installed copy must not see the checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


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
        for nb in NOTEBOOKS:
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


@pytest.mark.slow
def test_installed_wheel_works_from_any_folder(wheel, tmp_path):
    """A fresh venv sees this environment's packages (torch is not reinstalled) but not the
    checkout; the wheel goes in with --no-deps; everything runs from an unrelated folder."""
    venv = tmp_path / "venv"
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
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args):
        return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True,
                              cwd=elsewhere, env=_env(), timeout=300).stdout

    assert run(venv / "bin" / "vitplast", "--version").strip() == f"vitplast {vitplast.__version__}"
    listing = run(venv / "bin" / "vitplast", "notebooks", "list")
    assert all(nb in listing for nb in NOTEBOOKS) and "n_pairs: int = 512" in listing
    where = run(python, "-c", "from vitplast import models, notebooks; "
                "m = models.load_model('vitplast_fmnist'); "
                "print(models.__file__, notebooks.NOTEBOOK_DIR, sum(p.numel() for p in "
                "m.parameters()))").split()
    assert Path(where[0]).is_relative_to(venv) and Path(where[1]).is_relative_to(venv)
    assert where[2] == "1199882"
    # the shipped study stores are not installed: reading one says so, naming VITPLAST_DATA
    err = subprocess.run([str(venv / "bin" / "vitplast"), "sweep", "--status"], cwd=elsewhere,
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert err.returncode == 2 and "VITPLAST_DATA" in err.stderr
