"""Findings of the confound study (notebook 05): plasticity or parameter count?

The table opens with the study's primary questions (``Study.primaries``: Holm over them
only), then exploratory rows (their own Holm family), then descriptive ones; a tied LR choice
broken the other way marks the rows it flips ``fragile`` (``finetuning_findings.with_ties``).
Matched comparisons state the counts they compare. The per-layer test controls for depth:
within a component, the partial rank correlation of a block's plasticity and its accuracy given
the block index; where a component's plasticity (or its accuracy) is monotone in depth nothing is
left to test, that task is left out, and the row says how many were. The rows after the
primaries (which name their variants as declared) find the variants they compare by their
fields (``confound_variants.name_of``: family, component, c, recipe), never by parsing a name.

Paper: Takeaway 3 and objections 3-4 (docs/objections.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from vitplast.experiments.confound_plasticity import OTHER_PROTOCOL, PROTOCOL
from vitplast.experiments.confound_variants import name_of, names_of
from vitplast.measure.components import LINEARS
from vitplast.paper import SOURCES, group_gap, table1_average
from vitplast.report.finetuning_findings import declared_by, grad_rows, with_ties
from vitplast.stats.verdicts import checked, descriptive, mean_test, paired_test, table

if TYPE_CHECKING:  # for annotations only
    from vitplast.report.confound_tables import ConfoundTables

_TASKS = "points, per task (seed-mean)"
#: The per-task statistic of the per-layer test (``finetuning_findings.STATISTICS``).
LAYER_STATISTIC = "partial spearman(plasticity, accuracy | block)"


def _col(acc: pd.DataFrame, variant: str | None) -> pd.Series:
    """A variant's accuracy per task; empty when the study has no run of it yet (or no such
    variant: ``None``)."""
    return acc[variant] if variant in acc else pd.Series(dtype=float)


def _matched(acc: pd.DataFrame, fields: pd.DataFrame, a: dict, b: dict, counts: dict,
             claim: str) -> dict:
    """A paired test over tasks of the variants whose fields are ``a`` - those whose fields are
    ``b`` (``name_of``), stating the counts compared."""
    gap = table1_average(a["component"]) - table1_average(b["component"])
    a, b = name_of(fields, **a), name_of(fields, **b)
    row = paired_test(claim, _col(acc, a), _col(acc, b), expected=1, unit=_TASKS, effect=gap,
                      paper=f"{gap:+.2f} points (Table 1 average) at full counts",
                      sides=(str(a), str(b)))
    return {**row, "counts": f"{counts.get(a, math.nan):,} vs {counts.get(b, math.nan):,}"}


def _of(corr: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """The rows of ``corr`` measured under ``protocol`` (a table without ``protocol`` holds
    the declared ``PROTOCOL``'s)."""
    if "protocol" not in corr:
        return corr if protocol == PROTOCOL else corr.iloc[:0]
    return corr[corr["protocol"] == protocol]


def layer_statistic(corr: pd.DataFrame, protocol: str = PROTOCOL) -> pd.Series:
    """Per task, the mean over components of the partial rho under ``protocol`` (default the
    declared one; ``confound_tables.layer_correlations``'s ``partial``; NaN where a
    component's plasticity or accuracy is monotone in depth, left out)."""
    corr = _of(corr, protocol)
    if "partial" not in corr or not len(corr):
        return pd.Series(dtype=float)
    return corr.groupby("task")["partial"].mean().dropna()


def confounds(t: ConfoundTables, after: pd.DataFrame | None = None, primaries=()
              ) -> pd.DataFrame:
    """Notebook 05's findings table: the task is the unit.

    Args:
        t: ``confound_tables.tables``: its ``fields`` (each variant's fields, by name; every
            row finds its variants there), ``acc`` (tasks x variants, seed-mean test accuracy
            in %, the plain SGD baselines included), ``counts`` (backbone entries per
            variant), ``corr`` (``confound_tables.layer_correlations``), ``grads`` (of the
            plain configurations), ``rescale`` (``confound_tables.rescale_pairs``), ``ties`` and
            ``alternatives`` (the fragile flag; None / empty: not computed).
        after: ``confound_plasticity.plasticity_after`` of the best runs (None or empty: its row
            says "not measured").
        primaries: the study's ``primaries.Primary`` questions (``studies.Study.primaries``).
    """
    return with_ties(lambda tt: _confounds(tt, after, primaries), t)


def _confounds(t: ConfoundTables, after, primaries) -> pd.DataFrame:
    acc, counts, fields = t.acc, t.counts, t.fields
    declared = declared_by(primaries)
    rows = [{**p.row(acc, {LAYER_STATISTIC: layer_statistic(t.corr)}),
             "counts": " vs ".join(f"{sum(counts.get(c, 0) for c in g) / len(g):,.0f}"
                                   for g in (p.a, p.b) if g)} for p in primaries]
    plain = {c: dict(family="plain", component=c) for c in ("MHA", "LN1")}
    sparse = {c: dict(family="sparse", component=c) for c in LINEARS}
    pairs = [(sparse["MHA"], plain["LN1"], "MHA - LN1 at LN1's count (sparse MHA)"),
             (sparse["MHA"], sparse["FC1"], "MHA - FC1 at LN1's count (sparse)"),
             (sparse["FC1"], sparse["FC2"], "FC1 - FC2 at LN1's count (sparse)")]
    pairs += [(dict(want, component=a), dict(want, component=b), f"{a} - {b}, {kind} at one count")
              for kind, want in (("LoRA r1", dict(family="lora", rank=1)), ("bias", dict(
                  family="bias"))) for a, b in zip(LINEARS, LINEARS[1:])]
    rows += [_matched(acc, fields, a, b, counts, claim) for a, b, claim in pairs
             if ((name_of(fields, **a),), (name_of(fields, **b),)) not in declared]
    full, masked = name_of(fields, **plain["MHA"]), name_of(fields, **sparse["MHA"])
    count_effect = paired_test("MHA at its full count - MHA at LN1's count: what the count adds",
                               _col(acc, full), _col(acc, masked), paper="not studied",
                               expected=math.nan, unit=_TASKS,
                               sides=("MHA at its full count", "MHA at LN1's count"))
    rows.append({**count_effect, "counts": f"{counts.get(full, 0):,} vs "
                 f"{counts.get(masked, 0):,}"})
    rows += _signs(primaries, acc)
    rows += _layer_rows(t.corr, counts, fields, declared)
    rows += _layer_rows(t.corr, counts, fields, protocol=OTHER_PROTOCOL)
    rows += [_depth_row(t.corr), _mean_of_row(t.corr)]
    gap = table1_average("MHA") - table1_average("LN1")
    adamw, init = ({c: name_of(fields, **plain[c], **recipe) for c in plain}
                   for recipe in (dict(optimizer="adamw"), dict(checkpoint="init")))
    rows.append(paired_test("MHA - LN1 under AdamW", _col(acc, adamw["MHA"]),
                            _col(acc, adamw["LN1"]), paper=SOURCES["adamw"], expected=1,
                            unit=_TASKS, effect=gap, sides=("MHA", "LN1")))
    rows.append(paired_test("MHA - LN1 finetuned from the random init checkpoint",
                            _col(acc, init["MHA"]), _col(acc, init["LN1"]),
                            paper="not studied (architecture vs pretraining)",
                            expected=math.nan, unit=_TASKS, sides=("MHA", "LN1")))
    rows += _rescale_rows(acc, fields, t.rescale)
    rows += grad_rows(t.grads, SOURCES["grad_norms"])
    own = (after[after["variant"] == after["component"]] if after is not None and len(after)
           else pd.DataFrame(columns=["task", "component", "ratio"]))
    ratios = own.groupby("component")["ratio"].mean()
    rows.append(descriptive(
        f"a component's own plasticity after / before finetuning it (best run per task) "
        f"[{PROTOCOL}]", ", ".join(f"{c} x{r:.2f}" for c, r in ratios.items()) or "none",
        paper="not studied", verdict=f"measured on {own['task'].nunique()} task(s), not "
        "tested" if len(own) else "not measured (no stored measurement)",
        n=own["task"].nunique(),
        unit="mean over tasks"))
    return table(rows)


def _layer_rows(corr: pd.DataFrame, counts: dict, fields: pd.DataFrame, declared=(),
                protocol: str = PROTOCOL) -> list[dict]:
    """Per component, the partial rank correlation of plasticity (under ``protocol``) and
    accuracy over the blocks given the block index (count fixed within a component; stated);
    its mean over components (unless a primary). The task is the unit. Under the declared
    ``PROTOCOL`` the rows are exploratory; under any other they are its "sensitivity" family."""
    rows, source = [], SOURCES["plasticity_gain"] + ": positive"
    family = "exploratory" if protocol == PROTOCOL else "sensitivity"
    for comp, c in _of(corr, protocol).groupby("component"):
        monotone = int((c["plasticity_depth"].abs() > 1 - 1e-9).sum())
        flat = int((c["spearman_depth"].abs() > 1 - 1e-9).sum())
        claim = (f"{comp} of one block: Spearman(plasticity, test accuracy) over the blocks, "
                 f"partial on the block index [{protocol}]")
        per_block = sorted({counts[name] for name in names_of(fields, family="block",
                                                              component=comp) if name in counts})
        if monotone == len(c):
            row = descriptive(claim, "none", paper=source, n=0, unit="rho, per task",
                              verdict=f"plasticity is monotone in depth on all {len(c)} tasks: "
                              "it cannot be told from depth, so there is nothing to test")
        else:
            left = int(c["partial"].isna().sum())
            row = {**mean_test(claim, c.set_index("task")["partial"], paper=source, expected=1,
                               unit=f"partial rho, per task ({left} of {len(c)} tasks left out: "
                               f"plasticity ({monotone}) or accuracy ({flat}) monotone in "
                               "depth)", bounded=True), "family": family}
        rows.append({**row, "counts": " vs ".join(f"{n:,}" for n in per_block) + " per block"})
    if protocol != PROTOCOL or LAYER_STATISTIC not in declared:
        rows.append({**mean_test(f"one block at a time, mean over components: Spearman("
                                 f"plasticity, test accuracy) over the blocks, partial on the "
                                 f"block index [{protocol}]", layer_statistic(corr, protocol),
                                 paper=source, expected=1, unit="partial rho, per task",
                                 bounded=True),
                     "family": family})
    return rows


def _mean_of_row(corr: pd.DataFrame) -> dict:
    """Which components the mean over components (``layer_statistic``) averages on each task:
    a component whose plasticity or accuracy is monotone in depth is left out there, so the
    "mean over components" may be one component's value."""
    corr = _of(corr, PROTOCOL)
    if "partial" not in corr or not len(corr):
        return descriptive("components the block mean averages, per task", "none", n=0,
                           paper="not studied", unit="", verdict="nothing measured yet")
    kept = corr.dropna(subset=["partial"]).groupby("task")["component"].agg(
        lambda c: ", ".join(sorted(map(str, c))))
    tasks = sorted(set(corr["task"]))
    alone = kept[~kept.str.contains(",")]
    common = alone.mode().iloc[0] if len(alone) else ""
    k = int((alone == common).sum()) if common else 0
    return descriptive(
        f"components the block mean averages, per task [{PROTOCOL}]",
        "; ".join(f"{t}: {kept.get(t, 'none')}" for t in tasks), paper="not studied",
        n=len(tasks), unit="(components kept)",
        verdict=(f"the 'mean over components' is {common} alone on {k} of {len(tasks)} tasks "
                 "(the others are monotone in depth there, left out)" if k else
                 "more than one component on every task"))


def _depth_row(corr: pd.DataFrame) -> dict:
    """Earliness (minus the block index) against accuracy over the blocks, mean over
    components, per task: the trend the per-block figure shows, with its CI."""
    corr = _of(corr, PROTOCOL)
    depth = (corr.groupby("task")["spearman_depth"].mean() if "spearman_depth" in corr
             else pd.Series(dtype=float))
    return mean_test("one block at a time, mean over components: Spearman(earlier block, "
                     "test accuracy) over the blocks", depth, expected=math.nan,
                     paper="not studied (depth, which plasticity may follow)",
                     unit="rho, per task", bounded=True)


def _signs(primaries, acc: pd.DataFrame) -> list[dict]:
    """Each declared difference of configurations at matched counts beside the paper's gap at
    full counts (Table 1 average of the same components): the same sign, or reversed. Not a
    test (the primaries' rows test it); the paper has no matched-count claim to agree with."""
    rows = []
    for p in (p for p in primaries if not p.statistic):
        values = p.values(acc)
        full = group_gap(*([c.removesuffix(" sparse") for c in g] for g in (p.a, p.b)))
        same = (values.mean() > 0) == (full > 0)
        rows.append(descriptive(
            f"sign of ({p.claim}) against the paper's gap at full counts",
            f"{values.mean():+.3g} against {full:+.3g}" if len(values) else "not measured",
            n=len(values), unit="points, mean over tasks, against the paper's",
            paper=f"not studied at matched counts (Table 1 average, full counts: {full:+.2f})",
            verdict="no task holds both groups in this store" if not len(values) else
            "the same sign as the paper's gap at full counts" if same else
            "reversed: the other sign from the paper's gap at full counts"))
    return rows


def _rescale_rows(acc: pd.DataFrame, fields: pd.DataFrame, pairs: pd.DataFrame | None
                  ) -> list[dict]:
    """The gamma rescale (plasticity x c at one count) against the plain LayerNorm and against
    its lr/c^2 control (task level, with the recipe's clipping; both found in ``fields`` by
    component and c); then, run by run, whether the rescale and its control end with equal
    test accuracy, as derived without clipping (``pairs``: ``confound_tables.rescale_pairs``; equal
    accuracy, not equal loss curves)."""
    rows, preserved = [], set(names_of(fields, family="rescale", preserve=True))
    for pres in [v for v in acc.columns if v in preserved]:
        ln, c = fields.at[pres, "component"], float(fields.at[pres, "c"])
        plain = name_of(fields, family="plain", component=ln)
        control = name_of(fields, family="lr/c^2", component=ln, c=c)
        rows.append(paired_test(f"{ln} x {c:.3g} (preserved) - plain {ln}: plasticity x "
                                f"{c:.3g}, same count", acc[pres], _col(acc, plain),
                                paper="not studied", expected=math.nan, unit=_TASKS,
                                sides=(f"{ln} x {c:.3g}", f"plain {ln}")))
        rows.append(paired_test(f"{ln} x {c:.3g} (preserved) - its lr/c^2 control, gradient "
                                "clipping on", acc[pres], _col(acc, control),
                                paper="not studied", expected=math.nan, unit=_TASKS,
                                sides=(f"{ln} x {c:.3g}", "its lr/c^2 control")))
    for r in (pairs.itertuples() if pairs is not None else []):
        equal = r.identical == r.pairs
        if r.pairs == 0:
            verdict = "no pairs"
        elif r.clipping == "off":
            verdict = ("equal test accuracy, as derived" if equal
                       else "differs: contradicts the derivation")
        else:
            verdict = ("equal test accuracy (the clip did not change the outcome)" if equal
                       else "differs, as clipping allows")
        rows.append(descriptive(
            f"{r.variant} vs its lr/c^2 control, run by run (task, LR, seed), gradient clipping "
            f"{r.clipping}", f"{r.identical} of {r.pairs} pairs with equal status and test "
            f"accuracy, the largest difference {r.max_diff:.2f}", paper="not studied (derived "
            "here: the same run without clipping)", verdict=verdict, n=r.pairs, unit="points"))
    return rows


#: Largest output change of the preserved rescale that reads "the same function", and largest
#: relative departure of its plasticity ratio from c that reads "times c" (float32 round-off).
SAME_OUTPUT, RATIO_RTOL = 1e-4, 1e-3


def rescale_check(check: pd.DataFrame) -> pd.DataFrame:
    """Notebook 05's gamma rescale, checked on the model (``confounds.check_rescale``: per
    LayerNorm, ``c``, ``ratio`` of plasticity after / before the preserved rescale,
    ``max_output_change_preserved`` and ``_raw``): the preserved rescale keeps the network's
    output and multiplies the LayerNorm's plasticity by c; the raw one changes the output. Exact
    checks of objection 3's falsifier (descriptive; the paper makes no such check)."""
    off = float((check["ratio"] / check["c"] - 1).abs().max())
    kept = float(check["max_output_change_preserved"].max())
    raw = float(check["max_output_change_raw"].min())
    n, unit = len(check), "(LayerNorms)"
    paper = "not in the paper (objection 3's falsifier, docs/objections.md)"
    return table([
        descriptive("preserved gamma rescale: LayerNorm plasticity after / before, relative "
                    "departure from c (" + ", ".join(f"{r.component} c = {r.c:.3g}" for r in
                                                     check.itertuples()) + ")", off,
                    paper=paper, verdict=checked(off <= RATIO_RTOL), n=n, unit=unit),
        descriptive("preserved gamma rescale: largest change of the network's output (the raw "
                    "rescale's smallest beside it)", f"{kept:.2g} (raw: {raw:.2g})",
                    paper=paper, verdict=checked(kept <= SAME_OUTPUT < raw), n=n, unit=unit)])
