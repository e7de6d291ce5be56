"""The confound study's plasticity: per block before finetuning, per component after it.

Paper: Takeaway 3 read within a component (does a block's plasticity go with the accuracy of
finetuning that block alone, once depth is held fixed?), under the declared protocol
(``PROTOCOL``) and the other one beside it (``OTHER_PROTOCOL``), and objection 4 (does finetuning a
component change its plasticity?). Each measurement is made once and stored beside the study's
records (``layers-*.json``, ``after-*.json``: ``cached.COMPANIONS``);
``vitplast.experiments.confounds`` re-exports every name here and builds notebook 05's tables from
them.

The per-block test reads which block and component an accuracy column is from the variants'
fields (``vitplast.experiments.confound_variants``), never from its name.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from vitplast import cached, models
from vitplast.experiments import lr_selection, store
from vitplast.experiments.confound_variants import names_of
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
    from vitplast.measure import empirical

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
    from vitplast.experiments import runs, sweep
    from vitplast.measure import empirical, plasticity

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
    from vitplast.experiments import runs

    after = study["after"]
    pool = [r for r in baselines
            if r["task"] in after["tasks"] and r["config"] in after["configs"]]
    rows = main[main["run"].isin({runs.run_hash(r) for r in pool})] if len(main) else main
    if not len(rows):
        return []
    chosen = {(c.task, c.config, c.lr) for c in lr_selection.select_lr(rows).itertuples()}
    return [r for r in pool if (r["task"], r["config"], r["lr"]) in chosen
            and r["seed"] == after["seed"]]


def layer_accuracy(acc: pd.DataFrame, layers: pd.DataFrame, fields: pd.DataFrame
                   ) -> pd.DataFrame:
    """Per protocol, task, component and block: the block's plasticity before finetuning
    (``layer_plasticity``; a table without ``protocol`` is read as ``PROTOCOL``'s) and the test
    accuracy (%) of finetuning that block's component alone (``accuracy``'s columns of the
    ``block`` variants, their ``component`` and ``block`` read from ``fields``:
    ``confound_variants.variant_fields``), where both exist."""
    if "protocol" not in layers:
        layers = layers.assign(protocol=PROTOCOL)
    blocks = fields.loc[names_of(fields, family="block"), ["component", "block"]]
    long = acc.reset_index().melt(id_vars="task", var_name="variant", value_name="test_acc")
    long = long.merge(blocks.rename(columns={"block": "layer"}), left_on="variant",
                      right_index=True).dropna(subset=["test_acc"])
    return long.assign(layer=long["layer"].astype(int)).merge(
        layers, on=["task", "component", "layer"])[["protocol", "task", "component", "layer",
                                                   "plasticity", "test_acc"]]


def layer_correlations(acc: pd.DataFrame, layers: pd.DataFrame, fields: pd.DataFrame
                       ) -> pd.DataFrame:
    """Per protocol, task and component: Spearman's rho, over the blocks, between a block's
    plasticity and the test accuracy of finetuning that block's component alone
    (``layer_accuracy``, ``fields`` as there).
    Count is fixed within a component, so rho > 0 says plasticity, not size, goes with gain;
    unless plasticity itself follows depth, which may matter on its own: so also rho between
    earliness (minus the block index) and accuracy, and between earliness and plasticity.

    Only (task, component) pairs with every block finetuned are kept. Columns: ``protocol``,
    ``task``, ``component``, ``spearman`` (plasticity, accuracy), ``spearman_depth``
    (earliness, accuracy), ``plasticity_depth`` (earliness, plasticity), ``partial``
    (plasticity, accuracy given earliness: ``partial_correlation``; NaN where plasticity or
    accuracy is monotone in depth), ``n_blocks``.
    """
    from scipy import stats

    def rho(a, b) -> float:
        return float(stats.spearmanr(a, b).statistic)

    rows = []
    depth = layers["layer"].nunique()
    for (protocol, task, comp), g in layer_accuracy(acc, layers, fields).groupby(
            ["protocol", "task", "component"], sort=False):
        if len(g) == depth >= 3:
            early = -g["layer"]
            xy, yz, xz = (rho(g["plasticity"], g["test_acc"]), rho(early, g["test_acc"]),
                          rho(early, g["plasticity"]))
            rows.append(dict(protocol=protocol, task=task, component=comp, n_blocks=len(g),
                             spearman=xy, spearman_depth=yz, plasticity_depth=xz,
                             partial=partial_correlation(xy, xz, yz)))
    return pd.DataFrame(rows, columns=["protocol", "task", "component", "spearman",
                                       "spearman_depth", "plasticity_depth", "partial",
                                       "n_blocks"])


def partial_correlation(xy: float, xz: float, yz: float) -> float:
    """The correlation of x and y given z, from the three pairwise ones (here Spearman's: a
    partial rank correlation): (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)). NaN when x
    or y is a monotone function of z (nothing of it is left once z is held fixed)."""
    denom = (1 - xz ** 2) * (1 - yz ** 2)
    return float((xy - xz * yz) / math.sqrt(denom)) if denom > 1e-12 else math.nan

