import math
import re

import numpy as np
import pandas as pd
import pytest

from vitplast.report import sentences
from vitplast.stats import power, verdicts


def _table(values, *, expected=math.nan, paper="not reported", claim="a - b", effect=math.nan,
           sides=("A", "B"), family="primary"):
    row = verdicts.mean_test(claim, values, paper=paper, expected=expected,
                             unit="points, per task", effect=effect, sides=sides)
    return verdicts.table([{**row, "family": family}])


#: Signs before a count, a ratio or a tau: "+17 tasks", "+1 x", "+0 tau", "+0.81 tau".
SIGNED = re.compile(r"[+-]\d[\d.e+-]* (?:tasks?|x\b|tau|cases|layers|ratio)")


def _words_ok(text: str) -> None:
    """What no sentence may say: n = 0, a sign on a count, ratio or tau, jargon."""
    assert "n = 0" not in text and "(untested)" not in text and not SIGNED.search(text), text


def test_the_example_of_the_docstring_reads_as_written():
    row = dict(claim="MHA - LN1, test accuracy", measured=3.34, n=33, unit="points, per task",
               p_holm=0.001, family="primary", verdict="resolved: positive", paper="none",
               side_a="MHA", side_b="LN1", above=27, below=6, interval="t", level_step=0.05,
               step_low=1.9, step_high=4.8, ci_low=1.9, ci_high=4.8)
    said = sentences.sentence(row)
    assert said == (
        "MHA - LN1, test accuracy: Resolved (the paper makes no claim on it). MHA came out above "
        "LN1 on 27 of 33 tasks (mean over all 33: +3.34 points); 95% CI +1.9 to +4.8 (level "
        "0.05, Holm's step among the primary rows).")
    assert " ".join(sentences.__doc__.split()).count(said) == 1


def test_a_tested_row_reads_verdict_then_which_way_most_tasks_went_then_one_interval():
    """The verdict first, then the side most tasks put above, on how many, with the mean over
    all of them (never read as a mean over the winning tasks), then the one interval Holm's
    step used: the words follow the data, whichever side wins."""
    rng = np.random.default_rng(0)
    up = 2.0 + rng.normal(0, 0.5, 20)
    said = sentences.text(_table(up, sides=("MHA alone", "LN1 alone")))
    assert said.startswith(f"- a - b: Resolved (the paper makes no claim on it). MHA alone came "
                           f"out above LN1 alone on {(up > 0).sum()} of 20 tasks (mean over "
                           f"all 20: {up.mean():+.3g} points); 95% CI")
    assert said.count("CI") == 1 and "Holm p" not in said
    flipped = sentences.text(_table(-up, sides=("MHA alone", "LN1 alone")))
    assert f"LN1 alone came out above MHA alone on {(up > 0).sum()} of 20 tasks" in flipped
    bare = sentences.text(_table(-up, sides=None))
    assert (f"Below zero on {(up > 0).sum()} of 20 tasks and above on 0 (mean over all 20: "
            f"{-up.mean():+.3g} points)") in bare
    # 04b's "below zero on 3 of 7 tasks, by 0.39 points on average": the mean is over all 7
    mixed = sentences.text(_table(np.array([-2.0, -1.0, -0.5, 0.3, 0.2, 0.1, 0.2]), sides=None))
    assert "Above zero on 4 of 7 tasks and below on 3 (mean over all 7: -0.386 points)" in mixed
    for text in (said, flipped, bare, mixed):
        _words_ok(text)


def test_the_words_follow_whether_it_resolved():
    rng = np.random.default_rng(0)
    up = _table(2.0 + rng.normal(0, 0.5, 20))
    noise = _table(rng.normal(0, 3.0, 40))
    assert sentences.text(up).startswith("- a - b: Resolved (the paper makes no claim on it).")
    said = sentences.text(noise)
    assert "Not resolved" in said and "Resolved (" not in said


def test_a_row_that_cites_the_paper_agrees_or_disagrees_with_it_and_says_where():
    rng = np.random.default_rng(1)
    values = 2.0 + rng.normal(0, 0.5, 20)
    agrees = _table(values, expected=1, paper="+0.93, Table 1")
    disagrees = _table(-values, expected=1, paper="+0.93, Table 1")
    assert sentences.text(agrees).startswith("- a - b: Resolved, and it agrees with the paper "
                                             "(+0.93, Table 1).")
    assert sentences.text(disagrees).startswith("- a - b: Resolved, and it disagrees with the "
                                                "paper (+0.93, Table 1).")


def test_an_underpowered_row_names_the_effect_its_power_is_at():
    """Power is stated at a named effect: the paper's where the row cites one, else the
    observed one."""
    values = np.array([2.4, -1.3, 0.4, 1.9, -0.8, 1.5, 0.2])
    paper = sentences.text(_table(values, expected=1, effect=0.37))
    need = power.n_needed(0.37, values.std(ddof=1))
    assert (f"Not resolved: these data could not have decided it: at level 0.05, detecting "
            f"the paper's +0.37 points would take about {need:.0f} tasks (power "
            f"{power.power(0.37, values.std(ddof=1), 7):.2f} with these 7).") in paper
    observed = sentences.text(_table(values / 4))
    assert f"detecting the observed {values.mean() / 4:+.2f} points would take about" in observed


def test_intervals_are_at_the_level_of_the_rows_holm_step_and_labelled():
    """Three exploratory rows: the one with the smallest p is tested at 0.05 / 3, its interval
    at 98.33% (the 95% one beside it); the largest p's at 95%. A row whose own step rejects but
    whose Holm p does not (Holm stopped earlier) says why."""
    rng = np.random.default_rng(2)
    rows = [verdicts.mean_test(c, v, paper="x", expected=math.nan, unit="points",
                               sides=("A", "B"))
            for c, v in (("big", 3 + rng.normal(0, 1, 10)), ("mid", 1 + rng.normal(0, 1, 10)),
                         ("none", rng.normal(0, 1, 10)))]
    t = verdicts.table(rows).set_index("claim")
    assert t.loc["big", "level_step"] == pytest.approx(0.05 / 3)
    lo, hi = verdicts.interval(t.loc["big"], 0.05 / 3)
    said = sentences.text(t.reset_index(), "big")
    assert (f"98.33% CI {lo:+.2g} to {hi:+.2g} (level 0.017, Holm's step among the exploratory "
            "rows)") in said
    assert t.loc["none", "level_step"] == pytest.approx(0.05)
    assert "95% CI" in sentences.text(t.reset_index(), "none")
    # the step-down stop: p1 = 0.03 > 0.05 / 2 stops Holm; p2 = 0.04 < 0.05 is its own step's
    stopped = pd.DataFrame([dict(claim=c, measured=1.0, sd=1.0, n=10, p=p, family="exploratory",
                                 paper="x", unit="points", expected=math.nan, test="t")
                            for c, p in (("first", 0.03), ("second", 0.04))])
    t = verdicts.table(stopped.to_dict("records")).set_index("claim")
    assert t.loc["second", "verdict"] == "not resolved: Holm stopped at a row with a smaller p"
    assert "Holm's step-down stopped at a row of its family with a smaller p" in (
        sentences.text(t.reset_index(), "second"))


def test_a_row_whose_95_interval_alone_would_decide_says_why_it_is_not_resolved():
    """04's FC2 - LN2 read "95% CI +0.77 to +3.4 ... not resolved": the sentence now gives
    the interval at Holm's level, and says the 95% one excludes 0 but Holm tests at a
    stricter level."""
    rng = np.random.default_rng(5)
    rows = [verdicts.mean_test("x", 0.9 + rng.normal(0, 1, 10), paper="x", expected=math.nan,
                               unit="points")]
    rows += [verdicts.mean_test(f"n{i}", rng.normal(0, 1, 10), paper="x", expected=math.nan,
                                unit="points") for i in range(5)]
    t = verdicts.table(rows)
    r = t.set_index("claim").loc["x"]
    assert r["p"] < 0.05 and r["verdict"].startswith("not resolved")  # the case in question
    said = sentences.text(t, "x")
    assert (f"Not resolved: its 95% CI excludes 0, but Holm's correction for the 6 exploratory "
            f"rows tests it at level {r['level_step']:.2g}, where its interval includes 0") in said


def test_no_tested_row_reads_not_resolved_beside_an_interval_that_excludes_zero():
    """Over many random families, a row's printed interval (at its Holm step's level) excludes
    0 only where it is resolved, or where its sentence says Holm stopped before it."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        rows = [verdicts.mean_test(f"r{i}", rng.normal(rng.uniform(0, 1.5), 1, 8), paper="x",
                                   expected=math.nan, unit="points") for i in range(4)]
        for _, r in verdicts.table(rows).iterrows():
            excludes = r["step_low"] > 0 or r["step_high"] < 0
            resolved = r["verdict"].startswith("resolved")
            assert excludes == resolved or "Holm stopped" in r["verdict"], r.to_dict()


def test_a_mean_of_correlations_has_its_interval_inside_minus_one_to_one():
    """05's per-block partial rho on 3 tasks: the t interval, cut to [-1, 1], and said so."""
    row = verdicts.mean_test("rho", [0.9, 0.2, 0.99], paper="x", expected=1,
                             unit="partial rho, per task", bounded=True)
    t = verdicts.table([row])
    r = t.iloc[0]
    assert -1 <= r["ci_low"] <= r["ci_high"] == 1 and -1 <= r["step_low"] <= r["step_high"] <= 1
    said = sentences.text(t)
    assert "Positive on 3 of 3 tasks and negative on 0 (mean partial rho +0.70); 95% CI " in said
    assert "cut at +1, where a correlation ends" in said
    _words_ok(said)


def test_one_correlation_over_tasks_reads_its_r_and_fisher_interval():
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, 30)
    t = verdicts.table([verdicts.correlation_test("r row", x, -x + rng.normal(0, 1, 30),
                                                  paper="x", expected=math.nan,
                                                  unit="r, over tasks")])
    r = t.iloc[0]
    said = sentences.text(t)
    assert (f"R = {r['measured']:.2f} over 30 tasks: where one was larger, the other tended "
            f"to be smaller; 95% CI {r['ci_low']:+.2g} to {r['ci_high']:+.2g} (level 0.05") in said


def test_rows_with_too_few_tasks_read_what_happened_and_give_no_interval():
    two = verdicts.table([verdicts.mean_test("MHA - LN1", [3.0, 5.0], paper="x", expected=1,
                                             unit="points, per task", sides=("MHA", "LN1"))])
    assert sentences.text(two) == ("- MHA - LN1: MHA came out above LN1 on 2 of 2 tasks (mean "
                                   "over all 2: +4 points); too few tasks to test (2; a test "
                                   "needs 3).")
    assert two[["ci95", "ci_low", "ci_high", "step_low", "step_high"]].isna().all(axis=None)
    none = verdicts.table([verdicts.mean_test("MHA - LN1", [], paper="x", expected=1,
                                              unit="points, per task", sides=("MHA", "LN1"))])
    assert sentences.text(none) == "- MHA - LN1: nothing measured yet (no task)."


def test_descriptive_rows_read_as_observations_without_signs_or_n():
    """A descriptive row: its verdict, then its value in words; a question label is answered;
    no "(n = ...)", no "(untested)", no sign on a ratio, count or tau."""
    rows = [verdicts.descriptive("order", "LN2 > LN1", paper="x", n=33, unit="(orders), over tasks",
                                 verdict=verdicts.same(True)),
            verdicts.descriptive("is Prop. 4 below Prop. 3 for MHA?", 1.9, paper="x", n=6,
                                 unit="median Prop. 4 / Prop. 3, over the MHA layers",
                                 verdict="no: Prop. 4 larger in 6 of 6 layers"),
            verdicts.descriptive("order at 4x vs 1x (Kendall tau)", 0.0, paper="x", n=2,
                                 unit="Kendall tau, mean over tasks", verdict="the order changed"),
            verdicts.descriptive("nothing", "none", paper="x", n=0, unit="rho, per task",
                                 verdict="plasticity is monotone in depth on all 3 tasks")]
    said = sentences.text(verdicts.table(rows)).splitlines()
    assert said == [
        "- order: same as the paper (orders, over tasks: LN2 > LN1).",
        "- is Prop. 4 below Prop. 3 for MHA? No: Prop. 4 larger in 6 of 6 layers (median Prop. "
        "4 / Prop. 3, over the MHA layers: 1.9).",
        "- order at 4x vs 1x (Kendall tau): the order changed (Kendall tau, mean over tasks: 0).",
        "- nothing: plasticity is monotone in depth on all 3 tasks."]
    _words_ok("\n".join(said))


@pytest.mark.parametrize("line, problem", [
    ("- x: +1 x, min of bound / lower end (n = 20): holds in all 20 cases.", "signed"),
    ("- y: none (n = 0): cannot be told from depth (untested).", "n = 0"),
    ("- z: +17 tasks (n = 17): fragile", "signed"),
    ("- t: +0.81 tau, mean over tasks: measured (untested).", "signed"),
    ("- r: +0.176 partial rho, per task (95% CI -0.94 to +1.5, n = 3).", "outside [-1, 1]"),
    ("- d: +2.06 points (95% CI +0.77 to +3.4, n = 7). Positive, but not resolved.", "without why"),
    ("- d: a above b (99.5% CI +0.1 to +3 at the level Holm's step used for it; 95% CI +0.7 to "
     "+3). Not resolved: the difference from zero could be chance.", "without why")])
def test_problems_finds_what_the_issue_found_in_the_old_sentences(line, problem):
    assert any(problem in p for p in sentences.problems(line))


def test_rows_of_every_kind_render_without_problems():
    """Tested (resolved, not resolved, underpowered, Holm-stopped), correlations (a mean over
    tasks, one over tasks), too few tasks, n = 0, descriptive counts, ratios and taus: no
    rendered line has a ``problems``."""
    rng = np.random.default_rng(9)
    rows = [
        verdicts.mean_test("up", 2 + rng.normal(0, 1, 12), paper="x", expected=1, unit="points",
                           sides=("A", "B")),
        verdicts.mean_test("almost", 0.7 + rng.normal(0, 1, 12), paper="x", expected=1,
                           unit="points", effect=0.37, sides=("A", "B")),
        verdicts.mean_test("noise", rng.normal(0, 1, 12), paper="x", expected=math.nan,
                           unit="points"),
        verdicts.mean_test("rho", [0.9, 0.2, 0.99], paper="x", expected=1, unit="partial rho",
                           bounded=True),
        verdicts.mean_test("rho2", [-1.0, -0.9, -0.8, -1.0], paper="x", expected=1, unit="rho",
                           bounded=True),
        verdicts.correlation_test("r", rng.normal(0, 1, 9), rng.normal(0, 1, 9), paper="x",
                                  expected=math.nan, unit="r, over tasks"),
        verdicts.correlation_test("r3", [1, 2, 3], [2, 1, 3], paper="x", expected=math.nan,
                                  unit="r, over tasks"),
        verdicts.mean_test("two", [1.0, 2.0], paper="x", expected=1, unit="points"),
        verdicts.mean_test("none", [], paper="x", expected=1, unit="points"),
        verdicts.descriptive("count", 17, paper="x", n=17, unit="tasks", verdict="fragile"),
        verdicts.descriptive("ratio", 1.0, paper="x", n=20, unit="x, smallest bound / lower end",
                             verdict="yes"),
        verdicts.descriptive("tau", 0.0, paper="x", n=2, unit="tau, mean over tasks",
                             verdict="the order changed"),
        verdicts.descriptive("order", "A > B", paper="x", n=0, unit="(components)",
                             verdict=verdicts.same(False))]
    said = sentences.text(verdicts.table(rows))
    assert len(said.splitlines()) == len(rows) and sentences.problems(said) == []


def test_fragile_rows_say_so():
    fragile = dict(claim="c", measured=1.0, n=9, unit="points", p_holm=0.01,
                   family="primary", verdict="resolved: positive", fragile=True)
    assert sentences.sentence(fragile).endswith("flips this verdict.")


def test_select_picks_exact_or_unique_substring_claims_in_the_order_asked():
    t = pd.DataFrame(dict(claim=["MHA - LN1", "MHA - LN1 at matched counts", "FC2"]))
    assert list(sentences.select(t, "FC2", "MHA - LN1")["claim"]) == ["FC2", "MHA - LN1"]
    assert list(sentences.select(t, "matched")["claim"]) == ["MHA - LN1 at matched counts"]
    assert len(sentences.select(t)) == 3
    with pytest.raises(ValueError, match="matches no claim; valid claims"):
        sentences.select(t, "LN2 - LN1")
    with pytest.raises(ValueError, match="matches 2 claims"):
        sentences.select(t, "MHA")


def test_read_is_markdown_of_the_text():
    t = _table(np.linspace(1, 3, 10))
    assert sentences.read(t).data == sentences.text(t)


def test_what_this_shows_reads_at_most_eight_rows_primaries_first_and_the_appendix_the_rest():
    rng = np.random.default_rng(11)
    rows = [verdicts.mean_test(f"e{i}", rng.normal(0, 1, 8), paper="x", expected=math.nan,
                               unit="points") for i in range(12)]
    rows += [{**verdicts.mean_test("P1", 1 + rng.normal(0, 1, 8), paper="x", expected=1,
                                   unit="points"), "family": "primary"}]
    t = verdicts.table(rows)
    default = sentences.shown(t)
    assert len(default) == sentences.MAX_SHOWN and default["claim"].iloc[0] == "P1"
    picked = sentences.shown(t, "e3", "e0")
    assert picked["claim"].tolist() == ["P1", "e3", "e0"]
    said, rest = sentences.summary(t, "e3", "e0").data, sentences.appendix(t, "e3", "e0").data
    assert len(said.splitlines()) == 3 and len(rest.splitlines()) == len(t) - 3
    assert sorted((said + "\n" + rest).splitlines()) == sorted(sentences.text(t).splitlines())
    with pytest.raises(ValueError, match="at most 8"):
        sentences.shown(t, *[f"e{i}" for i in range(8)])
