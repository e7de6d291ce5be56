"""The notebooks teach: every notebook states learning goals, asks at least two "predict, then
run" questions (the prediction written BEFORE the cell that settles it, a reading after it),
ends with exercises whose answers are in the solutions file, and cites the glossary and the
objections kept in docs/. And the statements the notebooks make that could drift with the data
are findings rows computed from numbers: Jensen's "at most", the order of the medians, a
correlation that is exactly 0 on every task."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vitplast.measure import definitions
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER
from vitplast.report import definition_findings, notebooks, plasticity_findings
from vitplast.report.plasticity_findings import correlation_row
from vitplast.stats import verdicts

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = notebooks.NOTEBOOK_DIR / "solutions.md"
GOALS, PREDICT, EXERCISES = "## Learning goals", "**Predict, then run", "## Exercises"


def cells(name: str) -> list[dict]:
    return json.loads((notebooks.NOTEBOOK_DIR / f"{name}.ipynb").read_text())["cells"]


def text(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("name", notebooks.available())
def test_learning_goals_come_first(name):
    first = [text(c) for c in cells(name)[:2] if c["cell_type"] == "markdown"]
    assert any(GOALS in t for t in first), "learning goals in the first cells, before any code"
    goals = next(t for t in first if GOALS in t).split(GOALS, 1)[1]
    assert len(re.findall(r"^\s*[-\d]+[.)]?\s", goals, flags=re.M)) >= 2, "at least two goals"


@pytest.mark.parametrize("name", notebooks.available())
def test_two_predictions_each_settled_by_the_next_code_cell_and_read_after(name):
    cs = cells(name)
    prompts = [i for i, c in enumerate(cs) if c["cell_type"] == "markdown" and PREDICT in text(c)]
    assert len(prompts) >= 2, f"{name}: {len(prompts)} predict-then-run prompts"
    for i in prompts:
        assert cs[i + 1]["cell_type"] == "code", "the prompt stands right before its cell"
        after = next((c for c in cs[i + 2:] if c["cell_type"] == "markdown"), None)
        assert after is not None and "Read" in text(after), "a reading follows the result"


@pytest.mark.parametrize("name", notebooks.available())
def test_exercises_end_the_notebook_with_answers_in_the_solutions_file(name):
    cs = cells(name)
    where = [i for i, c in enumerate(cs) if c["cell_type"] == "markdown" and EXERCISES in text(c)]
    assert where and where[-1] >= len(cs) - 3, "the exercises close the notebook"
    asked = re.findall(r"^(\d+)\.\s", text(cs[where[-1]]), flags=re.M)
    assert len(asked) >= 2
    answers = SOLUTIONS.read_text().split(f"## {name}", 1)
    assert len(answers) == 2, f"a section '## {name}' in solutions.md"
    section = answers[1].split("\n## ", 1)[0]
    assert set(asked) <= set(re.findall(r"^(\d+)\.\s", section, flags=re.M))


@pytest.mark.parametrize("name", notebooks.available())
def test_notebooks_cite_the_glossary_and_the_objections_that_exist(name):
    body = "\n".join(text(c) for c in cells(name) if c["cell_type"] == "markdown")
    assert "docs/glossary.md" in body and "docs/objections.md" in body
    objections = (ROOT / "docs" / "objections.md").read_text()
    for k in set(re.findall(r"objections? (\d)", body)):
        assert f"## {k}." in objections, f"objection {k} cited by {name} is written in docs/"


@pytest.mark.parametrize("name", notebooks.available())
def test_the_findings_table_is_printed_once(name):
    """Printed whole by the last cell's ``verdicts.render`` (or read whole in words by
    ``sentences.read(table)``) and nowhere else: no earlier cell shows the findings table, whole
    or in slices (the last line of a cell is what Jupyter displays); a Read cell reads the rows
    it names (``sentences.read(table, claim, ...)``). A smaller table of its own (a study's
    decision rule, an exploratory family) may be read whole where it is built."""
    code = [text(c) for c in cells(name) if c["cell_type"] == "code"]
    whole = r"(?:verdicts\.render|sentences\.read)\((\w+)\)"
    final = set(re.findall(whole, code[-1]))
    assert final, f"{name}'s last cell renders its findings table whole"
    early = [i for i, c in enumerate(code[:-1]) if final & set(re.findall(whole, c))]
    assert not early, f"{name} renders its findings table whole before the end: cells {early}"
    # the table's name(s); suite_findings also makes the per-task tables its rows read
    per_task = r"(?:by_distance|by_length|distance|spearman_plasticity_gain)\("
    built = rf"^(\w+) = (?:verdicts\.table|\w*findings\.(?!{per_task})\w+)\("
    held = set(re.findall(built, "\n".join(code), flags=re.M))
    assert held, "the findings table has a name"
    for source in code[:-1]:
        last = source.strip().splitlines()[-1] if source.strip() else ""
        shown = re.match(r"^(\w+)\b(?!\s*=[^=])", last)
        assert not (shown and shown.group(1) in held), f"{name} shows its findings early: {last}"


def test_glossary_defines_the_words_the_notebooks_use():
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    for word in ("plasticity", "rate", "bound", "lower end", "plug-in", "`hidden`", "`embedding`",
                 "gauge", "agrees with the paper", "not resolved", "descriptive", "fragile"):
        assert word in glossary, word


# -- statements that can drift: each one a findings row computed from the numbers ----------

def _row(table: pd.DataFrame, like: str) -> pd.Series:
    rows = table[table["claim"].str.contains(like, regex=False)]
    assert len(rows) == 1, like
    return rows.iloc[0]


def _tables01(linear=None, ci=0.01):
    maps = definitions.maps_1d_table([0.3, 3.0], n=200)
    linear = definitions.linear_table(definitions.linear_map(d=16), n=2000) if linear is None \
        else linear
    scale = pd.DataFrame(dict(module="LayerNorm", scale=[0.1, 1.0, 10.0],
                              plasticity=[10.0, 1.0, 0.1]))
    conv = pd.DataFrame(dict(layer=0, component=["MHA", "FC1", "LN1"], n_pairs=512,
                             plasticity=[3.0, 2.0, 1.0], ci95=ci))
    return maps, linear, scale, conv


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jensen_a_linear_maps_plasticity_is_at_most_the_rms_singular_value(seed):
    linear = definitions.linear_table(definitions.linear_map(d=8, seed=seed), n=2000)
    value = dict(zip(linear["quantity"], linear["value"]))
    assert value["plasticity (mean rate)"] <= value["sqrt(mean sigma^2)"]
    row = _row(definition_findings.definitions(*_tables01(linear)), "sqrt(mean sigma_i^2)")
    assert row["measured"] <= 1 and row["verdict"] == "holds (exact check)"
    assert "at most 1" in row["paper"] and row["paper"].startswith("not in the paper")
    above = linear.copy()
    above.loc[above["quantity"] == "plasticity (mean rate)", "value"] = value[
        "sqrt(mean sigma^2)"] * 1.01
    row = _row(definition_findings.definitions(*_tables01(above)), "sqrt(mean sigma_i^2)")
    assert row["verdict"] == "fails (exact check)"


def test_the_order_is_settled_only_where_the_confidence_intervals_do_not_overlap():
    apart = _row(definition_findings.definitions(*_tables01(ci=0.1)), "intervals overlap")
    assert apart["verdict"] == "order settled" and apart["measured"] == "0 of 2"
    close = _row(definition_findings.definitions(*_tables01(ci=0.6)), "intervals overlap")
    assert close["verdict"] == "order not settled where the intervals overlap"
    assert close["measured"].startswith("2 of 2: MHA/FC1 (layer 0), FC1/LN1")


def test_a_correlation_of_exactly_zero_on_every_task_is_a_disagreement():
    rho = pd.Series(0.0, index=[f"t{i}" for i in range(8)])
    row = verdicts.table([correlation_row("rho", rho, paper="+1")]).iloc[0]
    assert row["verdict"].startswith("disagrees with the paper: rho = +0 on every one of the 8")
    assert row["family"] == "descriptive" and row["measured"] == 0
    one = verdicts.table([correlation_row("rho", rho + 1, paper="+1")]).iloc[0]
    assert one["verdict"].startswith("agrees with the paper")
    near = verdicts.table([correlation_row("rho", rho + 0.9, paper="+1")]).iloc[0]
    assert near["verdict"].startswith("disagrees with the paper: rho = +0.9")
    assert near["verdict"].endswith("near the paper's order, not the same)")
    assert "near" not in row["verdict"]
    spread = verdicts.table([correlation_row("rho", rho + np.linspace(-.1, .1, 8),
                                             paper="+1")]).iloc[0]
    assert spread["family"] == "exploratory" and spread["verdict"].startswith("not resolved")
    few = verdicts.table([correlation_row("rho", rho[:2], paper="+1")]).iloc[0]
    assert not few["verdict"].startswith("disagrees")  # two tasks: no claim either way


def test_notebook_02_reads_the_hidden_protocols_zero_correlation_as_a_disagreement():
    # the hidden-protocol order of the embedded model: FC1 > FC2 > LN2 > LN1 > MHA, which has
    # Spearman's rho exactly 0 with Fig. 2 (d = 4, 1, 1, 1, 1: 1 - 6 * 20 / 120)
    measured = dict(zip(["FC1", "FC2", "LN2", "LN1", "MHA"], [1.5, 1.0, 0.9, 0.86, 0.7]))
    ranked = pd.DataFrame([dict(task=f"t{i}", protocol="hidden", component=c, plasticity=v)
                           for i in range(8) for c, v in measured.items()])
    row = _row(plasticity_findings.plasticity_ranking(ranked), "Spearman")
    assert row["measured"] == 0 and row["verdict"].startswith("disagrees with the paper")


def test_paper_values_beside_the_measured_ones_come_from_one_place():
    # notebooks 01 and 02 print Fig. 2 beside the measurement from vitplast.paper, never retyped
    assert list(FIG2_PLASTICITY) == list(PLASTICITY_ORDER)
    for name in ("01_definitions", "02_plasticity"):
        code = "\n".join(text(c) for c in cells(name) if c["cell_type"] == "code")
        assert "beside_fig2" in code
        prose = "\n".join(text(c) for c in cells(name) if c["cell_type"] == "markdown")
        for comp in ("MHA", "FC1"):  # the distinctive values: never typed beside the measured
            value = str(FIG2_PLASTICITY[comp])
            assert not re.search(rf"(?<![\d.]){re.escape(value)}(?![\d])", prose), value
    assert math.isfinite(sum(FIG2_PLASTICITY.values()))
