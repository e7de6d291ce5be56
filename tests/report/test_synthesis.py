"""The closing synthesis (``vitplast.report.synthesis``): each question answered by rows the
notebooks computed, found by claim, in order; a missing row fails naming what there is."""

import math

import numpy as np
import pytest

from vitplast.report import synthesis
from vitplast.stats import verdicts

#: The least and largest gauge c of notebook 02b, as its parameters give them.
CS = (1.0, 8.0)


def _tables():
    rng = np.random.default_rng(0)
    claims = [c for cs in synthesis.claims(gauge_cs=CS).values() for c in cs]
    rows = [verdicts.mean_test(f"{c} (row)", rng.normal(1, 1, 8), paper="x", expected=math.nan,
                               unit="points") for c in claims]
    return verdicts.table(rows[:4]), verdicts.table(rows[4:])


def test_the_synthesis_answers_each_question_with_its_rows_in_order():
    a, b = _tables()
    found = synthesis.closing(a, b, gauge_cs=CS)
    assert list(found["question"].unique()) == list(synthesis.QUESTIONS)
    assert len(found) == sum(len(c) for c in synthesis.claims(gauge_cs=CS).values())
    said = synthesis.read(found).data
    assert said.startswith(f"**{list(synthesis.QUESTIONS)[0]}**")
    assert sum(line.startswith("- ") for line in said.splitlines()) == len(found)


def test_a_missing_row_names_the_question_and_the_claims_there_are():
    a, _ = _tables()
    with pytest.raises(ValueError, match="no table holds the claim"):
        synthesis.closing(a, gauge_cs=CS)


def test_the_real_model_question_reads_its_rows_and_its_study_primary_only_once_there():
    """The fourth question reads real weights' rows (notebook 02c); the real-model study's
    primary is read once a table holds it, and its absence is no error (``OPTIONAL``)."""
    import pandas as pd

    real = [c for c in synthesis.claims(gauge_cs=CS)[list(synthesis.QUESTIONS)[3]]]
    others = [c for q in list(synthesis.QUESTIONS)[:3] for c in synthesis.claims(gauge_cs=CS)[q]]
    rows = pd.DataFrame(dict(claim=[f"x {c} y" for c in others + real], measured=1.0))
    assert len(synthesis.closing(rows, gauge_cs=CS)) == len(others) + len(real)
    without = rows[~rows["claim"].str.contains("MHA - LN1 on the real model", regex=False)]
    found = synthesis.closing(without, gauge_cs=CS)
    assert len(found) == len(others) + len(real) - 1
    assert set(synthesis.OPTIONAL) <= set(real)
    with pytest.raises(ValueError, match="side of 1"):
        synthesis.closing(without[~without["claim"].str.contains("side of 1", regex=False)],
                          gauge_cs=CS)


def test_a_claim_matching_several_rows_of_a_table_fails_there():
    """An ambiguous claim is an error in the table that holds it, never a silent fall-through
    to a later table."""
    import pandas as pd

    claims = [c for cs in synthesis.claims(gauge_cs=CS).values() for c in cs]
    twice = pd.DataFrame(dict(claim=[f"x {c} y" for c in claims] + [f"z {claims[0]}"]))
    with pytest.raises(ValueError, match="matches 2 claims"):
        synthesis.closing(twice, pd.DataFrame(dict(claim=claims)), gauge_cs=CS)


def test_every_plasticity_row_is_read_under_both_protocols():
    claims = [c for cs in synthesis.claims(gauge_cs=CS).values() for c in cs]
    for c in claims:
        for a, b in (("[embedding]", "[hidden]"), ("embedding]", "hidden]"),
                     ("embedding protocol", "hidden protocol")):
            if a in c and "embedding scales" not in c:
                assert c.replace(a, b) in claims, c


def test_the_gauge_rows_are_those_of_the_cs_02b_measured():
    """The gauge's rows are read at the least and largest c 02b measured, not a typed c = 8."""
    import pandas as pd

    asked = [c for cs in synthesis.claims(gauge_cs=(4.0, 1.0, 16.0)).values() for c in cs]
    assert "order at gauge c = 16 [hidden]" in asked and "order at gauge c = 1 [hidden]" in asked
    assert not any("c = 8" in c for c in asked)
    found = synthesis.closing(pd.DataFrame(dict(claim=asked)), gauge_cs=(4.0, 1.0, 16.0))
    assert "order at gauge c = 16 [embedding]" in set(found["claim"])
