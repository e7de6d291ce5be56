"""The front page (README.md) and the reference (docs/*.md) say what the kit does:

- nothing the README showed before the reference existed is lost (``OLD_README``: every command
  and Python call of the README at commit 93459343 is on the front page or a reference page);
- every command of a ```` ```bash ```` block runs, each block as one script, pasted as a user
  would, in a scratch folder that looks like a checkout; where a command needs a GPU, a cluster,
  conda, a download or hours, its dry run or its ``--help`` runs instead, or the test that runs
  it elsewhere is named (``HOW``: a command this table does not know fails, so a new command
  is tested once it is written);
- every ```` ```python ```` block executes, a page's blocks in order in one namespace, in the
  same scratch folder (the ViT-B block with the stand-ins ``STAND_INS``: a small ViT for ViT-B,
  64 pairs for 12,800);
- every ``vitplast`` command shown, in a block or inline, is one the command line parses;
- the course table lists the notebooks in the course order, each with its minutes.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vitplast.course import notebooks

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

OLD_COMMIT = "93459343"
#: Every command and Python call the README showed at commit 93459343, before the reference
#: moved to docs/ (its code blocks, line by line, and its inline commands and calls).
OLD_README = [
    "make run", "make test", "make run PROFILE=smoke", "make browser-test",
    "make slurm-up", "make slurm-down",
    "vitplast.datasets.data.fashion_mnist_arrays(root=...)",
    ".venv/bin/jupyter lab vitplast/notebooks/",
    'vitplast.models.load_pretrained("pretrain_no_weight_decay")',
    "pip install .", "pip wheel . --no-deps -w dist && pip install dist/vitplast-*.whl",
    "vitplast --version", "python -m vitplast", "vitplast notebooks list",
    "vitplast notebooks copy my-notebooks",
    "vitplast notebooks run --profile smoke --out runs/smoke",
    "conda env create -f environment.yml && conda activate vitplast",
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu && "
    "pip install .",
    'pip install -e ".[dev]"',
    "vitplast.course.parameters.shipped_stores()", "vitplast sweep --root",
    "vitplast.experiments.archive.shipped_stores()", "vitplast.course.parameters.READS",
    "vitplast data pack dist",
    "vitplast data unpack vitplast-data-0.1.0.tar.gz ~/vitplast-data && "
    "export VITPLAST_DATA=~/vitplast-data",
    "vitplast cache info", "vitplast cache clear", "vitplast cache clear results",
    "vitplast.measure.fingerprint",
    "vitplast notebooks run --profile smoke", "vitplast notebooks run --only 02 -p n_pairs 2048",
    "vitplast notebooks run --only 02 -p tasks '[\"digits\", \"fmnist_snow\"]'",
    "vitplast notebooks run --jobs 1", "vitplast notebooks html runs/20260101-120000-default",
    "vitplast notebooks diff runs/A runs/B", "notebooks run --html",
    "vitplast notebooks html runs/<timestamp>-<profile>",
    "vitplast sweep", "vitplast sweep --study budget", "vitplast sweep --study confounds",
    "vitplast sweep --study suite --shard 0/2", "vitplast sweep --study gauge",
    "vitplast sweep --study length", "vitplast sweep --status", "vitplast sweep --study suite",
    "vitplast pretrain", "vitplast pretrain --out DIR --weight-decay 0 --stages 6:2e-3:0",
    "papermill --help-notebook vitplast/notebooks/02_plasticity.ipynb",
    "papermill 02_plasticity.ipynb out.ipynb -p tasks '[\"digits\"]'", "-p n_pairs abc",
    "Store(root).audit()", "vitplast.experiments.study_log.restart_log(root)",
    "vitplast.experiments.runs.RUN_KEYS", "vitplast.train.batched",
    "vitplast.course.notebooks.PROFILES", "vitplast.datasets.paper_datasets",
    "vitplast notebooks run --profile paper -p weights_file vit_b16_in21k.safetensors",
    "python benchmarks/vitb_dry_run.py", "python benchmarks/gpu_check.py",
    "vitplast sweep --study paper --data-root data/paper --weights-file "
    "vit_b16_in21k.safetensors --root results/paper --executor submitit --cluster slurm "
    "--partition gpu --gpus-per-node 1 --cpus-per-task 8 --timeout-min 240 "
    "--array-parallelism 32 --slurm-param qos=normal",
    "apt-get install -y slurm-wlm munge",
    "make slurm-up && export SLURM_CONF=$(pwd)/.slurm/slurm.conf",
    "vitplast sweep --study main-smoke --executor submitit --cluster slurm --cpus-per-task 1",
    'sweep.run_sweep(configs, "results/paper", executor="submitit", cluster="slurm", '
    "gpus_per_node=1, slurm_array_parallelism=32, timeout_min=240)",
    "models.load_model(device=None)",
    "from vitplast import models", "from vitplast.measure import intervals, plasticity",
    "from vitplast.measure.pairs import make_pairs",
    'model = models.load_model("vit_base_patch16_224.orig_in21k", '
    'weights_file="vit_b16_in21k.safetensors")',
    "pairs = make_pairs(source_images, downstream_images, n_pairs=12_800)",
    'rates = plasticity.measure(model, pairs, protocol="hidden")',
    "print(plasticity.ranking(rates))", "print(intervals.intervals(model, pairs))",
    'model = models.load_model("vit_tiny_patch16_224", weights_file="tiny32.safetensors", '
    "img_size=32, patch_size=4, num_classes=10)",
    "vitplast notebooks run --profile smoke --only 02 03 -p model_name vit_tiny_patch16_224 "
    "-p weights_file tiny32.safetensors -p model_args "
    "'{\"img_size\": 32, \"patch_size\": 4, \"num_classes\": 10}'",
    "-p model_name NAME -p weights_file FILE", "vitplast.inputs.Fitted",
    "from vitplast.report import advise, regret",
    'ranked = advise.rank("vitplast_fmnist", "digits")',
    'own = advise.rank("vit_tiny_patch16_224", "digits", weights_file="tiny32.safetensors", '
    "model_args=dict(img_size=32, patch_size=4, num_classes=10))",
    'print(ranked[ranked["rule"] == "loss drop"].sort_values("rank"))',
    'print(regret.table(regret.on_study("suite")))',
    "vitplast.datasets.corruptions", "vitplast.datasets.suite", "vitplast.experiments.search",
    "vitplast.LAYERS", "from vitplast.measure import plasticity",
]

#: How each command of a bash block is tested: "run" (as written), "dry" (its dry run:
#: ``make -n``, ``vitplast notebooks run --dry-run``, ``vitplast sweep --status``, ``pip
#: install --dry-run``), ("help", COMMAND) (COMMAND, its help, runs and names every option the
#: line uses) or ("elsewhere", "path::test") (that test runs it).
#: ``vitplast sweep --status`` reads every store, the main study's is dry-run; the other
#: studies' lines are checked by ``--help`` and by ``parse_args``, which knows the study names.
HOW = {
    "make run": "dry",
    "make test": "dry",
    "vitplast cache info": "run",
    "vitplast cache clear results": "run",
    "vitplast cache clear": "run",
    "vitplast sweep --study paper --data-root data/paper --weights-file "
    "vit_b16_in21k.safetensors --root results/paper --executor submitit --cluster slurm "
    "--partition gpu --gpus-per-node 1 --cpus-per-task 8 --timeout-min 240 "
    "--array-parallelism 32 --slurm-param qos=normal": "dry",
    "make slurm-up && export SLURM_CONF=$(pwd)/.slurm/slurm.conf": "dry",
    "vitplast sweep --study main-smoke --executor submitit --cluster slurm --cpus-per-task 1":
        "dry",
    "make slurm-down": "dry",
    "pip install .": "dry",
    "vitplast --version": "run",
    "vitplast notebooks list": "run",
    "vitplast notebooks copy my-notebooks": "run",
    "pip wheel . --no-deps -w dist && pip install dist/vitplast-*.whl": (
        "elsewhere", "tests/test_packaging.py::test_installed_wheel_works_from_any_folder"),
    "conda env create -f environment.yml && conda activate vitplast": (
        "elsewhere", "tests/test_environment.py::test_environment_yml_matches_pyproject"),
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu && "
    "pip install .": ("help", "pip install --help"),
    'pip install -e ".[dev]"': "dry",
    "vitplast data pack dist": "run",
    "cd dist": "run",
    "vitplast data unpack vitplast-data-0.1.0.tar.gz ~/vitplast-data && "
    "export VITPLAST_DATA=~/vitplast-data": "run",
    ".venv/bin/jupyter lab vitplast/notebooks/": ("help", ".venv/bin/jupyter lab --help"),
    "vitplast notebooks run --profile smoke": "dry",
    "vitplast notebooks run --only 02 -p n_pairs 2048": "dry",
    "vitplast notebooks run --only 02 -p tasks '[\"digits\", \"fmnist_snow\"]'": "dry",
    "vitplast notebooks run --jobs 1": "dry",
    "vitplast notebooks run --profile smoke --out runs/smoke": "dry",
    "vitplast notebooks run --only 01 --dry-run": "run",
    "papermill --help-notebook vitplast/notebooks/02_plasticity.ipynb": "run",
    "papermill vitplast/notebooks/01_definitions.ipynb runs/01_definitions.ipynb -p n_pairs 64 "
    "-p n_samples 500": "run",
    "vitplast notebooks html runs/20260101-120000-default": "run",
    "vitplast notebooks diff runs/A runs/B": "run",
    "vitplast notebooks run --profile smoke --only 02 03 -p model_name vit_tiny_patch16_224 "
    "-p weights_file tiny32.safetensors -p model_args "
    "'{\"img_size\": 32, \"patch_size\": 4, \"num_classes\": 10}'": "dry",
    "python benchmarks/vitb_dry_run.py --quick": (
        "elsewhere", "tests/datasets/test_paper_datasets.py::"
                     "test_vitb_dry_run_at_full_size_on_fake_files"),
    "python benchmarks/gpu_check.py --dry": (
        "elsewhere", "tests/test_gpu_check.py::test_the_dry_run_takes_the_whole_path_on_the_cpu"),
    "vitplast notebooks run --profile paper -p weights_file vit_b16_in21k.safetensors": (
        "help", "vitplast notebooks run --help"),
    "vitplast sweep --study paper --data-root data/paper --weights-file "
    "vit_b16_in21k.safetensors": "dry",
    "vitplast sweep": "dry",
    "vitplast sweep --study budget": ("help", "vitplast sweep --help"),
    "vitplast sweep --study confounds": ("help", "vitplast sweep --help"),
    "vitplast sweep --study suite --shard 0/2": ("help", "vitplast sweep --help"),
    "vitplast sweep --study gauge": ("help", "vitplast sweep --help"),
    "vitplast sweep --study length": ("help", "vitplast sweep --help"),
    "vitplast sweep --status": "run",
    "vitplast pretrain": ("help", "vitplast pretrain --help"),
    "vitplast pretrain --out DIR --weight-decay 0 --stages 6:2e-3:0": (
        "help", "vitplast pretrain --help"),
}

#: The ViT-B block of the paper page runs with these replacements (ViT-B's weights are a
#: download, and 12,800 pairs of 224 px images an hour on a CPU): the same calls, a small model.
STAND_INS = {
    'models.load_model("vit_base_patch16_224.orig_in21k", '
    'weights_file="vit_b16_in21k.safetensors")':
        'models.load_model("vit_tiny_patch16_224", weights_file="tiny32.safetensors", '
        "img_size=32, patch_size=4, num_classes=10)",
    "torch.rand(64, 3, 224, 224)": "torch.rand(16, 3, 32, 32)",
    "n_pairs=12_800": "n_pairs=16",
}


def _text(page: str) -> str:
    return (ROOT / page).read_text()


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def _commands(block: str) -> list[str]:
    """A bash block's commands: continuation lines joined, comments and blank lines dropped."""
    lines = block.replace("\\\n", " ").splitlines()
    return [" ".join(re.sub(r"(^|\s+)#\s.*$", "", line).split()) for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


def _flat(text: str) -> str:
    return re.sub(r"\s+", "", text.replace("\\\n", " "))


#: What the old README showed that has moved since -> what the docs show instead.
MOVED = {"from vitplast.report import advise, regret":
         "from vitplast.experiments import advise\nfrom vitplast.report import regret"}


def test_nothing_the_old_readme_showed_is_lost():
    everything = _flat("".join(_text(page) for page in PAGES))
    missing = [item for item in OLD_README if _flat(MOVED.get(item, item)) not in everything]
    assert missing == []


def test_the_old_readme_showed_each_of_them():
    """``OLD_README`` is the README at that commit's, not a list made to pass (where the
    checkout has its history)."""
    old = subprocess.run(["git", "show", f"{OLD_COMMIT}:README.md"], cwd=ROOT,
                         capture_output=True, text=True)
    if old.returncode:
        pytest.skip(f"no git history here ({old.stderr.strip()[:80]})")
    assert [item for item in OLD_README if _flat(item) not in _flat(old.stdout)] == []


def test_the_readme_is_read_in_three_minutes():
    readme = _text("README.md")
    assert len(readme.splitlines()) <= 120
    assert "make run" in readme and "make test" in readme and "docs/figures/" in readme


def test_the_course_table_lists_the_notebooks_in_order_with_their_minutes():
    """One row per notebook of ``NOTEBOOKS``, in order, with the minutes its first cell
    states (``notebooks.outline``); every row names a question."""
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \| (\d+) \|$", _text("README.md"), flags=re.M)
    assert [r[0] for r in rows] == notebooks.NOTEBOOKS
    for name, question, minutes in rows:
        stated = notebooks.outline(name)[1]
        assert int(minutes) == stated, f"{name}: the README says {minutes}, the notebook {stated}"
        assert question.endswith("?") or question.endswith("?)"), question


def test_every_link_of_the_pages_points_to_a_file_and_heading_that_exist():
    def anchors(page: Path) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
        return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}

    checked = 0
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _text(page)):
            if target.startswith("http"):
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            assert file.exists(), f"{page}: {target}"
            if anchor:
                assert anchor in anchors(file), f"{page}: {target}: no such heading"
            checked += 1
    assert checked >= 20


def _all_commands() -> list[tuple[str, int, str]]:
    """(page, block number, command) of every bash block."""
    return [(page, i, c) for page in PAGES for i, b in enumerate(_blocks(_text(page), "bash"))
            for c in _commands(b)]


def test_every_command_says_how_it_is_tested():
    shown = {c for _, _, c in _all_commands()}
    assert sorted(shown - set(HOW)) == [], "commands not in HOW: say how each is tested"
    assert sorted(set(HOW) - shown) == [], "HOW names commands no page shows"


def test_the_tests_named_elsewhere_exist():
    for how in HOW.values():
        if isinstance(how, tuple) and how[0] == "elsewhere":
            path, name = how[1].split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), how[1]


def test_every_vitplast_command_shown_parses():
    """Every ``vitplast ...`` line of a block, and every inline one, is a valid command line
    (placeholders such as ``<timestamp>`` are values)."""
    import contextlib
    import io
    import shlex

    from vitplast.__main__ import _parser

    inline = [m for page in PAGES for m in re.findall(r"`(vitplast [^`]+)`", re.sub(
        r"```.*?```", "", _text(page), flags=re.S))]
    lines = [part.strip() for _, _, c in _all_commands() for part in c.split("&&")
             if part.strip().startswith("vitplast ")] + inline
    assert len(lines) > 40
    for line in lines:
        args = shlex.split(line)[1:]
        if args in (["--version"], ["sweep", "--root"]):  # a flag named in prose
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                _parser().parse_args(args)
        except SystemExit as stop:
            if stop.code:  # --help exits 0
                pytest.fail(f"{line!r} does not parse (exit {stop.code})")


def _dry(part: str) -> str:
    """A command's dry run."""
    if part.startswith("make "):
        return "make -n " + part[5:]
    if part.startswith("vitplast notebooks run"):
        return part + " --dry-run"
    if part.startswith("vitplast sweep"):
        return part + " --status"
    if part.startswith("pip install "):  # offline with this environment's setuptools if it has it
        import importlib.util

        has_setuptools = importlib.util.find_spec("setuptools") is not None
        offline = "--no-build-isolation --no-index " if has_setuptools else ""
        return f"pip install --dry-run --no-deps {offline}" + part[12:]
    if part.startswith("export "):
        return part
    raise AssertionError(f"no dry run for {part!r}")


def _script_line(command: str) -> str:
    how = HOW[command]
    if how == "run":
        return command
    if how == "dry":
        return " && ".join(_dry(p.strip()) for p in command.split("&&"))
    if how[0] == "elsewhere":
        return f"true  # {how[1]}"
    flags = sorted(set(re.findall(r"(?<!\S)(--?[a-z][\w-]*)", command)))
    return (f"out=$({how[1]}) && for f in {' '.join(flags)}; do grep -q -e \"$f\" <<<\"$out\" "
            f"|| {{ echo \"{how[1]} does not name $f\"; exit 1; }}; done")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A scratch folder that looks like a checkout (links to its package, Makefile, project
    files, environment and benchmarks), with a home, a cache of its own (a part ``results``;
    Fashion-MNIST linked from the real cache), a weights file of one's own
    (``tiny32.safetensors``), and executed runs to render and compare (``runs/A``, ``runs/B``,
    ``runs/20260101-120000-default``: notebook 01's first cells, as papermill leaves them)."""
    import nbformat
    import timm
    from safetensors.torch import save_file

    from vitplast import files

    box = tmp_path_factory.mktemp("docs")
    for name in ("vitplast", "Makefile", "pyproject.toml", "environment.yml", "README.md",
                 "benchmarks"):
        (box / name).symlink_to(ROOT / name)
    # make's .venv, or this interpreter's environment where the tests run in another one
    (box / ".venv").symlink_to(ROOT / ".venv" if (ROOT / ".venv").exists()
                               else Path(sys.executable).parent.parent)
    (box / "home").mkdir()
    save_file(timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4,
                                num_classes=10).state_dict(), box / "tiny32.safetensors")
    nb = nbformat.read(notebooks.NOTEBOOK_DIR / "01_definitions.ipynb", as_version=4)
    nb.cells = nb.cells[:3]
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = i + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="4.0\n")]
    for run in ("A", "B", "20260101-120000-default"):
        (box / "runs" / run).mkdir(parents=True)
        nbformat.write(nb, box / "runs" / run / "01_definitions.ipynb")
    return dict(box=box, data=files.cache_dir() / "data")


def _fresh_cache(sandbox) -> Path:
    cache = sandbox["box"] / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    (cache / "results").mkdir(parents=True)
    (cache / "results" / "table.csv").write_text("a\n1\n")
    if sandbox["data"].is_dir():
        (cache / "data").symlink_to(sandbox["data"])
    return cache


def _blocks_of(language):
    return [pytest.param(page, i, b, id=f"{page}:{i}")
            for page in PAGES for i, b in enumerate(_blocks(_text(page), language))]


@pytest.mark.slow
@pytest.mark.parametrize("page,number,block", _blocks_of("bash"))
def test_each_bash_block_runs(page, number, block, sandbox):
    """The block as one bash script that stops at a failing line, each command as ``HOW``
    says, in the sandbox, with its own cache and home."""
    env = dict(os.environ, HOME=str(sandbox["box"] / "home"),
               VITPLAST_CACHE=str(_fresh_cache(sandbox)),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    script = "set -o pipefail\n" + "\n".join(  # each line stops the script when it fails
        f"{{ {_script_line(c)}\n}} || {{ echo 'failed: command {i + 1}' >&2; exit 1; }}"
        for i, c in enumerate(_commands(block)))
    path = sandbox["box"] / "block.sh"
    path.write_text(script)
    done = subprocess.run(["bash", str(path)], cwd=sandbox["box"], env=env, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, f"{page} block {number}:\n{script}\n{done.stdout[-3000:]}" \
                                 f"\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(_text(p), "python")])
def test_each_python_block_executes(page, sandbox, monkeypatch):
    """A page's Python blocks in order, in one namespace, in the sandbox (its cache: the
    shipped data stay read-only); the ViT-B block with ``STAND_INS``."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(sandbox["box"])
    monkeypatch.setenv("VITPLAST_CACHE", str(_fresh_cache(sandbox)))
    scope = {}
    for i, block in enumerate(_blocks(_text(page), "python")):
        for old, new in STAND_INS.items():
            block = block.replace(old, new)
        assert "vit_base" not in block, f"{page} block {i}: a download without a stand-in"
        exec(compile(block, f"{page} block {i}", "exec"), scope)
