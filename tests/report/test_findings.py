"""Findings: the builders' re-exported surface and the task as the unit of a correlation. The
verdict machinery: ``test_verdicts.py``; each notebook family's builders: ``test_bound_findings``,
``test_finetuning_findings``, ``test_confound_findings``, ``test_teaching.py``."""

import pandas as pd
import pytest

from vitplast import findings, results, verdicts


def test_findings_re_exports_the_verdicts_and_every_builder():
    for name in ("table", "render", "holm", "paired_test", "mean_test", "descriptive",
                 "Primary", "COLUMNS", "MAX_PRIMARIES"):
        assert getattr(findings, name) is getattr(verdicts, name)
    for name in ("bounds", "confounds", "finetuning", "definitions", "plasticity_ranking",
                 "explorer"):
        assert callable(getattr(findings, name))

def test_within_task_correlation_never_pools_tasks():
    """Two tasks whose components order perfectly within each (rho = +1 each) but whose
    pooled points anti-correlate: within tasks gives +1."""
    rows = []
    for task, offset in (("a", 0.0), ("b", 10.0)):
        for i, comp in enumerate(["MHA", "FC1", "FC2", "LN2", "LN1"]):
            rows.append(dict(protocol="hidden", task=task, component=comp,
                             plasticity=5 - i + offset, gain_pp=5 - i - 3 * offset))
    corr = results.within_task_correlation(pd.DataFrame(rows))
    assert corr.drop_duplicates("task")["spearman"].tolist() == pytest.approx([1.0, 1.0])
    assert corr.set_index(["task", "component"]).loc[("a", "MHA"), "rank_x"] == 1


