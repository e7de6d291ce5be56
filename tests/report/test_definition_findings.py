"""Notebook 01's findings (``vitplast.report.definition_findings``, read as
``definition_findings.definitions``): each section's rows come from its own table, their verdicts
from the numbers, and the Read cells' sentences change when the numbers do."""

import pandas as pd
import pytest

from vitplast.measure import definitions as defs
from vitplast.report import definition_findings, sentences


def _scale(ln_slope: float, attn_slope: float) -> pd.DataFrame:
    s = [0.1, 1.0, 10.0]
    return pd.DataFrame([dict(module=m, scale=x, plasticity=x ** k) for m, k in
                         (("LayerNorm", ln_slope), ("attention", attn_slope)) for x in s])


def test_each_section_adds_its_own_rows():
    maps = defs.maps_1d_table([0.3, 1.0, 3.0], n=500)
    linear = defs.linear_table(defs.linear_map(d=8), n=500)
    alone = definition_findings.definitions(maps)
    assert len(alone) == 4 and alone["family"].eq("descriptive").all()
    both = definition_findings.definitions(maps, linear, _scale(-1.0, 0.5))
    assert len(both) == 8 and set(alone["claim"]) < set(both["claim"])
    with pytest.raises(ValueError, match="valid claims"):
        sentences.read(alone, "linear map")  # its table was not given: its rows are not there


def test_the_maps_rows_follow_from_the_table():
    """relu's plasticity is the same at every scale, x^2's largest rate reaches Lip only at the
    large scale, and a map crossing 1 is named: objection 1 reads as a result, not a claim."""
    maps = defs.maps_1d_table([0.3, 1.0, 3.0], n=2000)
    rows = definition_findings.definitions(maps).set_index("claim")
    spread = rows.loc["plasticity at pair scale 3 / at 0.3, per map"]
    assert spread["verdict"] == "scale-invariant: relu(x)"
    reach = rows.filter(like="largest observed rate / Lipschitz", axis=0).iloc[0]
    assert "only at scale 3, not at 0.3: x^2 on [-2, 2]" in reach["verdict"]
    cross = rows.filter(like="crosses 1", axis=0).iloc[0]
    assert cross["paper"].startswith("not in the paper") and "of 4 maps cross 1" in \
        cross["verdict"]
    assert rows.loc["plasticity <= largest observed rate <= Lipschitz constant, 1-D maps",
                    "verdict"] == "same as the paper (exact check)"


def test_the_read_sentences_change_with_the_numbers():
    """Attention's slope: a sign change changes the sentence; LayerNorm's slope -1 agrees with
    Prop. 1 and -0.5 does not."""
    words = {k: sentences.text(definition_findings.definitions(scale=_scale(ln, a)),
                               "LayerNorm: slope", "attention: slope") for k, (ln, a) in
             dict(down=(-1.0, -0.5), up=(-0.5, 0.5), flat=(-1.0, 0.01)).items()}
    assert "same as the paper (exact check)" in words["down"]
    assert "differs from the paper (exact check)" in words["up"]
    assert "plasticity falls with the input scale" in words["down"]
    assert "plasticity rises with the input scale" in words["up"]
    assert "attention: slope of log plasticity against log input scale: scale-invariant (fit " \
        "over scales: 0.01)" in words["flat"]
    assert "scale-invariant" in words["flat"]


def test_prop1_by_hand_and_the_order_rows():
    rows = definition_findings.definitions(prop1=(2.0, 2.0, [1.0, 1.5]),
                                ranked=pd.DataFrame(dict(protocol="hidden", component=[
                                    "MHA", "FC1", "FC2", "LN2", "LN1"],
                                    plasticity=[5.0, 4, 3, 2, 1]))).set_index("claim")
    assert rows.filter(like="by hand", axis=0)["verdict"].iloc[0] == "holds (exact check)"
    largest = rows.loc["the LayerNorm's largest rate over the pairs / Prop. 1's bound"]
    assert largest["measured"] == 0.75 and largest["verdict"] == "same as the paper (exact check)"
    order = rows.filter(like="order of the components", axis=0).iloc[0]
    assert order["measured"] == "MHA > FC1 > FC2 > LN2 > LN1"
    assert order["verdict"] == "same as the paper"
    rows = definition_findings.definitions(prop1=(2.0, 1.0, [3.0]))
    assert rows["verdict"].tolist() == ["fails (exact check)",
                                        "differs from the paper (exact check)"]
