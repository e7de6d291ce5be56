"""The confound study's plasticity: per block before finetuning, per component after it.

Paper: Takeaway 3 read within a component (does a block's plasticity go with the accuracy of
finetuning that block alone, once depth is held fixed?), under the declared protocol
(``PROTOCOL``) and the other one beside it (``OTHER_PROTOCOL``), and objection 4 (does finetuning a
component change its plasticity?). Each measurement is made once and stored beside the study's
records (``layers-*.json``, ``after-*.json``: ``cached.COMPANIONS``). The per-block
correlations over them are notebook 05's tables (``vitplast.report.confound_tables``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vitplast import cached
from vitplast.experiments import lr_selection, runner, runs, store
from vitplast.experiments.spec_types import Confound
from vitplast.measure import empirical, plasticity
from vitplast.train import finetune

#: The protocol the study declared for its per-block test (its primary question), and the other
#: one, whose rows stand beside it in the findings' "sensitivity" family (computed, not typed).
PROTOCOL, OTHER_PROTOCOL = "hidden", "embedding"


def layer_plasticity(root: str | Path, tasks, n_pairs: int = 256,
                     protocols=(PROTOCOL, OTHER_PROTOCOL)) -> pd.DataFrame:
    """Per protocol, task, block and component: the embedded model's plasticity before
    finetuning (``n_pairs`` pairs of each task), measured once per protocol and stored in
    ``root/layers-<hash of the settings>.json`` (a resumed study reads it).

    Columns: ``protocol``, ``task``, ``layer``, ``component``, ``plasticity``, ``ci95``.
    """
    frames = []
    for protocol in protocols:
        settings = dict(tasks=list(tasks), n_pairs=n_pairs, protocol=protocol)
        saved = store.Store(root).companion(
            f"layers-{cached.config_hash(settings)}.json",
            compute=lambda settings=settings: dict(settings, rows=empirical.embedded_layers(
                tasks, protocol=settings["protocol"], n_pairs=n_pairs).to_dict("records")))
        frames.append(pd.DataFrame(saved["rows"]).assign(protocol=protocol))
    return pd.concat(frames, ignore_index=True)[["protocol", "task", "layer", "component",
                                                 "plasticity", "ci95"]]


#: The columns of ``plasticity_after``.
AFTER_COLUMNS = ["task", "variant", "component", "before", "after", "ratio"]


def plasticity_after(run: dict, root: str | Path, n_pairs: int = 128, compute: bool = True
                     ) -> pd.DataFrame:
    """Does finetuning a component change its plasticity? The run is trained again (runs are
    seeded: the same weights up to float summation order) and every component's plasticity
    (hidden protocol, mean over blocks, ``n_pairs`` pairs of the run's task) is measured before
    and after; stored in ``root/after-<run hash>.json`` (measured once; with ``compute``
    False, only read: an empty table when it is not there).

    Columns: ``task``, ``variant`` (the run's configuration), ``component``, ``before``,
    ``after``, ``ratio`` (after / before).
    """
    def measure() -> dict:
        model, task, kwargs = runner.build(run)
        pairs = empirical.task_pairs(run["task"], empirical.SOURCE, n_pairs=n_pairs, model=model)

        def per_component():
            rates = plasticity.measure(model, pairs, protocol="hidden", progress=False)
            ranked = plasticity.ranking(rates)
            return dict(zip(ranked["component"].astype(str), ranked["plasticity"]))

        before = per_component()
        finetune.train(model, task.train, task.val, task.test, progress=False, **kwargs)
        return dict(run=run, n_pairs=n_pairs, before=before, after=per_component())

    saved = store.Store(root).companion(f"after-{runs.run_hash(run)}.json",
                                        compute=measure if compute else None)
    if saved is None:
        return pd.DataFrame(columns=AFTER_COLUMNS)
    return pd.DataFrame([dict(task=run["task"], variant=str(run["config"]), component=c,
                              before=b, after=saved["after"][c], ratio=saved["after"][c] / b)
                         for c, b in saved["before"].items()])


def after_runs(main: pd.DataFrame, spec: Confound, baselines: list[dict]) -> list[dict]:
    """The runs ``plasticity_after`` trains again: per task and configuration of the study's
    ``after`` setting, its baseline run (of ``baselines``: ``ConfoundStudy.baseline_runs``) at
    the LR chosen on validation over all seeds in ``main`` (``results.records_table`` of the
    baselines' store), with seed ``after.seed``."""
    after = spec.after
    pool = [r for r in baselines if r["task"] in after.tasks and r["config"] in after.configs]
    rows = main[main["run"].isin({runs.run_hash(r) for r in pool})] if len(main) else main
    if not len(rows):
        return []
    chosen = {(c.task, c.config, c.lr) for c in lr_selection.select_lr(rows).itertuples()}
    return [r for r in pool if (r["task"], r["config"], r["lr"]) in chosen
            and r["seed"] == after.seed]


