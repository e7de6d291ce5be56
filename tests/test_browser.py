"""In a real browser (headless Chromium): notebook 06 in JupyterLab, run all, move the slider;
the reading copy of an executed run (``vitplast notebooks html``), opened from its files; and
notebook 01's page of a reading copy, offline, its math typeset by the site's own MathJax.

Needs Debian's ``chromium`` (``apt-get install -y chromium chromium-driver``) and the
``playwright`` wheel (``pip install playwright``: its bundled driver, never ``playwright
install``). Skipped only when chromium is missing. ``make browser-test`` installs both.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import TINY_COURSE, tiny_course

from vitplast.course import notebooks, reading_copy

CHROMIUM = shutil.which("chromium")
REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                 "(apt-get install -y chromium chromium-driver)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on a free local port, no token, serving a copy of notebook 06 with small
    parameters; yields its URL and always stops the server (and its kernels)."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(notebooks.NOTEBOOK_DIR / "06_explorer.ipynb"))
    nb = parameterize_notebook(nb, dict(n_pairs=16))
    nbformat.write(nb, tmp_path / "06_explorer.ipynb")
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news pop-up over the notebook
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", "--IdentityProvider.token=", "--allow-root",
         f"--ServerApp.root_dir={tmp_path}", "--ServerApp.open_browser=False"],
        env=env, cwd=tmp_path, stdout=open(tmp_path / "lab.log", "wb"),
        stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n"
                                + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()  # JupyterLab shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)  # its own session: the server and kernels
            server.wait(timeout=10)


def test_gamma_slider_moves_the_displayed_value_in_jupyterlab(lab):
    try:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install playwright (no browser download "
                    "needed: the test drives /usr/bin/chromium)")
    shots = REPO / "runs" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        try:
            page.goto(f"{lab}/lab/tree/06_explorer.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            try:  # JupyterLab may ask which kernel to start: the notebook's own
                page.click(".jp-Dialog .jp-mod-accept", timeout=15_000)
            except PlaywrightTimeout:
                pass
            page.click(".lm-MenuBar-item:has-text('Run')")
            page.click(".lm-Menu-item:has-text('Run All Cells')")
            labels = page.locator(".vitplast-value")
            labels.nth(2).wait_for(timeout=240_000)  # the third explorer: the run browser
            page.wait_for_function(  # it opens on a stored run, not on "No run for ..."
                "el => el.textContent.startsWith('test_acc = ')",
                arg=labels.nth(2).element_handle(), timeout=120_000)
            gamma = page.locator(".widget-vbox", has=page.locator(".widget-hslider")).last
            label = gamma.locator(".vitplast-value")
            page.wait_for_function(  # the notebook's own move of the slider to c = 2
                "el => el.textContent.startsWith('c = 2 ')", arg=label.element_handle(),
                timeout=120_000)
            before = label.text_content()
            gamma.locator(".noUi-handle").focus()
            for _ in range(6):  # 6 steps of 0.05 in log10 c: c = 2 -> ~4
                page.keyboard.press("ArrowRight")
            page.wait_for_function(  # every step redraws in turn: wait for the last (c ~ 4)
                "el => parseFloat(el.textContent.slice(4)) > 3.5",
                arg=label.element_handle(), timeout=240_000)
            after = label.text_content()
            gamma.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "explorer.png"), full_page=False)
        except Exception:
            page.screenshot(path=str(shots / "explorer-failed.png"))
            raise
        finally:
            browser.close()
    value = {k: float(v) for k, v in (p.split(" = ") for p in after.split(" · "))}
    assert after != before and value["c"] > 2.5
    assert value["ratio"] == pytest.approx(value["c"], rel=1e-3)
    assert value["diff_preserved"] < 1e-4


def _chromium(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])


def test_the_reading_copy_shows_its_headings_and_figures_without_a_kernel(tmp_path, monkeypatch):
    """A run of a two-notebook course executed by papermill (a figure; a ValueError), rendered
    by the CLI, opened from its files: the index lists the course in order with each status,
    and the first notebook's page shows its heading and its figure (decoded by the browser)."""
    from playwright.sync_api import sync_playwright

    from vitplast.__main__ import main

    tiny_course(tmp_path / "course", monkeypatch)
    run = tmp_path / "run"
    notebooks.run("default", out_dir=run, progress=False)
    assert main(["notebooks", "html", str(run)]) == 0
    shots = REPO / "runs" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = _chromium(pw)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(60_000)
        try:  # MathJax is the site's own copy (its test: the one below)
            page.goto((run / "html" / reading_copy.INDEX).as_uri(),
                      wait_until="domcontentloaded")
            names = page.locator("tbody tr td:first-child").all_text_contents()
            statuses = page.locator("tbody tr td:nth-child(3)").all_text_contents()
            page.click("a[href='01_figure.html']")
            page.wait_for_url("**/01_figure.html", wait_until="domcontentloaded")
            heading = page.locator("h1", has_text="01 · A figure")
            heading.wait_for(state="visible")
            figure = page.locator(".jp-OutputArea-output img").first
            figure.wait_for(state="visible")
            width = figure.evaluate("img => img.complete ? img.naturalWidth : 0")
            page.screenshot(path=str(shots / "reading-copy.png"), full_page=True)
        finally:
            browser.close()
    assert names == TINY_COURSE and statuses == ["ok", "failed"]
    assert width > 100  # a decoded PNG, not a broken image


def test_the_reading_copy_typesets_notebook_01_s_math_offline(tmp_path):
    """Notebook 01 (its formulas are in its Markdown, so the committed notebook is the page's
    math) rendered by ``write_site`` and opened from its files with every request off this
    machine refused: MathJax, loaded from the site's own folder, typesets its math, and no
    Markdown cell's rendered text shows a raw ``$...$`` or TeX command."""
    import re

    from playwright.sync_api import sync_playwright

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(notebooks.NOTEBOOK_DIR / "01_definitions.ipynb", run)
    site = reading_copy.write_site(run, notebooks.NOTEBOOKS).parent
    shots = REPO / "runs" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    refused = []

    def offline(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = _chromium(pw)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(60_000)
        page.route("**/*", offline)
        try:
            page.goto((site / "01_definitions.html").as_uri(), wait_until="load")
            page.wait_for_function(  # MathJax loaded, its queue drained, some math typeset
                "window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 && "
                "document.querySelectorAll('.MathJax, .MathJax_Display').length > 0")
            typeset = page.locator(".jp-MarkdownCell .MathJax").count()
            failed = page.locator(".jp-MarkdownCell .MathJax .merror").count()  # a TeX error
            texts = page.locator(".jp-MarkdownCell .jp-RenderedMarkdown").all_inner_texts()
            loaded = page.evaluate("[...document.scripts].map(s => s.src)"
                                   ".filter(s => s.includes('MathJax.js'))")
            page.screenshot(path=str(shots / "reading-copy-math.png"), full_page=False)
        finally:
            browser.close()
    assert loaded and all(s.startswith((site / reading_copy.MATHJAX).as_uri()) for s in loaded)
    assert not [u for u in refused if "mathjax" in u.lower()]  # nothing of MathJax asked off-line
    assert typeset >= 20 and failed == 0  # 01 writes dozens of formulas
    text = "\n".join(texts)
    assert re.findall(r"\$[^$\n]+\$", text) == [] and re.findall(r"\\[A-Za-z]{2,}", text) == []
