"""The suite study's tables: what each task chose, the primaries' values per task, and how far
each task lies from pretraining.

Paper: Table 1 and Takeaway 3, tested on the task suite (``vitplast.suite``) by the study
``studies.SUITE_STUDY``, whose three primary questions were declared before its runs. The
unit is the task: every value below is one number per task, and the findings (``findings``)
test their mean over tasks.

- ``chosen``: per task and configuration, the LR the search chose on validation
  (``search.best``) and that run's test accuracy; only tasks whose every search has ended
  (``complete_tasks``) count.
- ``primary_values``: per task, P1 (sparse MHA, FC1, FC2 minus LN1, LN2, all at LN1's count),
  P2 (MHA minus LN1 at full counts) and P3 (Spearman's rho, over the five full-count
  components, of plasticity before finetuning against gain over head-only).
- ``task_plasticity``: a task's per-block plasticity before finetuning, measured once and
  stored beside the runs (``plasticity-<hash>.json``).
- ``distance``: head-only and linear-probe accuracy per task: how far it lies from what
  pretraining learned.

Used by notebook 04 (the suite section) and the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vitplast import search, store
from vitplast.components import COMPONENTS


def complete_tasks(state: pd.DataFrame) -> list[str]:
    """The tasks of a ``search.state`` table whose every setting has ended (nothing asked)."""
    done = state.assign(ended=state["next"].map(len) == 0).groupby("task", sort=False)["ended"]
    return [task for task, ended in done.all().items() if ended]


def chosen(study: dict, root: str | Path) -> pd.DataFrame:
    """``search.state`` of ``study`` on its complete tasks only: per task and configuration
    the chosen ``lr`` (``best``), ``bracketed``, and that run's ``val_acc`` and ``test_acc``
    (in %) and ``trainable`` count."""
    state = search.state(study, root)
    return state[state["task"].isin(complete_tasks(state))].rename(
        columns={"best": "lr"}).reset_index(drop=True)


def task_plasticity(root: str | Path, task: str, n_pairs: int = 256,
                    protocol: str = "embedding") -> pd.DataFrame:
    """Per block and component: the embedded model's plasticity on ``task`` before
    finetuning (``n_pairs`` pairs of a Fashion-MNIST image and a task image, ``protocol``),
    measured once and stored in ``root/plasticity-<hash of the settings>.json``.

    Columns: ``task``, ``protocol``, ``layer``, ``component``, ``plasticity``, ``ci95``.
    """
    from vitplast import empirical, models, plasticity

    settings = dict(task=task, n_pairs=n_pairs, protocol=protocol)
    path = Path(root) / f"plasticity-{store.config_hash(settings)}.json"
    saved = store.read_json(path)
    if saved is None:
        rates = empirical.measure_tasks(models.EMBEDDED_NAME, [task], protocols=[protocol],
                                        n_pairs=n_pairs, progress=False)
        per_layer = plasticity.summarize(rates)
        per_layer = per_layer.assign(component=per_layer["component"].astype(str))
        cols = ["layer", "component", "plasticity", "ci95"]
        saved = dict(settings, rows=per_layer[cols].to_dict("records"))
        store.write_json(path, saved)
    return pd.DataFrame(saved["rows"]).assign(task=task, protocol=protocol)


def component_plasticity(root: str | Path, tasks, n_pairs: int = 256,
                         protocol: str = "embedding") -> pd.DataFrame:
    """Per task and component: plasticity before finetuning, the mean over blocks (as the
    paper's Fig. 2 summarises a component). Columns: ``task``, ``component``,
    ``plasticity``."""
    per_layer = pd.concat([task_plasticity(root, t, n_pairs, protocol) for t in tasks])
    return per_layer.groupby(["task", "component"], as_index=False, sort=False)[
        "plasticity"].mean()


def _group_mean(wide: pd.DataFrame, configs) -> pd.Series:
    return wide[list(configs)].mean(axis=1)


def primary_values(picked: pd.DataFrame, plasticity: pd.DataFrame, primaries) -> pd.DataFrame:
    """One row per task: each primary's value on it (columns named by the primaries' ids).

    A difference primary (``a`` and ``b`` configuration groups) is the mean test accuracy of
    group ``a`` minus that of group ``b``; the correlation primary (``b == ["head"]``) is
    Spearman's rho, over the configurations of ``a``, of their plasticity (``plasticity``:
    ``component_plasticity``) against their gain over head-only.
    """
    from scipy import stats

    wide = picked.pivot(index="task", columns="config", values="test_acc")
    out = pd.DataFrame(index=wide.index)
    for p in primaries:
        if p["b"] == ["head"]:
            gain = wide[p["a"]].sub(wide["head"], axis=0)
            plastic = plasticity.pivot(index="task", columns="component", values="plasticity")
            out[p["id"]] = [stats.spearmanr(plastic.loc[t, p["a"]], gain.loc[t]).statistic
                            if t in plastic.index else np.nan for t in wide.index]
        else:
            out[p["id"]] = _group_mean(wide, p["a"]) - _group_mean(wide, p["b"])
    return out.reset_index()


def distance(picked: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per task: head-only test accuracy (from ``chosen``), and the linear probe's
    (``probes.linear_probes``) when given: how much of the task the frozen features already
    solve. Columns: ``task``, ``head_acc``, and ``probe_acc``."""
    head = picked[picked["config"] == "head"].set_index("task")["test_acc"].rename("head_acc")
    out = head.to_frame()
    if probes is not None:
        out = out.join(probes.set_index("task")["test_acc"].rename("probe_acc"))
    return out.reset_index()


#: The five components, in the paper's order, as configuration names.
FULL_COUNT = tuple(COMPONENTS)

__all__ = ["FULL_COUNT", "chosen", "complete_tasks", "component_plasticity", "distance",
           "primary_values", "task_plasticity"]
