"""Declared primaries (``vitplast.stats.primaries``): no default direction, only claims that
exist, a difference of groups or a named statistic, every shipped primary's citation, and the
table and words that show them before the results."""

import math

import numpy as np
import pandas as pd
import pytest

from vitplast import paper
from vitplast.experiments import studies
from vitplast.stats import primaries


def test_a_primary_has_no_default_direction_and_cites_only_claims_that_exist():
    assert math.isnan(primaries.Primary("x", a=("A",), b=("B",)).expected)
    with pytest.raises(ValueError, match="unknown claim of the paper 'MHA > LN1'; valid: "):
        primaries.Primary("x", a=("A",), b=("B",), cites="MHA > LN1")
    with pytest.raises(ValueError, match="needs the claim it comes from"):
        primaries.Primary("x", a=("A",), b=("B",), paper=0.93)


def test_every_shipped_primary_cites_a_claim_of_the_paper_or_none():
    """Every study's primaries: a cited claim exists in ``paper.CLAIMS`` and gives the
    primary its direction and source; an uncited one has no direction and says so."""
    cited = {}
    for name in studies.STUDIES:
        for p in studies.get(name).primaries:
            if p.cites:
                claim = paper.CLAIMS[p.cites]
                assert p.expected == claim.direction and p.source.startswith(claim.source)
                cited.setdefault(name, []).append(p.cites)
            else:
                assert math.isnan(p.expected) and math.isnan(p.paper)
                assert p.source.startswith("no claim in the paper")
    assert cited == {"main": ["linears over LayerNorms", "MHA over LN1",
                              "plasticity goes with gain"],
                     "suite": ["MHA over LN1", "plasticity goes with gain"],
                     **{k: v for k, v in cited.items() if k not in ("main", "suite")}}
    assert not any(k.startswith(("confounds", "gauge")) for k in cited)


def test_primaries_table_says_when_a_primary_has_no_direction():
    table = primaries.primaries_table(studies.get("suite").primaries)
    assert table["expected"].tolist() == ["none (no claim)", "+", "+"]


def test_a_primary_is_a_difference_of_groups_or_a_named_statistic():
    acc = pd.DataFrame({"A": [1.0, 2.0, 3.0], "B": [3.0, 4.0, 5.0], "C": [0.0, 0.0, np.nan]},
                       index=["t0", "t1", "t2"])
    p = primaries.Primary("A, B - C", a=("A", "B"), b=("C",))
    assert p.values(acc).tolist() == [2.0, 3.0]  # t2 lacks C: left out
    assert primaries.Primary("A - D", a=("A",), b=("D",)).values(acc).empty
    rho = pd.Series([0.5, 0.1], index=["t0", "t1"])
    q = primaries.Primary("rho", statistic="s", paper=1.0, cites="plasticity goes with gain")
    assert q.values(acc, {"s": rho}).equals(rho) and q.row(acc, {"s": rho})["effect_paper"] == 1.0
    with pytest.raises(ValueError, match="unknown statistic"):
        q.values(acc, {})


def test_described_states_each_primary_and_the_claim_it_tests_or_that_it_tests_none():
    text = primaries.described(studies.get("suite").primaries).data.splitlines()
    assert len(text) == 3 and [t[:6] for t in text] == ["- **P1", "- **P2", "- **P3"]
    assert "It tests no claim of the paper" in text[0] and "resolved: positive" in text[0]
    assert ("It tests the paper's claim that finetuning MHA alone gives higher test accuracy "
            "than LN1 alone (Table 1 average (ViT-B/16); the paper's value +0.93)") in text[1]
    assert "Compares the mean of (MHA) minus the mean of (LN1)" in text[1]
