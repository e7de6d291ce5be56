"""Headless execution of the notebook sequence with papermill, under named profiles.

``NOTEBOOKS`` is the one list of notebooks; ``PROFILES`` maps a profile to the parameters
injected into each notebook (the notebook's own ``parameters`` cell holds the ``default``
profile's values):

- ``smoke``: CI, the whole sequence (target: 60 s from empty caches);
- ``default``: a laptop CPU (target: 120 s on 2 cores) from an empty
  cache (the notebooks' defaults; ``benchmarks/notebook_times.py`` measures both);
- ``paper``: the paper's protocol on a GPU (ViT-B/16 in21k, its datasets and grid); needs the
  weights (hub or ``-p weights_file PATH``) and the datasets under ``data_root``.

The notebooks are package data (``vitplast/notebooks/``). Each declares its parameters with a
type (``n_pairs: int = 512  # comment``), which ``papermill --help-notebook`` shows and
``plan`` checks: a value of the wrong type fails before any kernel starts. The notebook's
first code cell checks them again where it runs (``parameters.setup``), so that plain
papermill gets the same messages.

``copy_to`` copies them out of the package (``vitplast notebooks copy DEST``) for JupyterLab.
``run`` executes them, two at a time by default (``JOBS``; they are independent), into
``runs/<timestamp>-<profile>/`` (figures into its ``figures/``, the kernels' stderr into its
``kernel.log``; how kernels start and stop: ``vitplast.course.kernels``), continues past a
failing notebook, stops at Ctrl-C (recording the notebook as interrupted), and returns a
summary table (notebook, status, seconds, where and why it failed:
``reading_copy.failing_cell``);
``reading_copy.write_site`` renders the run's folder as a static HTML site.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path

import pandas as pd
import papermill as pm
import torch

from vitplast.course import kernels
from vitplast.course.parameters import NOTEBOOK_DIR, READS, check, check_task_names, declared
from vitplast.course.reading_copy import failing_cell, record_status
from vitplast.datasets import tasks
from vitplast.datasets.paper_datasets import PAPER_DATASETS, PAPER_MODEL
from vitplast.models import EMBEDDED_NAME

#: The notebook sequence, in order.
NOTEBOOKS = ["01_definitions", "02_plasticity", "02b_gauge", "02c_real_vit", "03_bounds",
             "03b_intervals", "04_finetuning", "04b_advise", "05_confounds", "06_explorer",
             "07_suite"]
#: The parameters that make a timm ``model_name`` one's own model (dropped for the embedded one).
OWN_MODEL = ("weights_file", "model_args")
#: Profile -> notebook -> parameters overriding the notebook's defaults.
PROFILES: dict[str, dict[str, dict]] = {
    "smoke": {
        "01_definitions": dict(n_pairs=64, n_samples=500),
        "02_plasticity": dict(n_pairs=32, tasks=["fmnist_contrast", "digits"], stream_pairs=16,
                              checkpoints=["init", "final"], scales=[0.5, 1.0, 2.0]),
        "02b_gauge": dict(n_pairs=32, gauge_tasks=["fmnist_contrast", "digits"],
                          embedding_scales=[1.0, 8.0], invariance_steps=3, relative_pairs=16),
        "02c_real_vit": dict(embedded_pairs=32),
        "03_bounds": dict(n_pairs=32, n_seeds=2, power_iters=5, n_lipschitz=4),
        "03b_intervals": dict(n_pairs=32, power_iters=5, n_lipschitz=4),
        "04_finetuning": dict(study="main-smoke", recompute=True, n_pairs=16),
        "04b_advise": dict(study="main-smoke", recompute=True),
        "05_confounds": dict(study="confounds-smoke", recompute=True),
        "06_explorer": dict(n_pairs=16, scales=[0.5, 2.0]),
    },
    "default": {},
    # The paper's protocol on a GPU: ViT-B/16 in21k (hub, or -p weights_file ...), the 11
    # datasets under data_root (layouts: vitplast.datasets.paper_datasets), pairs within each
    # dataset (no ImageNet val ships with the kit), 12,800 pairs as the paper.
    "paper": {
        "02_plasticity": dict(model_name=PAPER_MODEL, checkpoints=["final"],
                              tasks=list(PAPER_DATASETS), source="", data_root="data/paper",
                              n_pairs=12_800, batch_size=64, stream_pairs=256),
        "02b_gauge": dict(model_name=PAPER_MODEL, source="", data_root="data/paper", n_pairs=12_800,
                          gauge_tasks=list(PAPER_DATASETS)[:4], recipe_folder=""),
    },
}


def notebook_parameter_types(name: str) -> dict[str, str]:
    """Each parameter's declared type, as written in its annotation (``"int"``,
    ``"list[float]"``...), else the type name of its default."""
    return {k: kind for k, (_, kind) in declared(NOTEBOOK_DIR / f"{name}.ipynb").items()}


def notebook_parameters(name: str) -> dict:
    """The parameters (and their default values) a notebook declares in its parameters cell:
    flat literals, one per line, with or without a type annotation."""
    return {k: value for k, (value, _) in declared(NOTEBOOK_DIR / f"{name}.ipynb").items()}


def outline(name: str) -> tuple[str, int]:
    """A notebook's title and its minutes, as its first cell states them (``# NN · Title``,
    ``**Sections** (about N minutes``): what ``vitplast notebooks list`` and the README's
    course table show."""
    first = "".join(json.loads((NOTEBOOK_DIR / f"{name}.ipynb").read_text())["cells"][0]
                    ["source"])
    minutes = re.search(r"\*\*Sections\*\* \(about (\d+) minutes", first)
    title = first.splitlines()[0].lstrip("# ")
    return title.partition(" · ")[2] or title, int(minutes.group(1)) if minutes else 0


def available() -> list[str]:
    """The notebooks of ``NOTEBOOKS`` present in ``NOTEBOOK_DIR`` (``vitplast/notebooks/``)."""
    return [nb for nb in NOTEBOOKS if (NOTEBOOK_DIR / f"{nb}.ipynb").exists()]


def copy_to(dest: str | Path, *, force: bool = False) -> list[Path]:
    """Copy the notebooks of ``available()`` and the notebooks' README into ``dest`` (made if
    missing), for JupyterLab: an installed copy keeps them inside site-packages.

    Raises:
        FileExistsError: a notebook already in ``dest`` with other content (unless ``force``),
            naming them; nothing is copied then.
    """
    dest = Path(dest)
    files = [NOTEBOOK_DIR / f"{nb}.ipynb" for nb in available()] + [
        NOTEBOOK_DIR / "README.md", NOTEBOOK_DIR / "solutions.md"]
    files = [f for f in files if f.exists()]
    clash = [f.name for f in files
             if (dest / f.name).exists() and (dest / f.name).read_bytes() != f.read_bytes()]
    if clash and not force:
        raise FileExistsError(f"{dest} already holds other versions of {clash}: give another "
                              "folder, or --force (force=True) to overwrite them")
    dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(f, dest / f.name)) for f in files]


def plan(profile: str = "default", only: list[str] | None = None,
         params: dict | None = None) -> list[tuple[str, dict]]:
    """The (notebook, parameters) to run; checks every name before any kernel starts.

    Raises:
        ValueError: unknown profile, notebook, a parameter no selected notebook declares, a
            value of another type than the parameter's (``parameters.check``: text is read as a
            literal of the parameter's type), or a weights file or ``model_args`` when every
            selected notebook loads the embedded model (they go only to the notebooks whose
            ``model_name`` is a timm name).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {list(PROFILES)}")
    names = available()
    if only:  # a notebook's number first ("02": 02_plasticity, not 02b_gauge), else a prefix
        pick = {o: [nb for nb in names if nb.split("_")[0] == o]
                or [nb for nb in names if nb.startswith(o)] for o in only}
        if unknown := [o for o, v in pick.items() if not v]:
            raise ValueError(f"unknown notebook(s) {unknown}; valid: {names}")
        names = [nb for nb in names if any(nb in v for v in pick.values())]
    defaults = {nb: notebook_parameters(nb) for nb in names}
    params = params or {}
    unknown = sorted(set(params) - set().union(*defaults.values()))
    if unknown:
        valid = sorted(set().union(*defaults.values()))
        raise ValueError(f"unknown parameter(s) {unknown}; valid: {valid}")
    out = []
    for nb in names:
        chosen = {k: v for k, v in PROFILES[profile].get(nb, {}).items() if k in defaults[nb]}
        chosen.update({k: v for k, v in params.items() if k in defaults[nb]})
        chosen = check(nb, chosen, declared(NOTEBOOK_DIR / f"{nb}.ipynb"))
        if chosen.get("model_name", defaults[nb].get("model_name")) == EMBEDDED_NAME:
            for own in OWN_MODEL:  # the embedded model ships its own weights and architecture
                chosen.pop(own, None)
        elif "model_name" in defaults[nb]:
            _one_checkpoint(nb, chosen, defaults[nb], given=params)
        out.append((nb, chosen))
    for own in OWN_MODEL:
        if params.get(own) and not any(own in p for _, p in out):
            raise ValueError(f"{own} is for a timm model_name, but every selected notebook "
                             f"loads {EMBEDDED_NAME} (which ships its own weights and "
                             f"architecture): add -p model_name {PAPER_MODEL} (or the timm name "
                             "of your model), or use --profile paper")
    return out


def _one_checkpoint(nb: str, chosen: dict, declared: dict, given: dict) -> None:
    """A timm ``model_name`` has one checkpoint, its weights: the notebook's list of
    embedded checkpoints becomes ``["final"]`` (a label), unless the caller gave several."""
    if "checkpoints" not in declared:
        return
    if "checkpoints" not in given:
        chosen["checkpoints"] = ["final"]
    elif len(chosen["checkpoints"]) > 1:
        raise ValueError(f"{nb}: checkpoints {chosen['checkpoints']} are the embedded model's; "
                         f"the timm model {chosen['model_name']!r} has one (its weights): drop "
                         "-p checkpoints, or pass -p checkpoints '[\"final\"]'")


def check_requirements(profile: str, todo: list[tuple[str, dict]]) -> None:
    """Fail before any kernel starts when a profile's needs are missing.

    The ``paper`` profile needs a CUDA GPU and every dataset of its notebooks under
    ``data_root`` (each is opened once, so a missing file is named now, not mid-run). Model
    weights come from the hub or ``-p weights_file PATH`` (checked to exist, in any profile);
    hub access is found out at load time.
    """
    for nb, params in todo:
        if params.get("weights_file") and not Path(params["weights_file"]).is_file():
            raise FileNotFoundError(f"{nb}: weights_file {params['weights_file']} does not exist")
        check_task_names(nb, {**notebook_parameters(nb), **params})
    if profile != "paper":
        return
    if not torch.cuda.is_available():
        raise RuntimeError("the paper profile measures and finetunes ViT-B/16 at 224 px: it needs "
                           "a CUDA GPU (none found). Use --profile default on a CPU.")
    for nb, params in todo:
        root = params.get("data_root")
        for task in params.get("tasks", []):
            if tasks.TASKS.get(task) == "paper":
                if not root or not Path(root).is_dir():
                    raise FileNotFoundError(
                        f"{nb}: data_root {root!r} is not a folder; put the datasets there "
                        "(layouts: vitplast.datasets.paper_datasets)")
                tasks.load(task, root, img_size=32)


#: Parameters that name files or folders: made absolute before a notebook runs (its working
#: directory is the output folder, not where ``run`` was called from): the data, weights and
#: figures' folders, and each parameter naming a study store a notebook reads (``READS``:
#: ``results_dir``, ``suite_dir``...).
PATH_PARAMETERS = ("data_root", "weights_file", "fig_dir",
                   *sorted({p for found in READS.values() for p, _ in found if p}))
#: ``summary.csv``'s ``status`` values.
STATUSES = ("ok", "failed", "interrupted", "not run")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during ``run``: which notebook, and where its copy and the summary are."""

    def __init__(self, notebook: str, out_dir: Path, summary: pd.DataFrame):
        super().__init__(f"interrupted during {notebook}")
        self.notebook, self.out_dir, self.summary = notebook, out_dir, summary


#: Notebooks run side by side by default (``run``'s ``jobs``): the targets' 2 cores.
JOBS = 2


def run(profile: str = "default", only: list[str] | None = None, params: dict | None = None,
        out_dir: str | Path | None = None, progress: bool = True,
        jobs: int = JOBS) -> pd.DataFrame:
    """Execute the notebooks with papermill, ``jobs`` at a time (they are independent: each
    reads the shipped stores; what they write beside them, kept tables and smoke studies' runs,
    and the load-or-compute cache they share are written atomically), started in order; return
    the summary table, in the notebooks' order.

    Columns: ``notebook``, ``status`` (``STATUSES``: ok, failed, interrupted, not run),
    ``seconds``, ``error`` (where and why it failed: ``In [N]: ValueError: <its message's
    first line>``). A failing notebook does not stop the rest; Ctrl-C does: the notebooks in
    flight are recorded as interrupted (in the table, in ``summary.csv`` and in their executed
    copies' ``metadata.vitplast.status``), the rest as not run, and ``Interrupted`` (a
    ``KeyboardInterrupt``, naming the first interrupted) is raised. Figures are saved to
    ``out_dir/figures`` unless a ``fig_dir`` parameter says otherwise; the table's
    ``attrs["out_dir"]`` is the run's folder.
    """
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs takes a whole number >= 1 (notebooks at a time); got {jobs!r}")
    todo = plan(profile, only, params)
    check_requirements(profile, todo)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out_dir) if out_dir else Path("runs") / f"{stamp}-{profile}"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [dict(notebook=nb, status="not run", seconds=0.0, error="") for nb, _ in todo]
    kernels.INTERRUPTED.clear()
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        signal.signal(signal.SIGINT, kernels.note_sigint)  # the same, noting that it came
    one = dict(profile=profile, out_dir=out_dir, progress=progress, total=len(todo),
               threads=kernels.threads_each(min(jobs, len(todo))))
    if jobs == 1:
        for i, (nb, nb_params) in enumerate(todo):
            rows[i].update(_execute(i, nb, nb_params, **one))
            if rows[i]["status"] == "interrupted":
                break
    else:
        with ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(_execute, i, nb, nb_params, **one)
                       for i, (nb, nb_params) in enumerate(todo)]
            try:
                wait(futures)
            except KeyboardInterrupt:  # here in the main thread: the kernels are told
                kernels.INTERRUPTED.set()
                kernels.interrupt_all()
                with kernels.sigint_ignored():
                    if wait(futures, timeout=kernels.GRACE).not_done:
                        kernels.kill_all()  # a kernel that never answered the interrupt
                        wait(futures)
            for row, future in zip(rows, futures):
                row.update(future.result())
    summary = pd.DataFrame(rows)
    stopped = [r["notebook"] for r in rows if r["status"] == "interrupted"]
    with kernels.sigint_ignored() if stopped else contextlib.nullcontext():
        summary.to_csv(out_dir / "summary.csv", index=False)  # a 2nd Ctrl-C must not lose it
    if stopped:
        raise Interrupted(stopped[0], out_dir, summary)
    summary.attrs["out_dir"] = out_dir
    return summary


def _execute(i: int, nb: str, nb_params: dict, *, profile: str, out_dir: Path,
             progress: bool, total: int, threads: int | None) -> dict:
    """Run notebook ``nb`` (the ``i``-th of ``total``) with papermill into ``out_dir``; its
    row of ``run``'s summary (``status``, ``seconds``, ``error``), also recorded in its
    executed copy. Not run once Ctrl-C came."""
    if kernels.INTERRUPTED.is_set():
        return dict(status="not run")
    nb_params = {k: str(Path(v).resolve()) if k in PATH_PARAMETERS and v else v
                 for k, v in nb_params.items()}
    if "fig_dir" in notebook_parameters(nb) and "fig_dir" not in nb_params:
        nb_params["fig_dir"] = str((out_dir / "figures").resolve())
    target = out_dir / f"{nb}.ipynb"
    start = time.perf_counter()
    bar = dict(desc=f"[{i + 1}/{total}] {nb}") if progress else False
    try:
        # shutdown_kernel: once its last cell is done the kernel is stopped at once, not
        # asked to exit (a kernel holding torch spends seconds of CPU exiting)
        pm.execute_notebook(str(NOTEBOOK_DIR / f"{nb}.ipynb"), str(target.resolve()),
                            parameters=nb_params, progress_bar=bar, kernel_name="python3",
                            shutdown_kernel="immediate", kernel_manager_class=kernels.manager(
                                (out_dir / "kernel.log").resolve(), out_dir.resolve(),
                                threads))
        status, error = "ok", ""
    except KeyboardInterrupt:
        status, error = "interrupted", "KeyboardInterrupt (Ctrl-C)"
        kernels.INTERRUPTED.set()
    except Exception as err:  # papermill raises PapermillExecutionError; keep going
        status, error = "failed", failing_cell(target) or f"{type(err).__name__}: {err}"
        error = error.strip().splitlines()[0]  # the CLI's table: one line per notebook
        if getattr(err, "ename", None) == "KeyboardInterrupt" or isinstance(
                err, kernels.NotStarted) or (
                type(err).__name__ == "DeadKernelError" and kernels.INTERRUPTED.is_set()):
            status = "interrupted"  # Ctrl-C reached the kernel (and may have killed it)
            kernels.INTERRUPTED.set()
            # the kernel client's orphaned task would print a traceback when collected
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    with kernels.sigint_ignored() if status == "interrupted" else contextlib.nullcontext():
        record_status(target, status, profile, nb_params)  # a 2nd Ctrl-C must not lose it
    return dict(status=status, seconds=round(time.perf_counter() - start, 1), error=error)
