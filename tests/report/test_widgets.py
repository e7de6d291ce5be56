"""Explorers driven headless: set control values, read the label, the numbers and the figure."""

import copy
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from vitplast import models
from vitplast.experiments import runs
from vitplast.experiments.store import Store
from vitplast.measure import plasticity
from vitplast.report import explorer_findings, plots, widgets


def shown(explorer, name: str) -> float:
    """The number the value label displays for ``name``."""
    return float(re.search(rf"\b{name} = (\S+)", explorer.value_label.value).group(1))


@pytest.fixture(scope="module")
def random_model():
    torch.manual_seed(0)
    return models.load_model(models.EMBEDDED_NAME, pretrained=False)


@pytest.fixture(scope="module")
def gamma(random_model):
    return widgets.gamma_explorer(random_model, task="digits", source="", n_pairs=8)


def test_gamma_slider_scales_plasticity_and_bound_and_preserves_the_function(gamma):
    at_one = dict(gamma.values)
    label = gamma.value_label.value
    assert at_one["c"] == 1.0 and at_one["diff_preserved"] == at_one["diff_raw"] == 0.0
    for c in (2.0, 0.1):
        gamma.controls["c"].value = c
        assert gamma.value_label.value != label
        assert shown(gamma, "c") == pytest.approx(c)
        assert shown(gamma, "plasticity") == pytest.approx(c * at_one["plasticity"], rel=1e-4)
        assert gamma.values["bound"] == pytest.approx(c * at_one["bound"], rel=1e-4)
        assert gamma.values["plasticity"] <= gamma.values["bound"]
        assert shown(gamma, "diff_preserved") < 1e-4
        assert gamma.values["diff_raw"] > 1e-3  # the raw rescale changes the network
        assert len(gamma.output.outputs) == 1
        assert gamma.output.outputs[0]["data"]["image/png"]
    gamma.controls["ln"].value = "LN2"
    gamma.controls["layer"].value = 5
    assert shown(gamma, "ratio") == pytest.approx(0.1, rel=1e-4)
    gamma.controls["c"].value = 1.0
    gamma.controls["ln"].value = "LN1"


def test_plasticity_explorer_shows_measured_rates_and_rerenders_from_cache(random_model):
    view = widgets.plasticity_explorer(random_model, task="digits", source="", n_pairs=12)
    assert list(view.controls) == ["checkpoint", "task", "source", "n_pairs", "embedding_scale",
                                   "protocol", "layer", "component"]
    x, y = widgets.pair_tensors("digits", "", 12)
    direct = plasticity.measure(random_model, x, y, progress=False)
    for layer, comp in ((3, "MHA"), (5, "FC2"), (0, "LN1")):
        label = view.value_label.value
        view.controls["layer"].value = layer
        view.controls["component"].value = comp
        rates = direct[(direct.layer == layer) & (direct.component == comp)].rate
        assert view.value_label.value != label
        assert shown(view, "plasticity") == pytest.approx(rates.mean(), rel=1e-5)
        assert view.values["max_rate"] <= view.values["bound"]
        assert view.output.outputs
    assert len(view.cache) == 1  # layer and component re-render without measuring
    view.controls["protocol"].value = "embedding"
    assert len(view.cache) == 2 and view.values["n"] == 12
    fig = view.figure()
    assert fig.axes[0].get_xscale() == "log"
    plt.close(fig)


def test_plasticity_explorer_pairs_and_embedding_scale_controls(random_model):
    """Objection 1 explorable: another pair source or count is another measurement; the
    embedding-scale slider measures the embedding times s, and updates on release only."""
    from vitplast.measure import gauge

    view = widgets.plasticity_explorer(random_model, task="digits", source="", n_pairs=8)
    view.controls["component"].value = "LN1"
    within = view.values["plasticity"]
    assert view.controls["n_pairs"].options == (8, 32, 64, 128, 256, 512)
    view.controls["n_pairs"].value = 32
    assert view.values["n"] == 32 and len(view.cache) == 2
    view.controls["source"].value = "fmnist"
    x, y = widgets.pair_tensors("digits", "fmnist", 32)
    direct = plasticity.measure(random_model, x, y, progress=False)
    expect = direct[(direct.layer == 0) & (direct.component == "LN1")].rate.mean()
    assert view.values["plasticity"] == pytest.approx(expect, rel=1e-5) != within
    slider = view.controls["embedding_scale"]
    assert slider.continuous_update is False
    view.controls["protocol"].value = "embedding"
    slider.value = 4.0
    scaled = gauge.scale_embedding(copy.deepcopy(random_model), 4.0)
    direct = plasticity.measure(scaled, x, y, protocol="embedding", progress=False)
    expect = direct[(direct.layer == 0) & (direct.component == "LN1")].rate.mean()
    assert view.values["plasticity"] == pytest.approx(expect, rel=1e-5)
    assert "embedding x 4" in view.figure().axes[0].get_title()
    plt.close("all")


def test_sliders_update_on_release(gamma):
    assert gamma.controls["c"].continuous_update is False


def test_explorer_legends_sit_beside_or_below_the_curves():
    fig = plots.rate_histogram(np.linspace(0.5, 2, 50), 3.0, "Prop. 1")
    box = fig.axes[0].get_legend().get_window_extent()
    assert box.x0 >= fig.axes[0].get_window_extent().x1  # right of the axes, not on the bars
    plt.close(fig)
    visited = pd.DataFrame(dict(c=[0.5, 1.0, 2.0], plasticity=[0.5, 1, 2], bound=[3, 6, 12],
                                diff_preserved=[1e-6, 0, 2e-6], diff_raw=[0.3, 0, 0.5]))
    fig = plots.layernorm_rescale(visited, 2.0)
    fig.canvas.draw()
    for ax in fig.axes:  # below the axes and their tick labels, not on the curves
        ticks = min(t.get_window_extent().y0 for t in ax.get_xticklabels() if t.get_text())
        assert ax.get_legend().get_window_extent().y1 <= ticks
    plt.close(fig)


def test_notebook_06_findings_from_the_explorers(random_model, gamma):
    view = widgets.plasticity_explorer(random_model, task="digits", source="", n_pairs=8)
    bounds = widgets.bound_table(view)
    assert len(bounds) == 30 and (bounds["max_rate"] <= bounds["bound"]).all()
    scales = widgets.gamma_table(gamma, cs=(0.5, 4.0))
    assert scales["ratio"].tolist() == pytest.approx([0.5, 4.0], rel=1e-4)
    table = explorer_findings.explorer(bounds, scales)
    assert table.loc[0, "measured"] == "30/30"
    assert table.loc[0, "verdict"] == "same as the paper (exact check)"  # Props. 1-3: claims
    # the gamma rescale is objection 3's check, which the paper never makes: a result
    assert table["verdict"].iloc[[2, 3]].tolist() == ["holds (exact check)"] * 2
    assert table["paper"].iloc[[2, 3]].str.startswith("not in the paper").all()
    assert len(explorer_findings.explorer(gamma=scales)) == 2
    assert len(explorer_findings.explorer(bounds)) == 2


def _record(lr, seed, test_acc, val_acc=0.6):
    history = [dict(step=s, loss=2.3 - 0.1 * s, lr=lr, grad_norm=1.0 / (s + 1),
                    **{"grad_norm/FC1": 0.5, "grad_norm_per_param/FC1": 0.01})
               for s in range(4)]
    history[-1].update(val_loss=1.9, val_acc=val_acc)
    return dict(status="ok", error=None, traceback=None, test_acc=test_acc, test_loss=1.2,
                best_val_acc=val_acc, best_step=3, trainable=1234, train_seconds=1.0,
                history=history, seconds=1.5, device="cpu")


def test_results_browser_on_a_tiny_store(tmp_path):
    for lr, seed, acc in ((0.01, 0, 0.51), (0.01, 1, 0.53), (0.1, 0, 0.42)):
        Store(tmp_path).save(runs.make_run("digits", "FC1", lr=lr, seed=seed),
                             _record(lr, seed, acc))
    browser = widgets.results_browser(tmp_path)
    assert browser.controls["lr"].options == (("0.01", 0.01), ("0.1", 0.1))
    assert shown(browser, "test_acc") == pytest.approx(0.51)
    assert len(browser.output.outputs) == 1
    browser.controls["seed"].value = 1
    assert browser.values["test_acc"] == pytest.approx(0.53)
    browser.controls["lr"].value = 0.1  # no run with lr 0.1 and seed 1: a message
    assert "No run for" in browser.value_label.value and not browser.output.outputs
    browser.controls["seed"].value = 0
    assert browser.values["test_acc"] == pytest.approx(0.42) and browser.output.outputs
    fig = browser.figure()
    assert [ax.get_ylabel() for ax in fig.axes] == list(plots.RUN_CURVES.values())
    assert np.isfinite(fig.axes[0].lines[0].get_ydata()).all()
    plt.close(fig)
    # the run shown, read from its history: grad norms 1, 1/2, 1/3, 1/4 (one at its clip), one
    # evaluation (the best is the last)
    run = widgets.run_table(browser)
    assert set(run["run"]) == {runs.run_hash(runs.make_run("digits", "FC1", lr=0.1, seed=0))}
    rows = explorer_findings.explorer(run=run).set_index("claim")
    clip = rows.filter(like="at or above its clip (1)", axis=0).iloc[0]  # the run's own clip
    assert clip["measured"] == 0.25 and clip["verdict"] == "clipping scaled some updates"
    unclipped = explorer_findings.explorer(run=run.assign(clip_grad_norm=None))
    assert unclipped["verdict"].iloc[-1] == "its recipe does not clip"
    best = rows.filter(like="best validation accuracy", axis=0).iloc[0]
    assert best["measured"] == "3 / 3" and best["verdict"].startswith("best at the last")


def test_results_browser_keeps_budget_runs_apart(tmp_path):
    """The same (task, config, lr, seed) at two step budgets: two runs, chosen by ``steps``,
    never averaged."""
    Store(tmp_path).save(runs.make_run("digits", "FC1", lr=0.01, seed=0, steps=120),
                         _record(0.01, 0, 0.50))
    Store(tmp_path).save(runs.make_run("digits", "FC1", lr=0.01, seed=0, steps=480),
                         _record(0.01, 0, 0.60))
    browser = widgets.results_browser(tmp_path)
    assert browser.controls["steps"].options == (120, 480)
    assert browser.values["runs"] == 1
    for steps, acc in ((120, 0.50), (480, 0.60)):
        browser.controls["steps"].value = steps
        assert browser.values["test_acc"] == pytest.approx(acc) and browser.values["runs"] == 1
        assert f"{steps} steps" in browser.figure().texts[0].get_text()
    plt.close("all")


def test_results_browser_opens_on_the_best_run_on_validation(tmp_path):
    """The first option of every control (lr 0.01, seed 0) has no run: the browser opens on
    the run with the best validation accuracy (here the last in order), not a message."""
    for lr, seed, acc, val in ((0.01, 1, 0.53, 0.5), (0.1, 0, 0.42, 0.7)):
        Store(tmp_path).save(runs.make_run("digits", "FC1", lr=lr, seed=seed),
                             _record(lr, seed, acc, val))
    browser = widgets.results_browser(tmp_path)
    assert browser.state() == dict(task="digits", config="FC1", lr=0.1, seed=0,
                                   steps=runs.make_run("digits", "FC1", lr=0.1)["steps"])
    assert browser.values["test_acc"] == pytest.approx(0.42) and browser.output.outputs


@pytest.mark.parametrize("folder", ["empty", "missing"])
def test_results_browser_without_results_shows_a_message(tmp_path, folder):
    root = tmp_path / folder
    if folder == "empty":
        root.mkdir()
    browser = widgets.results_browser(root)
    assert "No finetuning results" in browser.value_label.value
    assert browser.controls == {} and not browser.output.outputs
    plt.close(browser.figure())
    assert explorer_findings.explorer(run=widgets.run_table(browser))["verdict"].tolist() == [
        "nothing to read"]
