"""What a searched study's searches decided: per task and configuration, the LR chosen on
validation and that run's accuracies, on the tasks whose every search has ended.

A searched study (the suite study, ``studies.get("suite")``, the cross-gauge and the length
studies) brackets each configuration's LR on validation (``vitplast.experiments.search``);
``chosen`` reads the outcome from its store. The statistics over it are notebook 07's
(``vitplast.report.suite_findings``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from vitplast.experiments import search

if TYPE_CHECKING:  # for annotations only
    from vitplast.experiments.studies import Study


def complete_tasks(state: pd.DataFrame) -> list[str]:
    """The tasks of a ``search.state`` table whose every setting has ended (nothing asked)."""
    done = state.assign(ended=state["next"].map(len) == 0).groupby("task", sort=False)["ended"]
    return [task for task, ended in done.all().items() if ended]


def chosen(study: Study, root: str | Path, *, grid: bool = False) -> pd.DataFrame:
    """``search.state`` of a searched ``study`` on its complete tasks only: per task and
    configuration the chosen ``lr`` (``best``), ``bracketed``, and that run's ``val_acc`` and
    ``test_acc`` (in %) and ``trainable`` count. ``grid``: the LR chosen on validation from
    the study's fixed grid instead (a task is complete when every grid run is stored)."""
    state = search.state(study.spec, root, grid=grid)
    return state[state["task"].isin(complete_tasks(state))].rename(
        columns={"best": "lr"}).reset_index(drop=True)


__all__ = ["chosen", "complete_tasks"]
