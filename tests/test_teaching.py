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

from vitplast.course import notebooks
from vitplast.measure import definitions
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER
from vitplast.report import definition_findings, plasticity_findings
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
    ``sentences.read(table)``, or by "What this shows"'s ``sentences.summary(table, ...)`` and
    the appendix's ``sentences.appendix(table, ...)``, the rest) and nowhere else: no earlier
    cell shows the findings table, whole or in slices (the last line of a cell is what Jupyter
    displays); a Read cell reads the rows it names (``sentences.read(table, claim, ...)``). A
    smaller table of its own (a study's decision rule, an exploratory family) may be read whole
    where it is built."""
    code = [text(c) for c in cells(name) if c["cell_type"] == "code"]

    def whole(source: str) -> set:
        return set(re.findall(r"(?:verdicts\.render|sentences\.read)\((\w+)\)", source)) | set(
            re.findall(r"sentences\.appendix\((\w+)\b", source))

    final = whole(code[-1])
    assert final, f"{name}'s last cell renders its findings table whole"
    early = [i for i, c in enumerate(code[:-1]) if final & whole(c)]
    assert not early, f"{name} renders its findings table whole before the end: cells {early}"
    # the table's name(s); suite_findings also makes the per-task tables its rows read
    per_task = r"(?:by_distance|by_length|distance|spearman_plasticity_gain)\("
    built = rf"^(\w+) = (?:verdicts\.table|regret\.findings|\w*findings\.(?!{per_task})\w+)\("
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
    assert near["verdict"].startswith("near the paper's order, not the same: rho = +0.9 on every "
                                      "one of the 8 tasks, one swap of two neighbours from it")
    nearer = verdicts.table([correlation_row("rho", rho + 0.7, paper="+1")]).iloc[0]
    assert "a sum of squares of 6 (one swap of two neighbours: 2)" in nearer["verdict"]
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


# -- the course hangs together: pointers resolve, no internal numbers, sections listed ------

def _sections(name: str) -> dict[int, str]:
    """A notebook's numbered sections (``## K. Title``): number -> title."""
    return {int(k): t for c in cells(name) if c["cell_type"] == "markdown"
            for k, t in re.findall(r"^## (\d+)\. (.+)$", text(c), flags=re.M)}


def _notebook(number: str) -> str:
    named = [nb for nb in notebooks.available() if nb.split("_")[0] == number]
    assert named, f"no notebook {number}: the notebooks are {notebooks.available()}"
    return named[0]


#: "notebook 02, section 7", "notebook 02b (sections 1-5)", "Notebook 07 (section 6)",
#: "notebook 02's section 8", "notebook 03b, section 1,"; "02b section 5"; "section 3" (own).
_OTHER = re.compile(r"[Nn]otebooks?\s+(\d\d[a-z]?)(?:'s)?,?\s+\(?sections?\s+(\d+)"
                    r"(?:\s*(?:-|and|to)\s*(\d+))?|\b(\d\d[a-z]?) sections?\s+(\d+)")
_TITLED = re.compile(r"[Nn]otebook\s+(\d\d[a-z]?),\s+((?:\"[^\"]+\"(?:,?\s+and\s+)?)+)")
_OWN = re.compile(r"\b[Ss]ections?\s+(\d+)(?:\s*(?:-|and|to)\s*(\d+))?")
_PAPER = re.compile(r"(?:paper(?:'s)?|Takeaway \d),? section \d+|section \d+ of the paper"
                    r"|PAPER\.md section \d+")


def _pointers(body: str, own: str | None) -> list[tuple[str, int, str]]:
    """(notebook, section, the words) of every pointer to a section in ``body``; ``own``: the
    notebook a bare "section K" points into (None: a bare one is not a pointer)."""
    found = []
    for m in _OTHER.finditer(body):
        nb, a, b = ((m.group(1), m.group(2), m.group(3)) if m.group(1)
                    else (m.group(4), m.group(5), None))
        found += [(_notebook(nb), k, m.group(0)) for k in range(int(a), int(b or a) + 1)]
    rest = _PAPER.sub("", _OTHER.sub("", body))
    if own:
        for m in _OWN.finditer(rest):
            found += [(own, k, m.group(0)) for k in range(int(m.group(1)),
                                                          int(m.group(2) or m.group(1)) + 1)]
    return found


def _markdown_sources() -> list[tuple[str, str | None, str]]:
    """(where, the notebook a bare "section K" means, text) for every notebook's markdown,
    each notebook's part of the solutions, and the READMEs and docs that point into them."""
    out = [(f"{nb} markdown", nb, "\n".join(text(c) for c in cells(nb)
                                             if c["cell_type"] == "markdown"))
           for nb in notebooks.available()]
    for part in SOLUTIONS.read_text().split("\n## ")[1:]:
        name, body = part.split("\n", 1)
        out.append((f"solutions.md {name}", name.strip(), body))
    for path in [ROOT / "README.md", notebooks.NOTEBOOK_DIR / "README.md",
                 *sorted((ROOT / "docs").glob("*.md"))]:
        out.append((str(path.relative_to(ROOT)), None, path.read_text()))
    return out


def test_every_pointer_to_a_section_names_one_that_exists():
    """"notebook 02, section 10" where 02 has eight sections, or a pointer into a notebook
    that was split, fails here; a pointer by title ("notebook 02, "What sets the ranking"")
    must name a section's title."""
    checked = 0
    for where, own, body in _markdown_sources():
        for nb, k, words in _pointers(body, own):
            assert k in _sections(nb), f"{where}: {words!r} points to section {k} of {nb}, " \
                f"which has sections {sorted(_sections(nb))}"
            checked += 1
        for m in _TITLED.finditer(body):
            titles = [" ".join(t.split()) for t in _sections(_notebook(m.group(1))).values()]
            for quoted in re.findall(r"\"([^\"]+)\"", m.group(2)):
                quoted = " ".join(quoted.split())
                assert any(t.startswith(quoted) for t in titles), f"{where}: {m.group(0)!r}"
                checked += 1
    assert checked > 30  # the course points across notebooks: the parser sees the pointers


def test_the_pointer_parser_reads_each_form():
    assert _pointers("see notebook 02, section 7, and 02b section 5", None) == [
        ("02_plasticity", 7, "notebook 02, section 7"), ("02b_gauge", 5, "02b section 5")]
    assert [k for _, k, _ in _pointers("notebook 02b (sections 1-3)", None)] == [1, 2, 3]
    assert _pointers("(paper, section 4) and section 2's table", "03_bounds") == [
        ("03_bounds", 2, "section 2")]
    assert _pointers("section 2", None) == []


def test_no_markdown_names_an_internal_issue_number():
    """A student reads the course, not its tracker: no "#48", "issue 49" or "issues 28 and
    38" in any notebook's markdown, the solutions or the notebooks' README."""
    internal = re.compile(r"(?<![\w&])#\d+\b|\bissues? \d+", flags=re.I)
    for where, _, body in _markdown_sources()[:len(notebooks.available())] + [
            ("solutions.md", None, SOLUTIONS.read_text()),
            ("notebooks/README.md", None, (notebooks.NOTEBOOK_DIR / "README.md").read_text())]:
        hits = internal.findall(body)
        assert not hits, f"{where} names internal issue numbers: {hits}"


@pytest.mark.parametrize("name", notebooks.available())
def test_each_notebook_lists_its_sections_with_minutes_and_fits_a_lecture(name):
    """The first cell lists every section (``K. Title (N min)``, the unnumbered ones as
    ``- Title (N min)``) in the notebook's order, with the total stated; one lecture: at most
    60 minutes."""
    first = text(cells(name)[0])
    m = re.search(r"\*\*Sections\*\* \(about (\d+) minutes[^)]*\):\n\n((?:.+\n?)+)", first)
    assert m, f"{name}: its first cell lists its sections"
    listed = re.findall(r"^(?:(\d+)\.|-) (.+) \((\d+) min\)$", m.group(2), flags=re.M)
    skip = ("Learning goals", "Exercises", "How to use this notebook")
    heads = [h for c in cells(name) if c["cell_type"] == "markdown"
             for h in re.findall(r"^## (.+)$", text(c), flags=re.M)
             if h not in skip and not h.startswith("Appendix")]  # the appendix: after class
    assert [f"{k}. {t}" if k else t for k, t, _ in listed] == heads
    minutes = sum(int(n) for *_, n in listed)
    assert minutes == int(m.group(1)) and minutes <= 60


def test_a_parameter_listing_the_embedded_checkpoints_lists_them_all():
    """A parameter comment naming the embedded checkpoints ("embedded checkpoint: init, ...")
    lists every checkpoint the manifest ships, in its order (03's once omitted epoch12)."""
    from vitplast import models

    shipped = list(models.embedded_checkpoints())
    seen = 0
    for name in notebooks.available():
        for line in text(next(c for c in cells(name) if "parameters" in c["metadata"].get(
                "tags", []))).splitlines():
            listed = re.search(r"embedded checkpoint: ([\w, ]+)$", line)
            if listed:
                assert listed.group(1).split(", ") == shipped, f"{name}: {line}"
                seen += 1
    assert seen >= 2  # 03 and 03b
