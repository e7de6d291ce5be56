"""The confound study's plasticity: per block before finetuning, per component after it.

Paper: Takeaway 3 read within a component (does a block's plasticity go with the accuracy of
finetuning that block alone, once depth is held fixed?) and objection 4 (does finetuning a
component change its plasticity?). Each measurement is made once and stored beside the study's
records (``layers-*.json``, ``after-*.json``: ``store.COMPANIONS``); ``vitplast.confounds``
re-exports every name here and builds notebook 05's tables from them.

The per-block test reads which block and component an accuracy column is from the variants'
fields (``vitplast.confound_variants``), never from its name.

Used by ``vitplast.confounds``, ``vitplast.studies.load_confounds`` and notebook 05.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from vitplast import finetune, models, store
from vitplast.experiments.confound_variants import names_of


def layer_plasticity(root: str | Path, tasks, n_pairs: int = 256) -> pd.DataFrame:
    """Per task, block and component: the embedded model's plasticity before finetuning
    (hidden protocol, ``n_pairs`` pairs of each task), measured once and stored in
    ``root/layers-<hash of the settings>.json`` (a resumed study reads it).

    Columns: ``task``, ``layer``, ``component``, ``plasticity``, ``ci95``.
    """
    from vitplast import empirical

    settings = dict(tasks=list(tasks), n_pairs=n_pairs, protocol="hidden")
    saved = store.Store(root).companion(
        f"layers-{store.config_hash(settings)}.json",
        compute=lambda: dict(settings, rows=empirical.embedded_layers(
            tasks, n_pairs=n_pairs).to_dict("records")))
    return pd.DataFrame(saved["rows"])


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
    from vitplast import empirical, plasticity, runs, sweep

    def measure() -> dict:
        model, task, kwargs = sweep.build(run, models.pick_device("cpu"))
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


def after_runs(main: pd.DataFrame, study: dict, baselines: list[dict]) -> list[dict]:
    """The runs ``plasticity_after`` trains again: per task and configuration of the study's
    ``after`` setting, its baseline run (of ``baselines``: ``studies.confound_baselines``) at
    the LR chosen on validation over all seeds in ``main`` (``results.results`` of the
    baselines' store), with seed ``after["seed"]``."""
    from vitplast import results, runs

    after = study["after"]
    pool = [r for r in baselines
            if r["task"] in after["tasks"] and r["config"] in after["configs"]]
    rows = main[main["run"].isin({runs.run_hash(r) for r in pool})] if len(main) else main
    if not len(rows):
        return []
    chosen = {(c.task, c.config, c.lr) for c in results.select_lr(rows).itertuples()}
    return [r for r in pool if (r["task"], r["config"], r["lr"]) in chosen
            and r["seed"] == after["seed"]]


def layer_accuracy(acc: pd.DataFrame, layers: pd.DataFrame, fields: pd.DataFrame
                   ) -> pd.DataFrame:
    """Per task, component and block: the block's plasticity before finetuning
    (``layer_plasticity``) and the test accuracy (%) of finetuning that block's component
    alone (``accuracy``'s columns of the ``block`` variants, their ``component`` and
    ``block`` read from ``fields``: ``confound_variants.variant_fields``), where both exist."""
    blocks = fields.loc[names_of(fields, family="block"), ["component", "block"]]
    long = acc.reset_index().melt(id_vars="task", var_name="variant", value_name="test_acc")
    long = long.merge(blocks.rename(columns={"block": "layer"}), left_on="variant",
                      right_index=True).dropna(subset=["test_acc"])
    return long.assign(layer=long["layer"].astype(int)).merge(
        layers, on=["task", "component", "layer"])[["task", "component", "layer", "plasticity",
                                                   "test_acc"]]


def layer_correlations(acc: pd.DataFrame, layers: pd.DataFrame, fields: pd.DataFrame
                       ) -> pd.DataFrame:
    """Per task and component: Spearman's rho, over the blocks, between a block's plasticity
    and the test accuracy of finetuning that block's component alone (``layer_accuracy``,
    ``fields`` as there).
    Count is fixed within a component, so rho > 0 says plasticity, not size, goes with gain;
    unless plasticity itself follows depth, which may matter on its own: so also rho between
    earliness (minus the block index) and accuracy, and between earliness and plasticity.

    Only (task, component) pairs with every block finetuned are kept. Columns: ``task``,
    ``component``, ``spearman`` (plasticity, accuracy), ``spearman_depth`` (earliness,
    accuracy), ``plasticity_depth`` (earliness, plasticity), ``partial`` (plasticity,
    accuracy given earliness: ``partial_correlation``; NaN where plasticity or accuracy is
    monotone in depth), ``n_blocks``.
    """
    from scipy import stats

    def rho(a, b) -> float:
        return float(stats.spearmanr(a, b).statistic)

    rows = []
    depth = layers["layer"].nunique()
    for (task, comp), g in layer_accuracy(acc, layers, fields).groupby(["task", "component"]):
        if len(g) == depth >= 3:
            early = -g["layer"]
            xy, yz, xz = (rho(g["plasticity"], g["test_acc"]), rho(early, g["test_acc"]),
                          rho(early, g["plasticity"]))
            rows.append(dict(task=task, component=comp, n_blocks=len(g), spearman=xy,
                             spearman_depth=yz, plasticity_depth=xz,
                             partial=partial_correlation(xy, xz, yz)))
    return pd.DataFrame(rows, columns=["task", "component", "spearman", "spearman_depth",
                                       "plasticity_depth", "partial", "n_blocks"])


def partial_correlation(xy: float, xz: float, yz: float) -> float:
    """The correlation of x and y given z, from the three pairwise ones (here Spearman's: a
    partial rank correlation): (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)). NaN when x
    or y is a monotone function of z (nothing of it is left once z is held fixed)."""
    denom = (1 - xz ** 2) * (1 - yz ** 2)
    return float((xy - xz * yz) / math.sqrt(denom)) if denom > 1e-12 else math.nan

