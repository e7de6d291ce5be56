"""Headless execution of the notebook sequence with papermill, under named profiles.

``NOTEBOOKS`` is the one list of notebooks; ``PROFILES`` maps a profile to the parameters
injected into each notebook (the notebook's own ``parameters`` cell holds the ``default``
profile's values):

- ``smoke``: CI, every notebook in a minute or two;
- ``default``: a laptop CPU, the whole sequence in under 30 minutes (the notebooks' defaults);
- ``paper``: the paper's protocol on a GPU (ViT-B/16 in21k, its datasets and grid); needs the
  weights (hub or ``weights_file``) and the datasets under ``data_root``.

``run`` executes them in order into ``runs/<timestamp>/``, continues past a failing notebook,
and returns a summary table (notebook, status, seconds, failing cell).

Used by ``python -m vitplast notebooks run``, the Makefile and the tests.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pandas as pd

from vitplast.paper_datasets import PAPER_DATASETS

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
#: The notebook sequence, in order.
NOTEBOOKS = ["01_definitions", "02_bounds", "03_plasticity", "04_finetuning", "05_confounds",
             "06_explorer"]
#: Profile -> notebook -> parameters overriding the notebook's defaults.
PROFILES: dict[str, dict[str, dict]] = {
    "smoke": {
        "01_definitions": dict(n_pairs=64, n_samples=500),
        "02_bounds": dict(n_pairs=32, n_seeds=2, power_iters=5, n_lipschitz=4),
        "03_plasticity": dict(n_pairs=32, tasks=["fmnist_contrast", "digits"],
                              checkpoints=["init", "final"], scales=[0.5, 1.0, 2.0]),
        "04_finetuning": dict(study="smoke", recompute=True, n_pairs=16),
        "05_confounds": dict(recompute=True, steps=4, tasks=["digits"], lrs=[0.01], extra_lrs={},
                             seeds=[0], n_pairs=16),
        "06_explorer": dict(n_pairs=16),
    },
    "default": {},
    # The paper's protocol on a GPU: ViT-B/16 in21k (hub, or -p weights_file ...), the 11
    # datasets under data_root (layouts: vitplast.paper_datasets), pairs within each dataset
    # (no ImageNet val ships with the kit), 12,800 pairs as the paper.
    "paper": {
        "03_plasticity": dict(model_name="vit_base_patch16_224.orig_in21k", checkpoints=["final"],
                              tasks=list(PAPER_DATASETS), source="", data_root="data/paper",
                              n_pairs=12_800, batch_size=64),
    },
}


def notebook_parameters(name: str) -> dict:
    """The parameters (and their default values) a notebook declares in its parameters cell."""
    nb = json.loads((NOTEBOOK_DIR / f"{name}.ipynb").read_text())
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            env: dict = {}
            exec("".join(cell["source"]), {}, env)  # flat literals by convention
            return env
    raise ValueError(f"{name}.ipynb has no cell tagged 'parameters'")


def available() -> list[str]:
    """The notebooks of ``NOTEBOOKS`` present in ``notebooks/``."""
    return [nb for nb in NOTEBOOKS if (NOTEBOOK_DIR / f"{nb}.ipynb").exists()]


def plan(profile: str = "default", only: list[str] | None = None,
         params: dict | None = None) -> list[tuple[str, dict]]:
    """The (notebook, parameters) to run; checks every name before any kernel starts.

    Raises:
        ValueError: unknown profile, notebook, or a parameter no selected notebook declares.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {list(PROFILES)}")
    names = available()
    if only:
        chosen = [nb for nb in names if any(nb.startswith(o) for o in only)]
        unknown = [o for o in only if not any(nb.startswith(o) for nb in names)]
        if unknown:
            raise ValueError(f"unknown notebook(s) {unknown}; valid: {names}")
        names = chosen
    declared = {nb: notebook_parameters(nb) for nb in names}
    params = params or {}
    unknown = sorted(set(params) - set().union(*declared.values()))
    if unknown:
        valid = sorted(set().union(*declared.values()))
        raise ValueError(f"unknown parameter(s) {unknown}; valid: {valid}")
    out = []
    for nb in names:
        chosen = {k: v for k, v in PROFILES[profile].get(nb, {}).items() if k in declared[nb]}
        chosen.update({k: v for k, v in params.items() if k in declared[nb]})
        out.append((nb, chosen))
    return out


def check_requirements(profile: str, todo: list[tuple[str, dict]]) -> None:
    """Fail before any kernel starts when a profile's needs are missing.

    The ``paper`` profile needs a CUDA GPU and every dataset of its notebooks under
    ``data_root`` (each is opened once, so a missing file is named now, not mid-run). Model
    weights come from the hub or ``-p weights_file PATH``; hub access is found out at load time.
    """
    if profile != "paper":
        return
    import torch

    from vitplast import paper_datasets

    if not torch.cuda.is_available():
        raise RuntimeError("the paper profile measures and finetunes ViT-B/16 at 224 px: it needs "
                           "a CUDA GPU (none found). Use --profile default on a CPU.")
    for nb, params in todo:
        root = params.get("data_root")
        for task in params.get("tasks", []):
            if task in paper_datasets.PAPER_DATASETS:
                if not root or not Path(root).is_dir():
                    raise FileNotFoundError(f"{nb}: data_root {root!r} is not a folder; put the "
                                            "datasets there (layouts: vitplast.paper_datasets)")
                paper_datasets.load_paper_task(task, root, img_size=32)


def _failing_cell(path: Path) -> str:
    """The source's first line of the cell that raised, from an executed notebook."""
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                first = "".join(cell["source"]).strip().splitlines()[:1]
                return f"cell {i}: {first[0] if first else ''} -> {out.get('ename')}"
    return ""


def run(profile: str = "default", only: list[str] | None = None, params: dict | None = None,
        out_dir: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Execute the notebooks in order with papermill; return the summary table.

    Columns: ``notebook``, ``status`` (ok / failed), ``seconds``, ``error`` (the failing cell).
    A failing notebook does not stop the rest.
    """
    import papermill as pm

    todo = plan(profile, only, params)
    check_requirements(profile, todo)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out_dir) if out_dir else Path("runs") / f"{stamp}-{profile}"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for nb, nb_params in todo:
        target = out_dir / f"{nb}.ipynb"
        start = time.perf_counter()
        try:
            pm.execute_notebook(str(NOTEBOOK_DIR / f"{nb}.ipynb"), str(target),
                                parameters=nb_params, cwd=str(out_dir), progress_bar=progress,
                                kernel_name="python3")
            status, error = "ok", ""
        except Exception as err:  # papermill raises PapermillExecutionError; keep going
            status, error = "failed", _failing_cell(target) or f"{type(err).__name__}: {err}"
        rows.append(dict(notebook=nb, status=status, seconds=round(time.perf_counter() - start, 1),
                         error=error))
    summary = pd.DataFrame(rows)
    summary.to_csv(out_dir / "summary.csv", index=False)
    return summary
