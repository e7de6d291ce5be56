"""The suite study's statistics (notebook 07): the primaries per task, their findings rows,
how far each task lies from pretraining, the recipe-length check, and the searched studies'
rising losses.

Paper: Table 1 and Takeaway 3, tested on the task suite (``vitplast.datasets.suite``) by the
study ``studies.get("suite")``, whose three primary questions were declared before its runs.
The unit is the task: every value below is one number per task, and the findings rows test
their mean over tasks. Every table here reads ``picked``, a searched study's chosen runs
(its ``load``: ``vitplast.experiments.adaptive.SearchedStudy``), and what is measured beside them
(``vitplast.experiments.task_measures``).

- ``accuracy`` (tasks x configurations) and ``spearman_plasticity_gain`` (per task): the values
  the primaries read. ``primary_rows``: the study's declared primaries as findings rows: P1
  (sparse MHA, FC1, FC2 minus LN1, LN2, all at LN1's count) and P2 (MHA minus LN1 at full
  counts) from ``accuracy``; P3 (Spearman's rho, over the five full-count components, of
  plasticity before finetuning against gain over head-only) from ``spearman_plasticity_gain``.
  ``secondary_rows``: the same primaries with each LR chosen from the study's fixed grid.
- ``protocol_findings``: P3 under the other plasticity protocol, and what explains its sign;
  ``count_findings``: the trainable count against the gain, P3's confound.
- ``distance``, ``by_distance`` and ``distance_findings``: head-only and linear-probe accuracy
  per task (how far it lies from what pretraining learned) against MHA - LN1.
- ``by_length`` and ``length_rule``: the recipe-length check (``studies.get("length")``): P1
  and P2 per task at 1x, 2x and 4x the recipe's steps, and the rule declared with it (a sign
  change of either mean between 1x and 4x lengthens the suite study).
- ``rising_loss``: how many of a study's chosen runs had a training loss that rose
  above its start: single runs that rounding alone moves by points.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats

from vitplast import paper
from vitplast.datasets import suite
from vitplast.experiments import task_measures
from vitplast.measure import components
from vitplast.measure.components import COMPONENTS
from vitplast.stats import verdicts

if TYPE_CHECKING:  # for annotations only
    from vitplast.experiments.kinds import Study


def accuracy(picked: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy (%) as tasks x configurations: what ``primaries.Primary.values`` reads."""
    return picked.pivot(index="task", columns="config", values="test_acc")


def spearman_plasticity_gain(picked: pd.DataFrame, plasticity: pd.DataFrame,
                             components=tuple(COMPONENTS), value: str = "plasticity"
                             ) -> pd.Series:
    """Per task: Spearman's rho, over ``components``, between their plasticity before
    finetuning (``task_measures.component_plasticity``; its column ``value``, e.g.
    ``relative_plasticity``) and their gain over head-only (test points). NaN for a task
    without plasticity. The statistic ``"spearman(plasticity, gain)"`` of the suite study's
    third primary."""
    acc = accuracy(picked)
    gain = acc[list(components)].sub(acc["head"], axis=0)
    plastic = plasticity.pivot(index="task", columns="component", values=value)
    return pd.Series({t: stats.spearmanr(plastic.loc[t, list(components)], gain.loc[t]).statistic
                      if t in plastic.index else np.nan for t in acc.index}, name="rho")


def primary_rows(study: Study, picked: pd.DataFrame, plasticity: pd.DataFrame | None = None
                 ) -> list[dict]:
    """The study's declared primaries as findings rows (``primaries.Primary.row``), one value
    per complete task; ``verdicts.table`` tests them with Holm over the primaries.
    ``plasticity`` (``component_plasticity``): for a study whose primaries read it (P3)."""
    statistics = ({"spearman(plasticity, gain)": spearman_plasticity_gain(picked, plasticity)}
                  if plasticity is not None else {})
    return [p.row(accuracy(picked), statistics) for p in study.primaries]


def secondary_rows(study: Study, on_grid: pd.DataFrame) -> list[dict]:
    """The study's primaries asked again with each LR chosen from its fixed grid
    (the study's ``load(...).extras["grid"]``; for the cross-gauge study the paper's four
    LRs, shared by every configuration, as the paper's table chose them): family "secondary",
    Holm over these rows only, so they never move a primary's verdict."""
    return [dict(p.row(accuracy(on_grid)), family="secondary",
                 claim=p.claim.replace(", each LR tuned", "") + "; LR from the fixed grid")
            for p in study.primaries]


#: The plasticity protocols, the declared one first: P3 was declared under ``embedding`` (the
#: suite study, as committed); ``hidden`` is reported beside it as a "sensitivity" row.
PROTOCOLS = ("embedding", "hidden")
_P3 = "spearman(plasticity, gain)"


def _order(values: pd.DataFrame) -> tuple[list[str], pd.Series, int]:
    """Components ordered by their mean rank over the tasks (tasks x components, 1 = the
    largest value in a task), the mean ranks, and how many tasks rank them in that order."""
    ranks = values.rank(axis=1, ascending=False)
    mean = ranks.mean().sort_values(kind="stable")
    order = list(mean.index)
    same = int((values[order].apply(lambda r: list(r.sort_values(ascending=False).index)
                                    == order, axis=1)).sum())
    return order, mean, same


def order_row(what: str, values: pd.DataFrame, paper_order, source: str) -> dict:
    order, mean, same = _order(values)
    return verdicts.descriptive(
        f"{what}: components by their mean rank over tasks (1 = highest in a task)",
        measured=" > ".join(f"{c} ({mean[c]:.1f})" for c in order),
        paper=f"{' > '.join(paper_order)}, {source}",
        verdict=f"{verdicts.same(tuple(order) == tuple(paper_order))}; this exact order on "
                f"{same} of {len(values)} tasks", n=len(values), unit="mean rank, per task")


def protocol_findings(study: Study, picked: pd.DataFrame, root: str | Path) -> list[dict]:
    """P3 beside the other plasticity protocol, and what explains its sign (notebook 07).

    From the plasticity stored beside the runs under both ``PROTOCOLS``, in this order: P3
    under ``hidden`` (family "sensitivity", Holm within it: the declared primary stays
    ``embedding``'s); P3's statistic over the three linears alone (MHA, FC1, FC2) under each
    protocol (exploratory); and, descriptive, the components' plasticity order under each
    protocol and their gain order over head-only, each beside the paper's (Fig. 2, Table 1)."""
    tasks = list(picked["task"].unique())
    p3 = next(p for p in study.primaries if p.statistic == _P3)
    plastic = {pr: task_measures.component_plasticity(root, tasks, study.spec.n_pairs, pr)
               for pr in PROTOCOLS}
    acc = accuracy(picked)

    rows = [dict(p3.row(acc, {_P3: spearman_plasticity_gain(picked, plastic[pr])}),
                 claim=p3.under(pr, PROTOCOLS[0]), family="sensitivity") for pr in PROTOCOLS[1:]]
    for pr in PROTOCOLS:
        rho = spearman_plasticity_gain(picked, plastic[pr], components.LINEARS)
        rows.append(verdicts.mean_test(
            f"Spearman(plasticity, gain over head-only) over the three linears alone (MHA, "
            f"FC1, FC2), within a task (plasticity: {pr} protocol)", rho,
            paper=p3.source, expected=p3.expected, unit="rho, per task", bounded=True))
    for pr in PROTOCOLS:
        wide = plastic[pr].pivot(index="task", columns="component", values="plasticity")
        rows.append(order_row(f"plasticity before finetuning, {pr} protocol, mean over "
                               "blocks", wide[list(COMPONENTS)], paper.PLASTICITY_ORDER,
                               paper.SOURCES["fig2"]))
    gain = acc[list(COMPONENTS)].sub(acc["head"], axis=0)
    rows.append(order_row("gain over head-only (test points)", gain, paper.FINETUNING_ORDER,
                           "Table 1 average (ViT-B/16)"))
    return rows


def count_findings(picked: pd.DataFrame, model) -> list[dict]:
    """P3's confound: within a task, Spearman's rho over the five components between their
    trainable count (``components.count_parameters`` of ``model``, the study's pretrained
    model: the same on every task) and their gain over head-only. A rho as
    large as P3's under a protocol says that protocol's plasticity order cannot be told from
    the count order on these tasks (P1 compares the components at matched counts).
    Exploratory (its own Holm family); the paper makes no claim on it."""
    acc = accuracy(picked)
    gain = acc[list(COMPONENTS)].sub(acc["head"], axis=0)
    count = pd.Series({c: components.count_parameters(model, c) for c in COMPONENTS})
    rho = pd.Series({t: stats.spearmanr(count, gain.loc[t]).statistic for t in gain.index})
    return [verdicts.mean_test(
        "Spearman(trainable count, gain over head-only) over the five components, within a "
        "task (" + ", ".join(f"{c} {n:,}" for c, n in count.sort_values(ascending=False)
                             .items()) + " entries)", rho,
        paper="not in the paper (Table 1 compares components at their full counts)",
        expected=float("nan"), unit="rho, per task", bounded=True)]


def distance(picked: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per task: head-only test accuracy (from ``picked``), and the linear probe's
    (``task_measures.task_probes``) when given: how much of the task the frozen features already
    solve. Columns: ``task``, ``head_acc``, and ``probe_acc``."""
    head = picked[picked["config"] == "head"].set_index("task")["test_acc"].rename("head_acc")
    out = head.to_frame()
    if probes is not None:
        out = out.join(probes.set_index("task")["test_acc"].rename("probe_acc"))
    return out.reset_index()


def by_distance(picked: pd.DataFrame, far: pd.DataFrame) -> pd.DataFrame:
    """``distance`` (``far``) with each task's suite ``family`` and its P2 value,
    ``MHA_minus_LN1`` (test points): what notebook 07 plots against head-only accuracy."""
    acc = accuracy(picked)
    return far.assign(family=far["task"].map(lambda t: suite.SUITE[t].family),
                      MHA_minus_LN1=far["task"].map(acc["MHA"] - acc["LN1"]))


def distance_findings(effects: pd.DataFrame) -> list[dict]:
    """Does MHA - LN1 depend on how far a task lies from pretraining (``by_distance``)?
    Pearson's r over tasks between head-only accuracy and MHA - LN1 (exploratory, with its
    Fisher-z CI), and MHA - LN1's mean per suite family (descriptive, largest first)."""
    by_family = effects.groupby("family")["MHA_minus_LN1"].agg(["mean", "size"]).sort_values(
        "mean", ascending=False)
    far = effects.groupby("family")["head_acc"].mean().idxmin()  # farthest from pretraining
    rest = effects[effects["family"] != far]
    return [verdicts.correlation_test(
                "Pearson r over tasks: head-only test accuracy (how much the frozen features "
                "already solve) vs MHA - LN1 (test points)", effects["head_acc"],
                effects["MHA_minus_LN1"], paper="no claim in the paper", expected=np.nan,
                unit="r, over tasks"),
            verdicts.correlation_test(
                f"the same r without the {far} tasks (the family farthest from pretraining: "
                f"the lowest head-only accuracy, {int((effects['family'] == far).sum())} "
                "tasks)", rest["head_acc"], rest["MHA_minus_LN1"],
                paper="no claim in the paper", expected=np.nan, unit="r, over tasks"),
            verdicts.descriptive(
                "MHA - LN1 by suite family, mean over its tasks (test points)",
                measured=", ".join(f"{f} {r['mean']:+.1f} ({r['size']:.0f})"
                                   for f, r in by_family.iterrows()),
                paper="no claim in the paper", n=len(effects), unit="(by family: mean (tasks))",
                verdict=f"largest on {by_family.index[0]}, smallest on {by_family.index[-1]}")]


#: The recipe-length check's step multipliers; 1x is the suite study's own runs.
LENGTHS = (1, 2, 4)


def by_length(longer: pd.DataFrame, picked: pd.DataFrame, primaries) -> pd.DataFrame:
    """The recipe-length check per task: ``primaries`` (the suite study's P1 and P2) at 1x
    (``picked``: the suite study's ``chosen``), 2x and 4x the recipe's steps (``longer``: the
    length study's ``chosen``, configurations named "<suite configuration> <k>x"), on the
    tasks ``longer`` holds at every length. Columns ``task``, ``steps`` (the multiplier),
    ``primary`` ("P1", "P2", ...), ``compares`` (its groups in words, for panel titles),
    ``value`` (test points)."""
    name = longer["config"].str.rsplit(" ", n=1)
    longer = longer.assign(config=name.str[0], steps=name.str[1].str.rstrip("x").astype(int))
    done = [t for t, k in longer.groupby("task")["steps"] if set(k) == set(LENGTHS[1:])]
    runs = pd.concat([picked.assign(steps=1), longer])
    runs = runs[runs["task"].isin(done) & runs["config"].isin(set(longer["config"]))]
    rows = [dict(task=task, steps=k, primary=f"P{i + 1}", compares=compares(p), value=value)
            for k, at in runs.groupby("steps") for i, p in enumerate(primaries)
            for task, value in p.values(accuracy(at)).items()]
    return pd.DataFrame(rows, columns=["task", "steps", "primary", "compares", "value"])


def compares(primary) -> str:
    """What a primary compares, in words: "MHA minus LN1", "MHA, FC1, FC2 sparse minus LN1,
    LN2" (a word every name of a group ends with, said once), or its statistic."""
    def group(names) -> str:
        last = {n.rsplit(" ", 1)[-1] for n in names}
        if len(last) == 1 and all(" " in n for n in names):
            return f"{', '.join(n.rsplit(' ', 1)[0] for n in names)} {last.pop()}"
        return ", ".join(names)

    return primary.statistic or f"{group(primary.a)} minus {group(primary.b)}"


def length_rule(values: pd.DataFrame) -> list[dict]:
    """The rule declared with the length check, one descriptive findings row per primary of
    ``by_length``: does its mean over the tasks keep its sign from 1x to 4x the steps? A sign
    change means the suite study's recipe is too short to decide it, and it is lengthened."""
    rows = []
    for (primary, what), v in values.groupby(["primary", "compares"]):
        mean = v.groupby("steps")["value"].mean()
        kept = np.sign(mean[LENGTHS[0]]) == np.sign(mean[LENGTHS[-1]])
        rows.append(verdicts.descriptive(
            f"does {primary} ({what}) keep its sign from 1x to 4x the recipe's steps (the rule "
            "declared with the check: a change lengthens the suite study)?",
            measured=", ".join(f"{m:+.2f} ({k}x)" for k, m in mean.items()),
            paper="not in the paper (it trains one length per dataset)",
            verdict=("kept: the 120-step recipe stands" if kept else
                     "changed: the suite study must be lengthened") + _moved(v, mean),
            n=v["task"].nunique(), unit="test points, mean over tasks at each length"))
    return rows


def _moved(v: pd.DataFrame, mean: pd.Series) -> str:
    """What a kept sign hides: the mean's change from 1x to 4x, where it shrinks or grows by
    more than a quarter, and the one task that carries most of it."""
    first, last = mean[LENGTHS[0]], mean[LENGTHS[-1]]
    if not first or abs(last - first) <= 0.25 * abs(first):
        return ""
    per_task = v.pivot_table(index="task", columns="steps", values="value")
    change = per_task[LENGTHS[-1]] - per_task[LENGTHS[0]]
    top = change.abs().idxmax()
    share = abs(change[top]) / change.abs().sum()
    return (f"; but it {'shrinks' if abs(last) < abs(first) else 'grows'} from {first:+.2f} to "
            f"{last:+.2f} points at {LENGTHS[-1]}x, {100 * share:.0f}% of the tasks' change from "
            f"one task ({top}, {change[top]:+.2f})")


def rising_loss(picked: pd.DataFrame) -> dict:
    """A descriptive findings row: the share of a study's chosen runs (``chosen``) whose
    training loss rose above its first value (``search.state``'s ``loss_rose``), where
    rounding alone can move a single run by points (``gauge_pairs`` shows it)."""
    rose = picked["loss_rose"].dropna()
    return verdicts.descriptive(
        "chosen runs whose training loss rose above its start (where rounding alone moves a "
        "single run by points)", measured=100 * rose.mean() if len(rose) else np.nan,
        paper="not in the paper", n=len(rose), unit="% of the chosen runs",
        verdict=f"{int(rose.sum())} of {len(rose)} chosen runs had a training loss that rose "
                "above its start")

__all__ = ["LENGTHS", "PROTOCOLS", "accuracy", "by_distance", "by_length", "compares",
           "distance", "distance_findings", "length_rule", "primary_rows", "protocol_findings",
           "rising_loss", "secondary_rows", "spearman_plasticity_gain"]
