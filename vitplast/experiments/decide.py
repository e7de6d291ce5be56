"""The searched studies' tables (notebook 07): what each task chose, the primaries' values per
task, how far each task lies from pretraining, the recipe-length check and the cross-gauge
study's identity checks.

Paper: Table 1 and Takeaway 3, tested on the task suite (``vitplast.datasets.suite``) by the study
``studies.get("suite")``, whose three primary questions were declared before its runs. The
unit is the task: every value below is one number per task, and the findings (``findings``)
test their mean over tasks.

- ``chosen``: per task and configuration, the LR the search chose on validation
  (``search.best``) and that run's test accuracy; only tasks whose every search has ended
  (``complete_tasks``) count.
- ``findings``: the study's three declared primaries as findings rows: P1 (sparse MHA, FC1,
  FC2 minus LN1, LN2, all at LN1's count) and P2 (MHA minus LN1 at full counts) from
  ``accuracy``; P3 (Spearman's rho, over the five full-count components, of plasticity before
  finetuning against gain over head-only) from ``spearman_plasticity_gain``. ``secondary``:
  the same primaries with each LR chosen from the study's fixed grid.
- ``task_plasticity``: a task's per-block plasticity (or relative plasticity,
  ``vitplast.measure.relative``) before finetuning, measured once and stored beside the runs
  (``plasticity-<hash>.json``).
- ``task_probe``: a task's linear probe on the frozen embedded model, computed once and stored
  beside the runs (``probe-<hash>.json``).
- ``distance``: head-only and linear-probe accuracy per task: how far it lies from what
  pretraining learned.
- ``by_length`` and ``length_rule``: the recipe-length check (``studies.get("length")``): P1
  and P2 per task at 1x, 2x and 4x the recipe's steps, and the rule declared with it (a sign
  change of either mean between 1x and 4x lengthens the suite study).
- ``rising_loss``: how many of a study's chosen runs had a training loss that rose
  above its start: single runs that rounding alone moves by points.

The cross-gauge study's pairs and identity checks: ``vitplast.experiments.cross_gauge``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vitplast import cached
from vitplast.experiments import search, store
from vitplast.measure.components import COMPONENTS
from vitplast.stats import verdicts

if TYPE_CHECKING:  # for annotations only
    from vitplast.experiments.studies import Study


#: What ``task_plasticity`` measures: Definition 1's plasticity, or the relative plasticity.
QUANTITIES = ("plasticity", "relative")


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


def task_plasticity(root: str | Path, task: str, n_pairs: int = 256,
                    protocol: str = "embedding", quantity: str = "plasticity", *,
                    compute: bool = True) -> pd.DataFrame:
    """Per block and component: the embedded model's plasticity on ``task`` before
    finetuning (``n_pairs`` pairs of a Fashion-MNIST image and a task image, ``protocol``),
    measured once and stored in ``root/plasticity-<hash of the settings>.json``.

    ``quantity`` (``QUANTITIES``): ``"plasticity"``, or ``"relative"``, the relative
    plasticity (``vitplast.measure.relative``) on the same pairs, stored the same way (its settings,
    and so its hash, add ``quantity``; plasticity's files keep theirs).

    Columns: ``task``, ``protocol``, ``layer``, ``component``, ``plasticity``, ``ci95``; for
    ``"relative"``: ``relative_plasticity``, ``plasticity``, ``s_in``, ``s_out`` in place of
    ``ci95``.

    Raises:
        ValueError: unknown ``quantity``, naming the valid ones.
    """
    from vitplast.measure import empirical, relative

    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; valid: {list(QUANTITIES)}")
    settings = dict(task=task, n_pairs=n_pairs, protocol=protocol)
    measured = empirical.embedded_layers
    if quantity == "relative":
        settings["quantity"], measured = "relative plasticity", relative.embedded_layers
    saved = store.Store(root).companion(
        f"plasticity-{cached.config_hash(settings)}.json",
        compute=(lambda: dict(settings, rows=measured([task], protocol=protocol, n_pairs=n_pairs)
                              .drop(columns="task").to_dict("records"))) if compute else None)
    return pd.DataFrame(saved["rows"] if saved else [], columns=None if saved else [
        "layer", "component", "plasticity"]).assign(task=task, protocol=protocol)


def task_probe(root: str | Path, task: str, *, compute: bool = True) -> dict | None:
    """The embedded model's linear probe on ``task``, computed once and stored beside the runs
    (``probes.stored_probe``); ``None`` when not stored and ``compute`` is False."""
    from vitplast.train import probes

    return probes.stored_probe(root, task, compute=compute)


def task_probes(root: str | Path, tasks, *, compute: bool = False) -> pd.DataFrame:
    """``task_probe`` of each task that has one stored (or of every task, with ``compute``):
    columns ``task``, ``test_acc`` (%), ``val_acc``, ``train_acc``."""
    rows = [(t, task_probe(root, t, compute=compute)) for t in tasks]
    return pd.DataFrame([dict(task=t, **{k: r[k] for k in ("test_acc", "val_acc", "train_acc")})
                         for t, r in rows if r is not None],
                        columns=["task", "test_acc", "val_acc", "train_acc"])


def component_plasticity(root: str | Path, tasks, n_pairs: int = 256,
                         protocol: str = "embedding", quantity: str = "plasticity", *,
                         compute: bool = True) -> pd.DataFrame:
    """Per task and component: plasticity before finetuning, the mean over blocks (as the
    paper's Fig. 2 summarises a component). Columns: ``task``, ``component``,
    ``plasticity`` (``quantity="relative"``: ``relative_plasticity``, as ``task_plasticity``;
    ``compute`` False: the stored tasks only)."""
    value = "relative_plasticity" if quantity == "relative" else "plasticity"
    per_layer = pd.concat([task_plasticity(root, t, n_pairs, protocol, quantity,
                                           compute=compute) for t in tasks])
    per_layer[value] = per_layer.get(value, np.nan)
    return per_layer.groupby(["task", "component"], as_index=False, sort=False)[value].mean()


def accuracy(picked: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy (%) as tasks x configurations: what ``verdicts.Primary.values`` reads."""
    return picked.pivot(index="task", columns="config", values="test_acc")


def spearman_plasticity_gain(picked: pd.DataFrame, plasticity: pd.DataFrame,
                             components=tuple(COMPONENTS), value: str = "plasticity"
                             ) -> pd.Series:
    """Per task: Spearman's rho, over ``components``, between their plasticity before
    finetuning (``component_plasticity``; its column ``value``, e.g. ``relative_plasticity``)
    and their gain over head-only (test points). NaN for a task without plasticity. The
    statistic ``"spearman(plasticity, gain)"`` of the suite study's third primary."""
    from scipy import stats

    acc = accuracy(picked)
    gain = acc[list(components)].sub(acc["head"], axis=0)
    plastic = plasticity.pivot(index="task", columns="component", values=value)
    return pd.Series({t: stats.spearmanr(plastic.loc[t, list(components)], gain.loc[t]).statistic
                      if t in plastic.index else np.nan for t in acc.index}, name="rho")


def findings(study: Study, picked: pd.DataFrame, plasticity: pd.DataFrame | None = None
             ) -> list[dict]:
    """The study's declared primaries as findings rows (``verdicts.Primary.row``), one value
    per complete task; ``verdicts.table`` tests them with Holm over the primaries.
    ``plasticity`` (``component_plasticity``): for a study whose primaries read it (P3)."""
    statistics = ({"spearman(plasticity, gain)": spearman_plasticity_gain(picked, plasticity)}
                  if plasticity is not None else {})
    return [p.row(accuracy(picked), statistics) for p in study.primaries]


def secondary(study: Study, on_grid: pd.DataFrame) -> list[dict]:
    """The study's primaries asked again with each LR chosen from its fixed grid
    (``chosen(..., grid=True)``; for the cross-gauge study the paper's four LRs, shared by
    every configuration, as the paper's table chose them): family "secondary", Holm over
    these rows only, so they never move a primary's verdict."""
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


def _order_row(what: str, values: pd.DataFrame, paper_order, source: str) -> dict:
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
    from vitplast import paper
    from vitplast.measure.components import LINEARS

    tasks = list(picked["task"].unique())
    p3 = next(p for p in study.primaries if p.statistic == _P3)
    plastic = {pr: component_plasticity(root, tasks, study.spec["n_pairs"], pr)
               for pr in PROTOCOLS}
    acc = accuracy(picked)

    def named(protocol: str, claim: str = p3.claim) -> str:
        other = claim.replace(f"{PROTOCOLS[0]} protocol", f"{protocol} protocol")
        return other if other != claim or protocol == PROTOCOLS[0] else (
            f"{claim} (plasticity: {protocol} protocol)")

    rows = [dict(p3.row(acc, {_P3: spearman_plasticity_gain(picked, plastic[pr])}),
                 claim=named(pr), family="sensitivity") for pr in PROTOCOLS[1:]]
    for pr in PROTOCOLS:
        rho = spearman_plasticity_gain(picked, plastic[pr], LINEARS)
        rows.append(verdicts.mean_test(
            f"Spearman(plasticity, gain over head-only) over the three linears alone (MHA, "
            f"FC1, FC2), within a task (plasticity: {pr} protocol)", rho,
            paper=p3.source, expected=p3.expected, unit="rho, per task"))
    for pr in PROTOCOLS:
        wide = plastic[pr].pivot(index="task", columns="component", values="plasticity")
        rows.append(_order_row(f"plasticity before finetuning, {pr} protocol, mean over "
                               "blocks", wide[list(COMPONENTS)], paper.PLASTICITY_ORDER,
                               paper.SOURCES["fig2"]))
    gain = acc[list(COMPONENTS)].sub(acc["head"], axis=0)
    rows.append(_order_row("gain over head-only (test points)", gain, paper.FINETUNING_ORDER,
                           "Table 1 average (ViT-B/16)"))
    return rows


def distance(picked: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per task: head-only test accuracy (from ``chosen``), and the linear probe's
    (``probes.linear_probes``) when given: how much of the task the frozen features already
    solve. Columns: ``task``, ``head_acc``, and ``probe_acc``."""
    head = picked[picked["config"] == "head"].set_index("task")["test_acc"].rename("head_acc")
    out = head.to_frame()
    if probes is not None:
        out = out.join(probes.set_index("task")["test_acc"].rename("probe_acc"))
    return out.reset_index()


def by_distance(picked: pd.DataFrame, far: pd.DataFrame) -> pd.DataFrame:
    """``distance`` (``far``) with each task's suite ``family`` and its P2 value,
    ``MHA_minus_LN1`` (test points): what notebook 07 plots against head-only accuracy."""
    from vitplast.datasets import suite

    acc = accuracy(picked)
    return far.assign(family=far["task"].map(lambda t: suite.SUITE[t].family),
                      MHA_minus_LN1=far["task"].map(acc["MHA"] - acc["LN1"]))


def distance_findings(effects: pd.DataFrame) -> list[dict]:
    """Does MHA - LN1 depend on how far a task lies from pretraining (``by_distance``)?
    Pearson's r over tasks between head-only accuracy and MHA - LN1 (exploratory, with its
    Fisher-z CI), and MHA - LN1's mean per suite family (descriptive, largest first)."""
    by_family = effects.groupby("family")["MHA_minus_LN1"].agg(["mean", "size"]).sort_values(
        "mean", ascending=False)
    return [verdicts.correlation_test(
                "Pearson r over tasks: head-only test accuracy (how much the frozen features "
                "already solve) vs MHA - LN1 (test points)", effects["head_acc"],
                effects["MHA_minus_LN1"], paper="no claim in the paper", expected=np.nan,
                unit="r, over tasks"),
            verdicts.descriptive(
                "MHA - LN1 by suite family, mean over its tasks (test points)",
                measured=", ".join(f"{f} {r['mean']:+.1f} ({r['size']:.0f})"
                                   for f, r in by_family.iterrows()),
                paper="no claim in the paper", n=len(effects), unit="tasks",
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
            f"{primary} ({what}) keeps its sign from 1x to 4x the recipe's steps (the rule "
            "declared with the check: a change lengthens the suite study)",
            measured=", ".join(f"{m:+.2f} ({k}x)" for k, m in mean.items()),
            paper="not in the paper (it trains one length per dataset)",
            verdict="kept: the 120-step recipe stands" if kept else
            "changed: the suite study must be lengthened",
            n=v["task"].nunique(), unit="test points, mean over tasks at each length"))
    return rows


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


__all__ = ["LENGTHS", "PROTOCOLS", "QUANTITIES", "accuracy", "by_distance", "by_length", "chosen",
           "compares", "complete_tasks", "component_plasticity", "distance", "distance_findings",
           "findings", "length_rule", "protocol_findings", "rising_loss",
           "spearman_plasticity_gain", "task_plasticity", "task_probe", "task_probes"]
