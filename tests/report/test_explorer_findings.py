"""Notebook 06's findings rows (``vitplast.report.explorer_findings``): the bounds against the
rates, the rescaled LayerNorm, read as exact checks. From the explorers' own views:
``test_widgets.py``."""

import numpy as np
import pandas as pd

from vitplast.report import explorer_findings


def _bounds(max_rate: float) -> pd.DataFrame:
    return pd.DataFrame(dict(layer=[0, 0, 1], component=["LN1", "MHA", "FC1"],
                             plasticity=[1.0, 2.0, 3.0], max_rate=[2.0, max_rate, 4.0],
                             bound=[5.0, 5.0, 5.0]))


def _gamma(exact: bool) -> pd.DataFrame:
    cs = np.array([0.1, 2.0, 10.0])
    return pd.DataFrame(dict(c=cs, ratio=cs if exact else cs ** 0.5, bound_ratio=cs,
                             diff_preserved=1e-7 if exact else 0.5, diff_raw=[0.3, 0.2, 2.0]))


def test_notebook_06_findings_agree_and_disagree():
    good = explorer_findings.explorer(_bounds(4.0), _gamma(True))
    # Props. 1-3 are the paper's claims; the gamma rescale checks objection 3, not the paper;
    # bound / plasticity per component: LN1 5, MHA 2.5, FC1 1.67
    assert good["verdict"].tolist() == ["same as the paper (exact check)", "tight (< 2) for: FC1",
                                        "holds (exact check)", "holds (exact check)"]
    bad = explorer_findings.explorer(_bounds(6.0), _gamma(False))
    assert bad.loc[0, "measured"] == "2/3"
    assert bad["verdict"].iloc[[0, 2, 3]].tolist() == ["differs from the paper (exact check)",
                                                       "fails (exact check)",
                                                       "fails (exact check)"]
