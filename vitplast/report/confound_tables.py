"""The confound study's tables (notebook 05): accuracy per task and variant, the matched
families, the per-block correlations of plasticity with accuracy, and gradient norms, read
from its records table and the plasticity stored beside it.

Paper: objections 3 and 4 (docs/objections.md). The variants, their runs and what is measured
before finetuning are ``vitplast.experiments.confounds``'s; every table behind notebook 05's
findings comes as one ``ConfoundTables`` (``tables``), and the findings rows over them are
``vitplast.report.confound_findings``'s. The per-block test reads which block and component an
accuracy column is from the variants' fields (``confound_variants``), never from its name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from torch import nn

from vitplast.experiments.confound_plasticity import PROTOCOL
from vitplast.experiments.confound_variants import (
    C_RTOL,
    all_variants,
    name_of,
    names_of,
    variant_fields,
)
from vitplast.experiments.confounds import variant_counts_table
from vitplast.experiments.lr_selection import lr_ties, tie_alternatives
from vitplast.experiments.results import history
from vitplast.measure.components import LINEARS, NORMS
from vitplast.report.finetuning_tables import (
    component_grad_norms,
    dynamics,
    grad_norms_by_task,
    main_table,
)
from vitplast.train.configurations import PAPER_CONFIGS


def variant_table(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per task x variant: the LR chosen on ``on`` and test accuracy mean and std over seeds
    (in %), from ``confound_variants.with_variant`` rows (``main_table`` per variant)."""
    table = main_table(_outcomes(df), on=on)
    return table[table["task"] != "average"].reset_index(drop=True)


def _outcomes(df: pd.DataFrame) -> pd.DataFrame:
    """Only the columns that name a run's setting by its variant, and its outcome: so that LR
    selection groups by (task, variant) and nothing else."""
    return df[[c for c in ("task", "variant", "lr", "seed", "status", "run", "test_acc",
                           "test_loss", "best_val_acc", "best_val_loss") if c in df.columns]]


def accuracy(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """``variant_table`` as tasks x variants: seed-mean test accuracy (%) at the LR chosen on
    ``on``; NaN where a variant lacks a task. The task is the unit of every finding."""
    table = variant_table(df, on)
    return table.pivot_table(index="task", columns="variant", values="test_acc_mean")


#: Matched families (notebook 05's first figure): label -> (the fields its variants share,
#: the components it compares: one variant each, ``name_of``).
MATCHED_FAMILIES = {"full count": (dict(family="plain"), LINEARS + NORMS),
            "LN1's count (sparse)": (dict(family="sparse"), LINEARS),
            "rank-1 LoRA, one count": (dict(family="lora", rank=1), LINEARS),
            "bias only, one count": (dict(family="bias"), LINEARS)}


def matched_accuracy(acc: pd.DataFrame, fields: pd.DataFrame) -> pd.DataFrame:
    """``accuracy`` of the matched families (``MATCHED_FAMILIES``, their variants found in
    ``fields``: ``variant_fields``) as a long table: ``task``, ``family`` (its label),
    ``component``, ``test_acc`` (%), for the variants that have runs."""
    rows = [dict(task=task, family=family, component=comp, test_acc=acc.at[task, name])
            for family, (want, comps) in MATCHED_FAMILIES.items() for comp in comps
            for name in [name_of(fields, **want, component=comp)] if name in acc
            for task in acc.index if pd.notna(acc.at[task, name])]
    return pd.DataFrame(rows, columns=["task", "family", "component", "test_acc"])


@dataclass(frozen=True)
class ConfoundTables:
    """Every table behind notebook 05's findings (``tables``), the task the unit.

    Attributes:
        fields: each variant's fields by name (``variant_fields``: of the runs and of the
            catalogue ``all_variants``); every findings row finds its variants there.
        acc: ``accuracy`` (tasks x variants, seed-mean test accuracy in %, the plain SGD
            baselines included).
        counts: backbone entries each variant trains (``variant_counts_table``).
        corr: ``layer_correlations`` (per protocol x task x component).
        grads: ``grad_norms_by_task`` of the plain configurations.
        matched: ``matched_accuracy`` (the matched families, long).
        count_matrix: ``counts`` of the matched families (family x component).
        layers: ``layer_accuracy`` (per-block plasticity and accuracy).
        grad_norms: ``component_grad_norms`` of every run.
        rescale: ``rescale_pairs`` (each preserved rescale against its control); None: no rows.
        ties: ``lr_ties`` by (task, variant); None: not computed.
        alternatives: the LR-dependent tables again, once per tied choice broken the other way
            (``tie_alternatives``; empty: none, or not computed).
    """

    fields: pd.DataFrame
    acc: pd.DataFrame
    counts: dict
    corr: pd.DataFrame
    grads: pd.DataFrame
    matched: pd.DataFrame | None = None
    count_matrix: pd.DataFrame | None = None
    layers: pd.DataFrame | None = None
    grad_norms: pd.DataFrame | None = None
    rescale: pd.DataFrame | None = None
    ties: pd.DataFrame | None = None
    alternatives: tuple[ConfoundTables, ...] = ()


def controls(t: ConfoundTables, components=("MHA", "LN1")) -> pd.DataFrame:
    """Section 4 of notebook 05 in the rows its findings compare: test accuracy (%, seed-mean)
    per task of ``components`` finetuned plainly, from the random ``init`` checkpoint and under
    AdamW (found by their fields in ``t.fields``; ``t``: ``tables``). Every variant and task
    is one call away: ``t.acc.T``."""
    fields, acc = t.fields, t.acc
    names = [name_of(fields, family="plain", component=c, **recipe)
             for recipe in ({}, dict(checkpoint="init"), dict(optimizer="adamw"))
             for c in components]
    return acc[[n for n in names if n in acc]].T


def tables(res, model: nn.Module) -> ConfoundTables:
    """Every table behind notebook 05's findings (``ConfoundTables``), from
    ``ConfoundStudy.load``'s ``res`` (``res.extras``: its ``scales``, ``layers`` and
    ``baselines_root``) and the embedded ``model`` (its variants' counts)."""
    extras = res.extras
    curves = history(res.root, extras["baselines_root"])
    counts = variant_counts_table(model, extras["scales"]["scales"])
    fields = variant_fields(res.runs, all_variants(model, extras["scales"]["scales"]))
    rescale = rescale_pairs(res.runs)
    # ties are found where LRs are chosen, by (task, variant); each alternative moves one
    alternatives = tuple(ConfoundTables(**_selected_tables(res.runs.assign(best_val_acc=alt[
        "best_val_acc"]), extras["layers"], curves, fields), counts=counts, rescale=rescale)
        for alt in tie_alternatives(_outcomes(res.runs)))
    return ConfoundTables(**_selected_tables(res.runs, extras["layers"], curves, fields),
                          counts=counts, rescale=rescale, count_matrix=pd.DataFrame({family: {
                              c: counts[name_of(fields, **want, component=c)] for c in comps}
                              for family, (want, comps) in MATCHED_FAMILIES.items()}).T.astype(
                              "Int64"), ties=lr_ties(_outcomes(res.runs)),
                          alternatives=alternatives)


def _selected_tables(runs: pd.DataFrame, layers: pd.DataFrame, curves: pd.DataFrame,
                     fields: pd.DataFrame) -> dict:
    """The tables of ``tables`` that depend on the LR choices: ``acc``, ``matched``,
    ``layers``, ``corr``, ``grad_norms``, ``grads``; and ``fields``, which the findings read
    with them."""
    acc = accuracy(runs)
    norms = component_grad_norms(dynamics(runs, curves))
    plain = norms[norms["variant"].isin(names_of(fields, family="plain",
                                                 component=list(PAPER_CONFIGS)))]
    return dict(fields=fields, acc=acc, matched=matched_accuracy(acc, fields),
                layers=layer_accuracy(acc, layers, fields),
                corr=layer_correlations(acc, layers, fields), grad_norms=norms,
                grads=grad_norms_by_task(plain))


def layer_accuracy(acc: pd.DataFrame, layers: pd.DataFrame, fields: pd.DataFrame
                   ) -> pd.DataFrame:
    """Per protocol, task, component and block: the block's plasticity before finetuning
    (``confound_plasticity.layer_plasticity``; a table without ``protocol`` is read as
    ``PROTOCOL``'s) and the test accuracy (%) of finetuning that block's component alone
    (``accuracy``'s columns of the ``block`` variants, their ``component`` and ``block`` read
    from ``fields``: ``confound_variants.variant_fields``), where both exist."""
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


def rescale_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Each preserved gamma rescale against its lr/c^2 control, run by run: the two runs of one
    (task, LR, seed) in ``with_variant`` results ``df``. Without gradient clipping they are the
    same run in exact arithmetic (``vitplast.train.ablations``); with it, they need not be.

    A control is matched by fields, not names: the same ``component``, ``c`` within a relative
    ``C_RTOL`` and the same clipping (``clip_grad_norm`` 0: off).

    Returns:
        Per preserved variant (by name): ``variant``, ``clipping`` (``"on"``, ``"off"``),
        ``pairs``, ``identical`` (pairs with the same status and the same test accuracy) and
        ``max_diff`` (largest |difference| of test accuracy in points over pairs both ok).
    """
    df = df.assign(clipping=df["clip_grad_norm"].eq(0.0).map({True: "off", False: "on"}))
    controls = df[df["family"].eq("lr/c^2")]
    rows = []
    for variant, own in sorted(df[df["family"].eq("rescale") & df["preserve"].eq(True)]
                               .groupby("variant")):
        first = own.iloc[0]
        control = controls[controls["component"].eq(first["component"])
                           & controls["clipping"].eq(first["clipping"])
                           & np.isclose(controls["c"], first["c"], rtol=C_RTOL, atol=0)]
        runs = [d.set_index(["task", "lr", "seed"])[["status", "test_acc"]] for d in (own, control)]
        both = runs[0].merge(runs[1], left_index=True, right_index=True,
                             suffixes=("", "_control"))
        same = both["status"].eq(both["status_control"]) & (
            both["test_acc"].eq(both["test_acc_control"])
            | (both["test_acc"].isna() & both["test_acc_control"].isna()))
        diff = 100 * (both["test_acc"] - both["test_acc_control"]).abs()
        rows.append(dict(variant=variant, clipping=first["clipping"], pairs=len(both),
                         identical=int(same.sum()), max_diff=float(diff.max())))
    return pd.DataFrame(rows, columns=["variant", "clipping", "pairs", "identical", "max_diff"])


__all__ = ["ConfoundTables", "MATCHED_FAMILIES", "accuracy", "controls", "layer_accuracy",
           "layer_correlations", "matched_accuracy", "partial_correlation", "rescale_pairs",
           "tables", "variant_table"]
