import math

import numpy as np
import pandas as pd
import pytest

from vitplast.report import sentences
from vitplast.stats import verdicts


def _table(values, *, expected=math.nan, paper="not reported", claim="a - b"):
    row = verdicts.mean_test(claim, values, paper=paper, expected=expected,
                             unit="points, per task")
    return verdicts.table([{**row, "family": "primary"}])


def test_the_example_of_the_docstring_reads_as_written():
    row = dict(claim="MHA - LN1, test accuracy", measured=1.2, ci95=0.5, n=33,
               unit="points, per task", p_holm=0.001, family="primary",
               verdict="resolved: positive", paper="not reported")
    assert sentences.sentence(row) == (
        "MHA - LN1, test accuracy: +1.2 points, per task (95% CI +0.7 to +1.7, n = 33, "
        "Holm p = 0.001 among the primary rows). Positive, and resolved (the paper makes no "
        "claim on it).")
    assert " ".join(sentences.__doc__.split()).count(" ".join(
        sentences.sentence(row).split())) == 1


def test_the_words_follow_the_sign_and_whether_it_resolved():
    rng = np.random.default_rng(0)
    up = _table(2.0 + rng.normal(0, 0.5, 20))
    down = _table(-2.0 + rng.normal(0, 0.5, 20))
    noise = _table(rng.normal(0, 3.0, 40))
    assert "Positive, and resolved (the paper makes no claim" in sentences.text(up)
    assert "Negative, and resolved (the paper makes no claim" in sentences.text(down)
    said = sentences.text(noise)
    assert "but not resolved" in said and "resolved (" not in said


def test_a_row_that_cites_the_paper_agrees_or_disagrees_with_it_and_says_where():
    rng = np.random.default_rng(1)
    values = 2.0 + rng.normal(0, 0.5, 20)
    agrees = _table(values, expected=1, paper="+0.93, Table 1")
    disagrees = _table(-values, expected=1, paper="+0.93, Table 1")
    assert "Positive, resolved, and it agrees with the paper (+0.93, Table 1)." in (
        sentences.text(agrees))
    assert "Negative, resolved, and it disagrees with the paper (+0.93, Table 1)." in (
        sentences.text(disagrees))


def test_an_underpowered_row_says_the_data_could_not_have_decided():
    row = dict(claim="c", measured=0.3, ci95=1.0, n=5, unit="points", p_holm=0.6,
               family="exploratory", verdict="not resolved: underpowered (about 40 tasks needed)")
    assert sentences.sentence(row).endswith(
        "Positive, but not resolved, and these data could not have resolved it: underpowered "
        "(about 40 tasks needed).")


def test_descriptive_rows_give_their_value_and_verdict_and_fragile_rows_say_so():
    row = dict(claim="order", measured="LN2 > LN1", unit="", n=33, family="descriptive",
               verdict="order held")
    assert sentences.sentence(row) == "order: LN2 > LN1 (n = 33): order held."
    fragile = dict(claim="c", measured=1.0, ci95=0.2, n=9, unit="points", p_holm=0.01,
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
