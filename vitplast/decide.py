"""The suite study's tables: what each task chose, the primaries' values per task, and how far
each task lies from pretraining.

Paper: Table 1 and Takeaway 3, tested on the task suite (``vitplast.suite``) by the study
``studies.get("suite")``, whose three primary questions were declared before its runs. The
unit is the task: every value below is one number per task, and the findings (``findings``)
test their mean over tasks.

- ``chosen``: per task and configuration, the LR the search chose on validation
  (``search.best``) and that run's test accuracy; only tasks whose every search has ended
  (``complete_tasks``) count.
- ``findings``: the study's three declared primaries as findings rows: P1 (sparse MHA, FC1,
  FC2 minus LN1, LN2, all at LN1's count) and P2 (MHA minus LN1 at full counts) from
  ``accuracy``; P3 (Spearman's rho, over the five full-count components, of plasticity before
  finetuning against gain over head-only) from ``spearman_plasticity_gain``.
- ``task_plasticity``: a task's per-block plasticity before finetuning, measured once and
  stored beside the runs (``plasticity-<hash>.json``).
- ``task_probe``: a task's linear probe on the frozen embedded model, computed once and stored
  beside the runs (``probe-<hash>.json``).
- ``distance``: head-only and linear-probe accuracy per task: how far it lies from what
  pretraining learned.

Used by notebook 04 (the suite section) and the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vitplast import search, store
from vitplast.components import COMPONENTS

if TYPE_CHECKING:  # for annotations only
    from vitplast.studies import Study


def complete_tasks(state: pd.DataFrame) -> list[str]:
    """The tasks of a ``search.state`` table whose every setting has ended (nothing asked)."""
    done = state.assign(ended=state["next"].map(len) == 0).groupby("task", sort=False)["ended"]
    return [task for task, ended in done.all().items() if ended]


def chosen(study: Study, root: str | Path) -> pd.DataFrame:
    """``search.state`` of a searched ``study`` on its complete tasks only: per task and
    configuration the chosen ``lr`` (``best``), ``bracketed``, and that run's ``val_acc`` and
    ``test_acc`` (in %) and ``trainable`` count."""
    state = search.state(study.spec, root)
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
    saved = store.read_companion(path)
    if saved is None:
        rates = empirical.measure_tasks(models.EMBEDDED_NAME, [task], protocols=[protocol],
                                        n_pairs=n_pairs, progress=False)
        per_layer = plasticity.summarize(rates)
        per_layer = per_layer.assign(component=per_layer["component"].astype(str))
        cols = ["layer", "component", "plasticity", "ci95"]
        saved = dict(settings, rows=per_layer[cols].to_dict("records"))
        store.write_json(path, saved)
    return pd.DataFrame(saved["rows"]).assign(task=task, protocol=protocol)


def task_probe(root: str | Path, task: str, *, compute: bool = True) -> dict | None:
    """The embedded model's linear probe on ``task`` (``probes.linear_probe``: ``train_acc``,
    ``val_acc``, ``test_acc`` in %, ``n_train``, ``n_features``), computed once (about 40 s on
    a CPU core) and stored in ``root/probe-<hash of the settings>.json``; ``None`` when not
    stored and ``compute`` is False."""
    from vitplast import models, probes

    settings = dict(task=task, model=models.EMBEDDED_NAME, probe="logistic, C=1, L-BFGS")
    path = Path(root) / f"probe-{store.config_hash(settings)}.json"
    saved = store.read_companion(path)
    if saved is None and compute:
        row = probes.linear_probes(models.EMBEDDED_NAME, [task]).iloc[0].to_dict()
        saved = dict(settings, **{k: v for k, v in row.items() if k != "task"})
        store.write_json(path, saved)
    return saved


def task_probes(root: str | Path, tasks, *, compute: bool = False) -> pd.DataFrame:
    """``task_probe`` of each task that has one stored (or of every task, with ``compute``):
    columns ``task``, ``test_acc`` (%), ``val_acc``, ``train_acc``."""
    rows = [(t, task_probe(root, t, compute=compute)) for t in tasks]
    return pd.DataFrame([dict(task=t, **{k: r[k] for k in ("test_acc", "val_acc", "train_acc")})
                         for t, r in rows if r is not None],
                        columns=["task", "test_acc", "val_acc", "train_acc"])


def component_plasticity(root: str | Path, tasks, n_pairs: int = 256,
                         protocol: str = "embedding") -> pd.DataFrame:
    """Per task and component: plasticity before finetuning, the mean over blocks (as the
    paper's Fig. 2 summarises a component). Columns: ``task``, ``component``,
    ``plasticity``."""
    per_layer = pd.concat([task_plasticity(root, t, n_pairs, protocol) for t in tasks])
    return per_layer.groupby(["task", "component"], as_index=False, sort=False)[
        "plasticity"].mean()


def accuracy(picked: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy (%) as tasks x configurations: what ``verdicts.Primary.values`` reads."""
    return picked.pivot(index="task", columns="config", values="test_acc")


def spearman_plasticity_gain(picked: pd.DataFrame, plasticity: pd.DataFrame,
                             components=tuple(COMPONENTS)) -> pd.Series:
    """Per task: Spearman's rho, over ``components``, between their plasticity before
    finetuning (``component_plasticity``) and their gain over head-only (test points). NaN
    for a task without plasticity. The statistic ``"spearman(plasticity, gain)"`` of the
    suite study's third primary."""
    from scipy import stats

    acc = accuracy(picked)
    gain = acc[list(components)].sub(acc["head"], axis=0)
    plastic = plasticity.pivot(index="task", columns="component", values="plasticity")
    return pd.Series({t: stats.spearmanr(plastic.loc[t, list(components)], gain.loc[t]).statistic
                      if t in plastic.index else np.nan for t in acc.index}, name="rho")


def findings(study: Study, picked: pd.DataFrame, plasticity: pd.DataFrame) -> list[dict]:
    """The study's declared primaries as findings rows (``verdicts.Primary.row``), one value
    per complete task; ``verdicts.table`` tests them with Holm over the primaries."""
    statistics = {"spearman(plasticity, gain)": spearman_plasticity_gain(picked, plasticity)}
    return [p.row(accuracy(picked), statistics) for p in study.primaries]


def distance(picked: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per task: head-only test accuracy (from ``chosen``), and the linear probe's
    (``probes.linear_probes``) when given: how much of the task the frozen features already
    solve. Columns: ``task``, ``head_acc``, and ``probe_acc``."""
    head = picked[picked["config"] == "head"].set_index("task")["test_acc"].rename("head_acc")
    out = head.to_frame()
    if probes is not None:
        out = out.join(probes.set_index("task")["test_acc"].rename("probe_acc"))
    return out.reset_index()


__all__ = ["accuracy", "chosen", "complete_tasks", "component_plasticity",
           "distance", "findings", "spearman_plasticity_gain", "task_plasticity", "task_probe",
           "task_probes"]
