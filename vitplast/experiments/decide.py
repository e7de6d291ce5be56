"""The searched studies' tables (notebook 07): what each task chose, the primaries' values per
task, how far each task lies from pretraining, the recipe-length check and the cross-gauge
study's identity checks.

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
  finetuning against gain over head-only) from ``spearman_plasticity_gain``. ``secondary``:
  the same primaries with each LR chosen from the study's fixed grid.
- ``task_plasticity``: a task's per-block plasticity (or relative plasticity,
  ``vitplast.relative``) before finetuning, measured once and stored beside the runs
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
- ``gauge_pairs`` and ``gauge_checks``: the cross-gauge study's (``studies.get("gauge")``)
  runs at c = 1 and c = 8 that the gauge provably leaves alone (head-only, LN1), paired: their
  first losses must agree, and their loss histories as far as training does not amplify
  rounding; at the chosen LRs their test difference is what rounding alone does to one run.

Used by notebook 04 (the suite section) and the tests.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vitplast import search, store, verdicts
from vitplast.measure.components import COMPONENTS

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
    plasticity (``vitplast.relative``) on the same pairs, stored the same way (its settings,
    and so its hash, add ``quantity``; plasticity's files keep theirs).

    Columns: ``task``, ``protocol``, ``layer``, ``component``, ``plasticity``, ``ci95``; for
    ``"relative"``: ``relative_plasticity``, ``plasticity``, ``s_in``, ``s_out`` in place of
    ``ci95``.

    Raises:
        ValueError: unknown ``quantity``, naming the valid ones.
    """
    from vitplast import empirical, relative

    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; valid: {list(QUANTITIES)}")
    settings = dict(task=task, n_pairs=n_pairs, protocol=protocol)
    measured = empirical.embedded_layers
    if quantity == "relative":
        settings["quantity"], measured = "relative plasticity", relative.embedded_layers
    saved = store.Store(root).companion(
        f"plasticity-{store.config_hash(settings)}.json",
        compute=(lambda: dict(settings, rows=measured([task], protocol=protocol, n_pairs=n_pairs)
                              .drop(columns="task").to_dict("records"))) if compute else None)
    return pd.DataFrame(saved["rows"] if saved else [], columns=None if saved else [
        "layer", "component", "plasticity"]).assign(task=task, protocol=protocol)


def task_probe(root: str | Path, task: str, *, compute: bool = True) -> dict | None:
    """The embedded model's linear probe on ``task`` (``probes.linear_probe``: ``train_acc``,
    ``val_acc``, ``test_acc`` in %, ``n_train``, ``n_features``), computed once (about 40 s on
    a CPU core) and stored in ``root/probe-<hash of the settings>.json``; ``None`` when not
    stored and ``compute`` is False."""
    from vitplast import models, probes

    settings = dict(task=task, model=models.EMBEDDED_NAME, probe="logistic, C=1, L-BFGS")

    def probe() -> dict:
        row = probes.linear_probes(models.EMBEDDED_NAME, [task]).iloc[0].to_dict()
        return dict(settings, **{k: v for k, v in row.items() if k != "task"})

    return store.Store(root).companion(f"probe-{store.config_hash(settings)}.json",
                                       compute=probe if compute else None)


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


def distance(picked: pd.DataFrame, probes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per task: head-only test accuracy (from ``chosen``), and the linear probe's
    (``probes.linear_probes``) when given: how much of the task the frozen features already
    solve. Columns: ``task``, ``head_acc``, and ``probe_acc``."""
    head = picked[picked["config"] == "head"].set_index("task")["test_acc"].rename("head_acc")
    out = head.to_frame()
    if probes is not None:
        out = out.join(probes.set_index("task")["test_acc"].rename("probe_acc"))
    return out.reset_index()


#: The recipe-length check's step multipliers; 1x is the suite study's own runs.
LENGTHS = (1, 2, 4)


def by_length(longer: pd.DataFrame, picked: pd.DataFrame, primaries) -> pd.DataFrame:
    """The recipe-length check per task: ``primaries`` (the suite study's P1 and P2) at 1x
    (``picked``: the suite study's ``chosen``), 2x and 4x the recipe's steps (``longer``: the
    length study's ``chosen``, configurations named "<suite configuration> <k>x"), on the
    tasks ``longer`` holds at every length. Columns ``task``, ``steps`` (the multiplier),
    ``primary`` ("P1", "P2", ...), ``value`` (test points)."""
    name = longer["config"].str.rsplit(" ", n=1)
    longer = longer.assign(config=name.str[0], steps=name.str[1].str.rstrip("x").astype(int))
    done = [t for t, k in longer.groupby("task")["steps"] if set(k) == set(LENGTHS[1:])]
    runs = pd.concat([picked.assign(steps=1), longer])
    runs = runs[runs["task"].isin(done) & runs["config"].isin(set(longer["config"]))]
    rows = [dict(task=task, steps=k, primary=f"P{i + 1}", value=value)
            for k, at in runs.groupby("steps") for i, p in enumerate(primaries)
            for task, value in p.values(accuracy(at)).items()]
    return pd.DataFrame(rows, columns=["task", "steps", "primary", "value"])


def length_rule(values: pd.DataFrame) -> list[dict]:
    """The rule declared with the length check, one descriptive findings row per primary of
    ``by_length``: does its mean over the tasks keep its sign from 1x to 4x the steps? A sign
    change means the suite study's recipe is too short to decide it, and it is lengthened."""
    rows = []
    for primary, v in values.groupby("primary"):
        mean = v.groupby("steps")["value"].mean()
        kept = np.sign(mean[LENGTHS[0]]) == np.sign(mean[LENGTHS[-1]])
        rows.append(verdicts.descriptive(
            f"{primary} keeps its sign from 1x to 4x the recipe's steps (the rule declared with "
            "the check: a change lengthens the suite study)",
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


#: The gauge's invariant configurations: they train nothing the gauge scales (``vitplast.gauge``).
GAUGE_INVARIANT = ("head", "LN1")  # head: head-only finetuning


def gauge_pairs(root: str | Path, configs=GAUGE_INVARIANT) -> pd.DataFrame:
    """Every run of ``configs`` stored at both c = 1 and c = 8 (the same run but for the
    gauge), paired: ``task``, ``config``, ``lr``, ``loss_rose`` (either training loss rose
    above its first value), ``first_diff`` (difference of the two first logged losses: the
    network before training has moved it), ``max_loss_diff`` (largest difference of the two
    loss histories), ``test_diff`` (c = 8 minus c = 1, test points) and ``devices`` (where
    each ran)."""
    def key(run: dict) -> str:
        return store.config_hash({k: v for k, v in run.items()
                                  if k not in ("prepare", "ablation")})

    runs = [r for r in store.Store(root).records() if r["status"] == "ok"
            and r["run"].get("config") in configs]
    plain = {key(r["run"]): r for r in runs if not r["run"].get("prepare")}
    rows = []
    for r8 in (r for r in runs if r["run"].get("prepare") == "gauge"):
        r1 = plain.get(key(r8["run"]))
        if r1 is None:
            continue
        l1, l8 = np.array(search.losses(r1)), np.array(search.losses(r8))
        rows.append(dict(
            task=r8["run"]["task"], config=r8["run"]["config"], lr=r8["run"]["lr"],
            loss_rose=bool(search.loss_rose(r1) or search.loss_rose(r8)),
            first_diff=float(abs(l1[0] - l8[0])),
            max_loss_diff=float(np.abs(l1 - l8).max()) if len(l1) == len(l8) else np.inf,
            test_diff=100 * (r8["test_acc"] - r1["test_acc"]),
            devices=f"{r1['device']}, {r8['device']}"))
    return pd.DataFrame(rows, columns=["task", "config", "lr", "loss_rose", "first_diff",
                                       "max_loss_diff", "test_diff", "devices"])


def _trajectory_row(pairs: pd.DataFrame) -> dict:
    """Do the pairs follow one loss history? Per LR, the largest difference of the two
    histories: the largest LR up to which every pair stays within ``SAME_TRAJECTORY``, and how
    far the pairs above it part."""
    worst = pairs.groupby("lr")["max_loss_diff"].max()
    same = worst <= verdicts.SAME_TRAJECTORY
    leading = worst.index[same.astype(int).cummin().astype(bool)]  # LRs before the first miss
    upto = leading.max() if len(leading) else np.nan
    above = pairs[pairs["lr"] > upto] if np.isfinite(upto) else pairs
    devices = " and ".join(sorted({d for ds in pairs["devices"] for d in ds.split(", ")}))
    if not np.isfinite(upto):
        verdict = "not the same at any LR stored: the derivation or the code is wrong"
    elif not len(above):
        verdict = f"the same trajectory at every LR stored (up to {upto:g}), as derived"
    else:
        verdict = (f"the same trajectory up to LR {upto:g}, as derived; above it the pairs part "
                   f"by up to {above['max_loss_diff'].max():.2g} from first-step differences "
                   f"of at most {above['first_diff'].max():.1g}: large steps amplify rounding "
                   f"(the pairs ran on {devices})")
    return verdicts.descriptive(
        f"{' and '.join(GAUGE_INVARIANT)} follow the same loss history at c = 8 as at c = 1 "
        "(derived: the gauge scales nothing they train)",
        measured=", ".join(f"{d:.1g} (LR {lr:g})" for lr, d in worst.items()),
        paper="not in the paper (vitplast.gauge, derived and tested)", verdict=verdict,
        n=len(pairs), unit="largest loss difference per LR, over run pairs")


def gauge_checks(pairs: pd.DataFrame, picked: pd.DataFrame) -> list[dict]:
    """The cross-gauge study's checks as findings rows, from its pairs (``gauge_pairs``): the
    invariant configurations compute the same first loss at c = 8 as at c = 1 (the gauge keeps
    the function; descriptive, at ``verdicts.SAME_TRAJECTORY``) and follow the same loss
    history (up to which LR: ``_trajectory_row``); the share of chosen runs whose loss rose
    above its start (``search.state``'s ``loss_rose``); and, per invariant configuration,
    c = 8 minus c = 1 at the LRs the search chose (``picked``: the study's ``chosen``), a test
    of what rounding alone does to the study's single runs (exploratory: zero in exact
    arithmetic)."""
    if not len(pairs):
        rows = [verdicts.descriptive(
            f"{' and '.join(GAUGE_INVARIANT)} at c = 8 as at c = 1", measured=np.nan,
            paper="not in the paper", verdict="no pair stored yet", n=0, unit="run pairs")]
    else:
        first = float(pairs["first_diff"].max())
        rows = [verdicts.descriptive(
            f"{' and '.join(GAUGE_INVARIANT)} compute the same first loss at c = 8 as at c = 1 "
            "(derived: the gauge keeps the network's function)", measured=first,
            paper="not in the paper (vitplast.gauge, derived and tested)",
            verdict=("the same, as derived" if first <= verdicts.SAME_TRAJECTORY else
                     "not the same: the derivation or the code is wrong"),
            n=len(pairs), unit="largest first-loss difference, over run pairs"),
            _trajectory_row(pairs)]
    rows.append(rising_loss(picked))
    acc = accuracy(picked)
    for config in GAUGE_INVARIANT:
        if {config, f"{config} c=8"} <= set(acc):
            rows.append(verdicts.paired_test(
                f"{config} at c = 8 - at c = 1, each at its chosen LR (zero in exact arithmetic: "
                "what rounding alone does to one run)", acc[f"{config} c=8"], acc[config],
                paper="not in the paper", expected=math.nan, unit="points, per task (seed 0)"))
    return rows


__all__ = ["GAUGE_INVARIANT", "LENGTHS", "QUANTITIES", "accuracy", "by_length", "chosen",
           "complete_tasks", "component_plasticity", "distance", "rising_loss",
           "findings", "gauge_checks", "gauge_pairs", "length_rule", "spearman_plasticity_gain",
           "task_plasticity", "task_probe", "task_probes"]
