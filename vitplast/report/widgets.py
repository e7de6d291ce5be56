"""Explorers: ipywidgets over plasticity, its bounds, LayerNorm rescaling and finetuning runs.

Paper: Definition 1 (plasticity), Props. 1-3 (bounds), objections 3-4 (LayerNorm rescaling),
Takeaway 3 (finetuning results).

Each explorer is an ``Explorer`` (a VBox, see its docstring) that caches its forward passes:
changing a layer, a component or a run only redraws. Image pairs are cached per (task,
source, n_pairs) for the session. The figures are drawn by ``vitplast.report.plots``
(``rate_histogram``, ``layernorm_rescale``, ``run_curves``); ``bound_table`` and
``gamma_table`` turn the explorers' views into the tables of notebook 06's findings.
"""

from __future__ import annotations

import base64
import copy
import functools
import io
from pathlib import Path

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pandas as pd
import torch

from vitplast import models
from vitplast.datasets import data
from vitplast.experiments import results, studies
from vitplast.measure import empirical, gauge, pairs
from vitplast.measure.components import COMPONENTS
from vitplast.paper import PROPOSITIONS
from vitplast.report import explored, plots
from vitplast.train import ablations


class Explorer(widgets.VBox):
    """``controls`` (name -> widget), ``value_label`` (the numbers shown as text, CSS class
    ``vitplast-value``), ``values`` (the same numbers), ``output`` (the figure as PNG display
    data: it renders with or without a kernel), redrawn by ``draw(**control values) ->
    (values, text, Figure or None)`` on every change; ``compute`` fills ``cache``.
    """

    def __init__(self, controls: dict, draw, compute=None, cache: dict | None = None):
        super().__init__()
        self.controls, self._draw, self.compute = controls, draw, compute
        self.cache = {} if cache is None else cache
        self.value_label = widgets.HTML().add_class("vitplast-value")
        self.output, self.values = widgets.Output(), {}
        row = widgets.HBox(list(controls.values()), layout=dict(flex_flow="row wrap"))
        self.children = [row, self.value_label, self.output]
        for control in controls.values():
            control.observe(lambda change: self.update(), names="value")
        self.update()

    def state(self) -> dict:
        """The controls' current values."""
        return {name: c.value for name, c in self.controls.items()}

    def update(self) -> None:
        """Redraw the label and the figure from the controls."""
        try:
            self.values, text, fig = self._draw(**self.state())
        except Exception as err:  # shown in the widget, and raised for the log and tests
            self.value_label.value = f"<b>error</b>: {type(err).__name__}: {err}"
            raise
        self.value_label.value = text
        self.output.outputs = () if fig is None else (_png(fig),)

    def figure(self):
        """The current view as a matplotlib Figure (the message when there is no plot)."""
        fig = self._draw(**self.state())[2]
        return plots.message(self.value_label.value) if fig is None else fig


def _png(fig) -> dict:
    """A Figure as display data for ``Output.outputs``; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return {"output_type": "display_data", "metadata": {}, "data": {
        "image/png": base64.b64encode(buf.getvalue()).decode(), "text/plain": "<Figure>"}}


def _fmt(values: dict) -> str:
    return " · ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v}"
                      for k, v in values.items())


def _dropdown(name: str, options, value=None) -> widgets.Dropdown:
    kw = {} if value is None else dict(value=value)
    return widgets.Dropdown(options=options, description=name, layout=dict(width="auto"),
                            style=dict(description_width="initial"), **kw)


def available_checkpoints() -> list[str]:
    """The embedded checkpoints shipped now (in the manifest, file present), in order."""
    try:
        shipped = models.embedded_checkpoints()
    except FileNotFoundError:
        return []
    return [c for c, entry in shipped.items() if (models.DATA_DIR / entry["file"]).exists()]


def _checkpoint(checkpoint: str | None) -> str:
    """``checkpoint``, else the last one on disk ("random" where none is)."""
    return checkpoint or (available_checkpoints() or ["random"])[-1]


def _load(model, checkpoint: str | None):
    if model is not None:
        return model
    checkpoint = _checkpoint(checkpoint)
    return models.load_model(pretrained=checkpoint != "random", checkpoint=checkpoint)


@functools.lru_cache(maxsize=32)
def pair_tensors(task: str, source: str = empirical.SOURCE, n_pairs: int = 128):
    """Aligned images (x, y) of ``empirical.task_pairs`` (the paper's pairs, or pairs within
    ``task`` when ``source`` is empty or the task itself). Tasks are drawn small (16 train,
    ``n_pairs`` test images) so switching is fast, and cached for the session.

    Paper: Definition 1 (the pairs of the expectation).
    """
    return empirical.task_pairs(task, source, n_pairs=n_pairs, train_size=16,
                                test_size=n_pairs).tensors()


#: Pair sources offered by the plasticity explorer: label -> ``source`` of ``pair_tensors``.
SOURCES = {"Fashion-MNIST x, task y (the paper's pairing)": empirical.SOURCE,
           "both images from the task": ""}
#: Numbers of pairs offered by the plasticity explorer.
N_PAIRS = (32, 64, 128, 256, 512)


def _scale_slider(name: str, value: float = 1.0, lo: int = -1, hi: int = 1):
    """A log slider (10^lo to 10^hi) that updates on release, not while dragged: each value
    may cost a forward pass."""
    return widgets.FloatLogSlider(value=value, base=10, min=lo, max=hi, step=0.05,
                                  description=name, readout_format=".3g",
                                  continuous_update=False,
                                  style=dict(description_width="initial"))


def plasticity_explorer(model=None, *, checkpoint: str | None = None, task: str = "digits",
                        source: str = empirical.SOURCE, n_pairs: int = 128, batch_size: int = 64,
                        root=None) -> Explorer:
    """Per-pair rates of one component (histogram), its plasticity (their mean), its bound.

    Controls ``checkpoint``, ``task``, ``source`` (the paper's pairing or pairs within the
    task: objection 1), ``n_pairs``, ``embedding_scale`` (the embedding alone times s,
    ``gauge.scale_embedding``: what the ``embedding`` protocol sees of a larger residual
    stream; under ``hidden`` it changes the network), ``protocol``, ``layer``, ``component``.
    A new (checkpoint, task, source, n_pairs, embedding_scale, protocol) measures every
    component once (one ``plasticity.measurement`` pass and ``bounds.model_bounds``, cached);
    layer and component redraw from the cache. ``values``: plasticity, bound,
    bound_over_plasticity, max_rate, n (pairs kept).

    Args:
        model: explore this ViT (checkpoint "given") instead of the embedded checkpoints.
        checkpoint: the first checkpoint shown (default the last shipped; "random" if none).
        task, source, n_pairs: the first pairs shown (``pair_tensors``).
        root: a study's folder where the measurements of embedded checkpoints are kept
            (``explored.measured``): read there when kept, else measured and kept.

    Paper: Definition 1, Props. 1-3, objection 1.
    """
    ckpts = ["given"] if model is not None else available_checkpoints() or ["random"]
    cache, loaded = {}, {}

    def compute(checkpoint, task, protocol, source=source, n_pairs=n_pairs, embedding_scale=1.0):
        key = (checkpoint, task, protocol, source, n_pairs, float(embedding_scale))
        def get():
            if (checkpoint, embedding_scale) not in loaded:
                m = _load(model, checkpoint)
                if embedding_scale != 1.0:
                    m = gauge.scale_embedding(copy.deepcopy(m), float(embedding_scale))
                loaded[(checkpoint, embedding_scale)] = m
            return loaded[(checkpoint, embedding_scale)], *pair_tensors(task, source, n_pairs)

        if key not in cache:
            kept = explored.kept_key(model, checkpoint, task=task, source=source, n_pairs=n_pairs,
                             embedding_scale=float(embedding_scale))
            cache[key] = explored.measured(get, key=kept, root=root, protocol=protocol,
                                           batch_size=batch_size)
        return cache[key]

    def draw(checkpoint, task, source, n_pairs, embedding_scale, protocol, layer, component):
        df, bound = compute(checkpoint, task, protocol, source, n_pairs, embedding_scale)
        r = df.loc[(df["layer"] == layer) & (df["component"] == component), "rate"].to_numpy()
        p, b = float(r.mean()), float(bound[(layer, component)])
        values = dict(plasticity=p, bound=b, bound_over_plasticity=b / p,
                      max_rate=float(r.max()), n=len(r))
        pairs = f"{source} x {task}" if source else f"pairs within {task}"
        scaled = f" · embedding x {embedding_scale:.3g}" if embedding_scale != 1.0 else ""
        fig = plots.rate_histogram(r, b, PROPOSITIONS[component], title=f"{component}, layer "
                                   f"{layer} · {checkpoint} · {pairs} · {protocol}{scaled}",
                                   component=component)
        return values, _fmt(values), fig

    depth = len(model.blocks) if model is not None else models.EMBEDDED_ARCH["depth"]
    sources = dict(SOURCES) if source in SOURCES.values() else {**SOURCES, source: source}
    counts = sorted({*N_PAIRS, n_pairs})
    controls = dict(checkpoint=_dropdown("checkpoint", ckpts, checkpoint or ckpts[-1]),
                    task=_dropdown("task", list(data.EMBEDDED_TASKS), task),
                    source=_dropdown("pairs", list(sources.items()), source),
                    n_pairs=_dropdown("n_pairs", counts, n_pairs),
                    embedding_scale=_scale_slider("embedding scale s", 1.0, -1, 1),
                    protocol=_dropdown("protocol", list(pairs.PROTOCOLS)),
                    layer=_dropdown("layer", list(range(depth))),
                    component=_dropdown("component", list(COMPONENTS)))
    return Explorer(controls, draw, compute, cache)


def gamma_explorer(model=None, *, checkpoint: str | None = None, task: str = "digits",
                   source: str = empirical.SOURCE, n_pairs: int = 32, root=None) -> Explorer:
    """A LayerNorm's gamma and beta times c, in every block (``ablations.rescale_layernorm``).

    Controls ``ln`` (LN1 / LN2), ``layer``, ``c`` (log slider, 0.1 to 10). For the layer's LN,
    on fixed pairs under the ``hidden`` protocol: its plasticity and Prop. 1 bound after the
    function-preserving rescale (both times c, its input being unchanged), and the max |logit
    difference| from the original model of that variant (~0) and of the raw one (grows with
    |log c|). Each (ln, c) is computed once, on fresh copies of the model. ``values``: c,
    plasticity, bound, ratio (plasticity / plasticity at c = 1), diff_preserved, diff_raw.

    Args:
        model: rescale copies of this ViT instead of an embedded checkpoint.
        checkpoint: embedded checkpoint (default the last shipped; "random" if none).
        task, source, n_pairs: the pairs (``pair_tensors``).
        root: a study's folder where the measurements of an embedded checkpoint are kept
            (``explored.rescaled``): read there when kept, else measured and kept.

    Paper: Prop. 1, objections 3-4 (plasticity vs parameter scale).
    """
    base = _load(model, checkpoint)
    cache: dict = {}
    kept_key = explored.kept_key(model, _checkpoint(checkpoint), task=task, source=source,
                                 n_pairs=n_pairs)

    @functools.cache
    def get():  # the pairs and the original logits, made at the first measurement
        x, y = pair_tensors(task, source, n_pairs)
        images = torch.cat([x, y]).to(next(base.parameters()).device)
        logits = torch.no_grad()(lambda m: m(images))
        return base, x, y, logits, logits(base)

    def compute(ln, c):
        key = (ln, float(c))
        if key not in cache:
            cache[key] = explored.rescaled(get, ln, c, key=kept_key, root=root)
        return cache[key]

    def draw(ln, layer, c):
        now, one = compute(ln, c), compute(ln, 1.0)
        p, b = now["plasticity"][layer], now["bound"][layer]
        values = dict(c=float(c), plasticity=p, bound=b, ratio=p / one["plasticity"][layer],
                      diff_preserved=now["diff_preserved"], diff_raw=now["diff_raw"])
        seen = sorted(k[1] for k in cache if k[0] == ln)
        visited = pd.DataFrame([dict(c=s, plasticity=cache[(ln, s)]["plasticity"][layer],
                                     bound=cache[(ln, s)]["bound"][layer],
                                     diff_preserved=cache[(ln, s)]["diff_preserved"],
                                     diff_raw=cache[(ln, s)]["diff_raw"]) for s in seen])
        fig = plots.layernorm_rescale(visited, c, title=f"{ln}, layer {layer}: plasticity and "
                                      "Prop. 1 bound")
        return values, _fmt(values), fig

    controls = dict(ln=_dropdown("LayerNorm", list(ablations.RESCALABLE)),
                    layer=_dropdown("layer", list(range(len(base.blocks)))),
                    c=_scale_slider("c"))
    return Explorer(controls, draw, compute, cache)


def results_browser(root: str | Path | None = None) -> Explorer:
    """Curves (loss, val_acc, grad norms) and test accuracy of stored finetuning runs.

    Controls ``task``, ``config``, ``lr``, ``seed`` and ``steps`` (the step budget: a budget
    check's longer runs are other runs, never averaged with the main ones) over
    ``results.records_table(root)``; curves from ``results.history(root)``; both read once. An empty
    or missing store shows a message. ``values``: test_acc, best_val_acc (means over the
    matching runs: one run unless the store holds repeats), runs, status.

    Args:
        root: a results store (default the main study's, ``studies.get("main").root()``).

    Paper: Takeaway 3, Fig. 4 (training dynamics).
    """
    if root is None:
        root = studies.get("main").root()
    runs = results.records_table(root) if Path(root).is_dir() else None
    if runs is None or runs.empty:
        message = f"No finetuning results under {root}: run notebook 04 (or a sweep) to fill it."
        return Explorer({}, lambda: ({}, message, None))
    curves = results.history(root)

    keys = _browser_keys(runs)

    def draw(**chosen):
        sel = runs
        for k, v in chosen.items():
            sel = sel[sel[k] == v]
        task, config, lr, seed = (chosen[k] for k in ("task", "config", "lr", "seed"))
        budget = f" · {chosen['steps']} steps" if "steps" in chosen else ""
        if sel.empty:
            return {}, "No run for " + ", ".join(f"{k}={v:g}" if isinstance(v, float) else
                                                 f"{k}={v}" for k, v in chosen.items()) + ".", None
        values = dict(test_acc=float(sel["test_acc"].mean()),
                      best_val_acc=float(sel["best_val_acc"].mean()), runs=len(sel),
                      status=", ".join(sel["status"].astype(str)))
        fig = plots.run_curves(curves[curves["run"].isin(sel["run"])],
                               title=f"{task} · {config} · lr {lr:g} · seed {seed}{budget} · "
                                     f"test accuracy {100 * values['test_acc']:.2f}%")
        return values, _fmt(values), fig

    first = opening_run(runs)
    controls = {k: _dropdown(k, sorted(runs[k].dropna().unique().tolist()), first[k])
                for k in keys}
    controls["lr"].options = [(f"{v:g}", v) for v in controls["lr"].options]
    controls["lr"].value = first["lr"]
    return Explorer(controls, draw, compute=lambda: (runs, curves))


def _browser_keys(runs: pd.DataFrame) -> list[str]:
    """The results browser's controls: task, config, lr, seed, and steps where the store has
    it (runs of one key at two step budgets are different runs)."""
    return ["task", "config", "lr", "seed"] + (["steps"] if "steps" in runs else [])


def opening_run(runs: pd.DataFrame) -> dict:
    """The (task, config, lr, seed, steps) the results browser opens on, so that the first view
    always shows a run: among the finished runs (status ok, if any), the best on validation
    accuracy (ties: the first in sorted order; the fewest steps first)."""
    ok = runs[runs["status"] == "ok"] if (runs["status"] == "ok").any() else runs
    keys = _browser_keys(runs)
    ok = ok.dropna(subset=keys).sort_values(keys)
    first = ok.loc[ok["best_val_acc"].fillna(-1).idxmax()] if "best_val_acc" in ok else ok.iloc[0]
    return {k: getattr(first[k], "item", lambda v=first[k]: v)() for k in keys}


def bound_table(view: Explorer) -> pd.DataFrame:
    """The plasticity explorer's current (checkpoint, task, protocol) as a table: per layer and
    component, ``plasticity`` (mean rate), ``max_rate`` and ``bound`` (Props. 1-3), from its
    cache."""
    s = view.state()
    df, bound = view.compute(s["checkpoint"], s["task"], s["protocol"], s["source"],
                             s["n_pairs"], s["embedding_scale"])
    per = (df.groupby(["layer", "component"], observed=True)["rate"]
           .agg(plasticity="mean", max_rate="max").reset_index())
    per["bound"] = [bound[(int(r.layer), str(r.component))] for r in per.itertuples()]
    return per


def gamma_table(gamma: Explorer, cs=(0.1, 0.5, 2.0, 10.0)) -> pd.DataFrame:
    """The LayerNorm explorer at each scale of ``cs`` (its current LayerNorm and layer): ``c``,
    ``ratio`` (plasticity / plasticity at c = 1), ``bound_ratio``, ``diff_preserved``,
    ``diff_raw``."""
    s = gamma.state()
    layer, one = s["layer"], gamma.compute(s["ln"], 1.0)
    rows = []
    for c in cs:
        r = gamma.compute(s["ln"], c)
        rows.append(dict(c=float(c), ratio=r["plasticity"][layer] / one["plasticity"][layer],
                         bound_ratio=r["bound"][layer] / one["bound"][layer],
                         diff_preserved=r["diff_preserved"], diff_raw=r["diff_raw"]))
    return pd.DataFrame(rows)


def run_table(browser: Explorer) -> pd.DataFrame:
    """The results browser's current run(s) as a table: ``results.history`` rows (``run``,
    ``step``, ``metric``, ``value``) of the runs its controls select, with each run's
    ``clip_grad_norm`` (its recipe's clip; empty for an empty store).
    """
    if browser.compute is None:
        return pd.DataFrame(columns=["run", "step", "metric", "value", "clip_grad_norm"])
    runs, curves = browser.compute()
    sel = runs
    for k, v in browser.state().items():
        sel = sel[sel[k] == v]
    return curves[curves["run"].isin(sel["run"])].merge(
        sel[["run", "clip_grad_norm"]], on="run", how="left").reset_index(drop=True)
