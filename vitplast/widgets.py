"""Explorers: ipywidgets over plasticity, its bounds, LayerNorm rescaling and finetuning runs.

Paper: Definition 1 (plasticity), Props. 1-3 (bounds), objections 3-4 (LayerNorm rescaling),
Takeaway 3 (finetuning results).

Each explorer is an ``Explorer`` (a VBox, see its docstring) that caches its forward passes:
changing a layer, a component or a run only redraws. Image pairs are cached per (task,
source, n_pairs) for the session.

Used by notebook 06.
"""

from __future__ import annotations

import base64
import copy
import functools
import io
from pathlib import Path

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import NullFormatter

from vitplast import ablations, bounds, data, empirical, models, plasticity, results
from vitplast.components import COMPONENTS

#: Component -> the proposition bounding it.
PROPOSITION = {"LN1": "Prop. 1", "LN2": "Prop. 1", "MHA": "Prop. 3", "FC1": "Prop. 2",
               "FC2": "Prop. 2"}
_CURVES = ("loss", "val_acc", "grad_norm")


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
        if fig is None:
            fig, ax = plt.subplots(figsize=(7, 0.5))
            ax.axis("off")
            ax.text(0, 0.5, self.value_label.value, va="center", fontsize=9)
        return fig


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


def _load(model, checkpoint: str | None):
    if model is not None:
        return model
    checkpoint = checkpoint or (available_checkpoints() or ["random"])[-1]
    return models.load_model(pretrained=checkpoint != "random", checkpoint=checkpoint)


@functools.lru_cache(maxsize=32)
def pair_tensors(task: str, source: str = "fmnist", n_pairs: int = 128):
    """Aligned images (x, y) of ``empirical.task_pairs`` (the paper's pairs, or pairs within
    ``task`` when ``source`` is empty or the task itself). Tasks are drawn small (16 train,
    ``n_pairs`` test images) so switching is fast, and cached for the session.

    Paper: Definition 1 (the pairs of the expectation). Used by notebook 06.
    """
    return empirical.task_pairs(task, source, n_pairs=n_pairs, train_size=16,
                                test_size=n_pairs).tensors()


def _measured(model, x, y, **kwargs) -> tuple:
    """One pass over the pairs (x, y) (``plasticity.measurement``): the per-pair rates, and
    ``{(layer, component): bound}``, the valid bounds (Props. 1-3) of ``bounds.model_bounds``
    for the statistics of those pairs."""
    m = plasticity.measurement(model, x, y, progress=False, **kwargs)
    return m.rates, {(int(r.layer), str(r.component)): r.bound
                     for r in bounds.model_bounds(model, m.statistics).itertuples()}


def plasticity_explorer(model=None, *, checkpoint: str | None = None, task: str = "digits",
                        source: str = "fmnist", n_pairs: int = 128, batch_size: int = 64
                        ) -> Explorer:
    """Per-pair rates of one component (histogram), its plasticity (their mean), its bound.

    Controls ``checkpoint``, ``task``, ``protocol``, ``layer``, ``component``. A new
    (checkpoint, task, protocol, n_pairs) measures every component once (one
    ``plasticity.measurement`` pass and ``bounds.model_bounds``, cached); layer and component
    redraw from the cache. ``values``: plasticity, bound, bound_over_plasticity, max_rate, n
    (pairs kept).

    Args:
        model: explore this ViT (checkpoint "given") instead of the embedded checkpoints.
        checkpoint: the first checkpoint shown (default the last shipped; "random" if none).
        task, source, n_pairs: the pairs (``pair_tensors``); ``task`` is the first shown.

    Paper: Definition 1, Props. 1-3. Used by notebook 06.
    """
    ckpts = ["given"] if model is not None else available_checkpoints() or ["random"]
    cache, loaded = {}, {}

    def compute(checkpoint, task, protocol):
        key = (checkpoint, task, protocol, n_pairs)
        if key not in cache:
            if checkpoint not in loaded:
                loaded[checkpoint] = _load(model, checkpoint)
            m, (x, y) = loaded[checkpoint], pair_tensors(task, source, n_pairs)
            cache[key] = _measured(m, x, y, protocol=protocol, batch_size=batch_size)
        return cache[key]

    def draw(checkpoint, task, protocol, layer, component):
        df, bound = compute(checkpoint, task, protocol)
        r = df.loc[(df["layer"] == layer) & (df["component"] == component), "rate"].to_numpy()
        p, b = float(r.mean()), float(bound[(layer, component)])
        values = dict(plasticity=p, bound=b, bound_over_plasticity=b / p,
                      max_rate=float(r.max()), n=len(r))
        fig, ax = plt.subplots(figsize=(6.5, 3))
        lo = r[r > 0].min() if (r > 0).any() else 1e-6
        ax.hist(r, bins=np.geomspace(lo, max(r.max(), b) * 1.05, 50), color="C0", alpha=0.8)
        ax.axvline(p, color="k", label=f"plasticity {p:.3g}")
        ax.axvline(b, color="C3", ls="--", label=f"bound ({PROPOSITION[component]}) {b:.3g}")
        ax.set(xscale="log", xlabel="rate ||f(x)-f(y)|| / ||x-y||", ylabel="pairs",
               title=f"{component}, layer {layer} · {checkpoint} · {task} · {protocol}")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
        fig.tight_layout()
        return values, _fmt(values), fig

    depth = len(model.blocks) if model is not None else models.EMBEDDED_ARCH["depth"]
    controls = dict(checkpoint=_dropdown("checkpoint", ckpts, checkpoint or ckpts[-1]),
                    task=_dropdown("task", list(data.EMBEDDED_TASKS), task),
                    protocol=_dropdown("protocol", list(plasticity.PROTOCOLS)),
                    layer=_dropdown("layer", list(range(depth))),
                    component=_dropdown("component", list(COMPONENTS)))
    return Explorer(controls, draw, compute, cache)


def gamma_explorer(model=None, *, checkpoint: str | None = None, task: str = "digits",
                   source: str = "fmnist", n_pairs: int = 32) -> Explorer:
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

    Paper: Prop. 1, objections 3-4 (plasticity vs parameter scale). Used by notebook 06.
    """
    base = _load(model, checkpoint)
    x, y = pair_tensors(task, source, n_pairs)
    images = torch.cat([x, y]).to(next(base.parameters()).device)
    cache: dict = {}

    logits = torch.no_grad()(lambda m: m(images))
    reference = logits(base)

    def compute(ln, c):
        key = (ln, float(c))
        if key not in cache:
            kept = ablations.rescale_layernorm(copy.deepcopy(base), ln, c, preserve=True)
            raw = ablations.rescale_layernorm(copy.deepcopy(base), ln, c, preserve=False)
            rates, bound = _measured(kept, x, y)
            cache[key] = dict(
                plasticity=rates[rates["component"] == ln].groupby("layer")["rate"].mean()
                .to_dict(),
                bound={k[0]: b for k, b in bound.items() if k[1] == ln},
                diff_preserved=(logits(kept) - reference).abs().max().item(),
                diff_raw=(logits(raw) - reference).abs().max().item())
        return cache[key]

    def draw(ln, layer, c):
        now, one = compute(ln, c), compute(ln, 1.0)
        p, b = now["plasticity"][layer], now["bound"][layer]
        values = dict(c=float(c), plasticity=p, bound=b, ratio=p / one["plasticity"][layer],
                      diff_preserved=now["diff_preserved"], diff_raw=now["diff_raw"])
        seen = sorted(k[1] for k in cache if k[0] == ln)
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
        grid = np.geomspace(0.1, 10, 50)
        left.plot(grid, grid * one["plasticity"][layer], "C0-", lw=0.8, label="c P(1)")
        left.plot(grid, grid * one["bound"][layer], "C3--", lw=0.8, label="c bound(1)")
        for name, fmt in (("plasticity", "C0o"), ("bound", "C3v")):
            left.plot(seen, [cache[(ln, s)][name][layer] for s in seen], fmt, ms=4, label=name)
        left.plot([c], [p], "ko", ms=7, label=f"c = {c:.3g}")
        for name, fmt in (("diff_preserved", "C2o-"), ("diff_raw", "C1s-")):
            right.plot(seen, [max(cache[(ln, s)][name], 1e-12) for s in seen], fmt, label=name)
        left.set(title=f"{ln}, layer {layer}: plasticity and Prop. 1 bound", yscale="log")
        right.set(title="max |logit difference| from the original (0 at 1e-12)", yscale="log")
        for ax in (left, right):
            ax.set(xscale="log", xlabel="c", xlim=(0.09, 11))
            ax.legend(fontsize=7)
        fig.tight_layout()
        return values, _fmt(values), fig

    controls = dict(ln=_dropdown("LayerNorm", list(ablations.NEXT_LINEAR)),
                    layer=_dropdown("layer", list(range(len(base.blocks)))),
                    c=widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.05,
                                             description="c", readout_format=".3g"))
    return Explorer(controls, draw, compute, cache)


def results_browser(root: str | Path | None = None) -> Explorer:
    """Curves (loss, val_acc, grad norms) and test accuracy of stored finetuning runs.

    Controls ``task``, ``config``, ``lr``, ``seed`` over ``results.results(root)``; curves from
    ``results.history(root)``; both read once. An empty or missing store shows a message.
    ``values``: test_acc, best_val_acc (means over the matching runs), runs, status.

    Args:
        root: a results store (default ``studies.MAIN_RESULTS``).

    Paper: Takeaway 3, Fig. 4 (training dynamics). Used by notebook 06.
    """
    if root is None:
        from vitplast.studies import MAIN_RESULTS as root
    runs = results.results(root) if Path(root).is_dir() else None
    if runs is None or runs.empty:
        message = f"No finetuning results under {root}: run notebook 04 (or a sweep) to fill it."
        return Explorer({}, lambda: ({}, message, None))
    curves = results.history(root)

    def draw(task, config, lr, seed):
        sel = runs[(runs["task"] == task) & (runs["config"] == config) & (runs["lr"] == lr)
                   & (runs["seed"] == seed)]
        if sel.empty:
            return {}, f"No run for task={task}, config={config}, lr={lr:g}, seed={seed}.", None
        values = dict(test_acc=float(sel["test_acc"].mean()),
                      best_val_acc=float(sel["best_val_acc"].mean()), runs=len(sel),
                      status=", ".join(sel["status"].astype(str)))
        fig, axes = plt.subplots(1, 3, figsize=(11, 3))
        for run in sel["run"]:
            h = curves[curves["run"] == run].dropna(subset=["value"])
            for ax, metric in zip(axes, _CURVES):
                part = h[h["metric"] == metric]
                ax.plot(part["step"], part["value"], marker=".", label=run[:8])
            for metric in sorted(m for m in set(h["metric"]) if m.startswith("grad_norm/")):
                part = h[h["metric"] == metric]
                axes[2].plot(part["step"], part["value"], lw=0.8, label=metric[10:])
        for ax, metric in zip(axes, _CURVES):
            ax.set(xlabel="step", title=metric, yscale="log" if metric == "grad_norm" else "linear")
        axes[2].legend(fontsize=6)
        fig.suptitle(f"{task} · {config} · lr {lr:g} · seed {seed} · test acc "
                     f"{values['test_acc']:.4f}", fontsize=9)
        fig.tight_layout()
        return values, _fmt(values), fig

    controls = {k: _dropdown(k, sorted(runs[k].dropna().unique().tolist()))
                for k in ("task", "config", "lr", "seed")}
    controls["lr"].options = [(f"{v:g}", v) for v in controls["lr"].options]
    return Explorer(controls, draw, compute=lambda: (runs, curves))


def what_this_shows(view: Explorer, gamma: Explorer, cs=(0.1, 0.5, 2.0, 10.0),
                    browser: Explorer | None = None) -> str:
    """Facts computed from the explorers' current views, one per line.

    Paper: Props. 1-3, objections 3-4, Takeaway 3. Used by notebook 06.
    """
    s, g = view.state(), gamma.state()
    df, bound = view.compute(s["checkpoint"], s["task"], s["protocol"])
    per = df.groupby(["layer", "component"], observed=True)["rate"].agg(["mean", "max"])
    held = sum(per.loc[k, "max"] <= b for k, b in bound.items())
    tightness = np.median([b / per.loc[k, "mean"] for k, b in bound.items()])
    lines = [f"[{s['checkpoint']}, {s['task']}, {s['protocol']}] {s['component']} layer "
             f"{s['layer']}: {_fmt(view.values)}",
             f"Props. 1-3 bound the largest rate in {held}/{len(bound)} (layer, component) of "
             f"this view; median bound / plasticity {tightness:.3g}."]
    one = gamma.compute(g["ln"], 1.0)["plasticity"][g["layer"]]
    for c in cs:
        r = gamma.compute(g["ln"], c)
        lines.append(f"{g['ln']} times c = {c:g}: plasticity ratio "
                     f"{r['plasticity'][g['layer']] / one:.6g} (layer {g['layer']}), max |logit "
                     f"diff| preserved {r['diff_preserved']:.2g}, raw {r['diff_raw']:.3g}.")
    if browser is not None:
        lines.append(f"Results browser: {_fmt(browser.values) or browser.value_label.value}")
    return "\n".join(lines)
