"""Regret: the rules of ``vitplast.experiments.advise`` scored against the validation oracle,
as a table and as findings rows, and their fragility under the residual-stream gauge.

The oracle (``oracle`` from a study's runs, ``oracle_of`` from a searched study's chosen runs)
is the component with the best (seed-mean) validation accuracy at its chosen LR; a rule's
regret on a task is the oracle's test accuracy minus that of the rule's first choice (points;
negative where the validation winner does worse on test). Validation ties count for each tied
component: the oracle's test accuracy is their mean, and picking any of them is a hit. The
task is the unit: ``table`` gives each rule's mean regret with its 95% CI over tasks, top-1 hit
rate and cost; ``findings`` tests each rule's regret, and its difference from a random pick,
Holm within the family "exploratory" of its own table (declared with the rules, after the
finetuning runs); ``supported`` names the rule those rows support. ``pick_changes`` and
``fragility`` ask whether a rule's first choice moves under the gauge (c = 1 vs c = 8: the
same function), the mark of a rule that reads a parametrisation.

Not in the paper (Takeaway 3 read as advice: finetune the most plastic component; Table 1:
MHA alone the best on average).
"""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from vitplast import files, models
from vitplast.experiments import studies
from vitplast.experiments.advise import PLASTICITY_RULES, RULES, candidates, rank_tasks
from vitplast.experiments.lr_selection import select_lr
from vitplast.report.finetuning_tables import main_table
from vitplast.stats.verdicts import ALPHA, descriptive, mean_test, paired_test
from vitplast.stats.verdicts import table as findings_table

#: The rule whose regret is a pick made at random: the mean over the candidates run on the task.
RANDOM = "random pick"
#: What the paper says each rule should do, for the rows that cite it (the others cite none).
PAPER = {**{r: "Takeaway 3 (finetune the most plastic component): below a random pick"
            for r, (_, quantity) in PLASTICITY_RULES.items() if quantity == "plasticity"},
         "paper: MHA": "Table 1 (MHA alone the best component on average): below a random pick"}
_UNIT = "points of test accuracy, per task"


def oracle(runs: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per task and candidate of a finetuning study's ``runs``: ``val`` (the seed-mean
    validation accuracy its LR was chosen on, %) and ``test`` (seed-mean test accuracy at that
    LR, %); ``best`` marks the oracle's choice, the best ``val`` per task (ties all marked)."""
    runs = runs[runs["config"].isin(candidates())]
    chosen, main = select_lr(runs, on), main_table(runs, on)
    out = chosen[["task", "config", "selection_score"]].merge(
        main[["task", "config", "test_acc_mean"]], on=["task", "config"])
    out = out.rename(columns={"selection_score": "val", "test_acc_mean": "test"})
    return _mark(out.assign(val=out["val"] * 100))


def oracle_of(picked: pd.DataFrame) -> pd.DataFrame:
    """``oracle`` from a searched study's ``load`` (one seed: ``val_acc`` and
    ``test_acc`` in % at each configuration's chosen LR)."""
    out = picked[picked["config"].isin(candidates())][["task", "config", "val_acc", "test_acc"]]
    return _mark(out.rename(columns={"val_acc": "val", "test_acc": "test"}))


def _mark(o: pd.DataFrame) -> pd.DataFrame:
    o = o.reset_index(drop=True)
    return o.assign(best=o["val"] == o.groupby("task")["val"].transform("max"))


def regret(advice: pd.DataFrame, o: pd.DataFrame) -> pd.DataFrame:
    """Per task x rule of ``advice`` (``experiments.advise.rank`` rows) on the tasks of the
    oracle ``o``: the rule's first choice (``pick``), the oracle's (tied ones joined by "/"),
    ``regret`` (points), ``hit`` and ``seconds``; and a ``RANDOM`` row per task, its regret the
    mean over the candidates run on the task (``candidates``: how many), its hit rate the
    chance of drawing a best one of them."""
    test = o.set_index(["task", "config"])["test"]
    best = o[o["best"]].groupby("task").agg(oracle=("config", "/".join), test=("test", "mean"),
                                            ties=("config", list))
    first = advice[(advice["rank"] == 1) & advice["task"].isin(best.index)]
    rows = [dict(task=r.task, rule=r.rule, pick=r.config, oracle=best.at[r.task, "oracle"],
                 regret=best.at[r.task, "test"] - test[(r.task, r.config)],
                 hit=float(r.config in best.at[r.task, "ties"]), seconds=r.seconds)
            for r in first.itertuples()]
    rows += [dict(task=task, rule=RANDOM, pick="(any)", oracle=b["oracle"],
                  regret=b["test"] - test[task].mean(), hit=len(b["ties"]) / len(test[task]),
                  candidates=len(test[task]), seconds=0.0) for task, b in best.iterrows()]
    return pd.DataFrame(rows)


def _ci(v: pd.Series) -> float:
    return (stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
            if len(v) > 1 else math.nan)


def table(per_task: pd.DataFrame) -> pd.DataFrame:
    """Per rule (``regret``): ``mean regret`` (points of test accuracy) with ``ci95`` (half-width
    of its 95% t interval over tasks), ``top-1 hit rate``, ``tasks`` and ``seconds per task``
    (median cost), best rule first."""
    g = per_task.groupby("rule")
    out = pd.DataFrame({"mean regret": g["regret"].mean(), "ci95": g["regret"].agg(_ci),
                        "top-1 hit rate": g["hit"].mean().astype(float),
                        "tasks": g["task"].nunique(), "seconds per task": g["seconds"].median()})
    return out.sort_values("mean regret", kind="stable").reset_index()


def findings(per_task: pd.DataFrame) -> pd.DataFrame:
    """The regret as findings rows (``verdicts.table``; the task is the unit): per rule, its
    mean regret (t test against 0: does it lose accuracy against the oracle?) and its regret
    minus a random pick's (paired over tasks: does it beat choosing at random?), the latter
    citing the paper where the rule is its advice (``PAPER``); one descriptive row per rule
    with its top-1 hit rate. Holm over the tested rows."""
    by = {r: g.set_index("task") for r, g in per_task.groupby("rule")}
    rows = []
    for rule in [r for r in (*RULES, *sorted(set(by) - set(RULES))) if r in by and r != RANDOM]:
        regret = by[rule]["regret"]
        rows.append(mean_test(f"regret of the rule {rule!r} (oracle's test accuracy minus its "
                              "pick's)", regret, paper="not in the paper", expected=math.nan,
                              unit=_UNIT))
        if RANDOM in by:
            rows.append(paired_test(f"regret of the rule {rule!r} - regret of a random pick",
                                    regret, by[RANDOM]["regret"], unit=_UNIT,
                                    paper=PAPER.get(rule, "not in the paper"),
                                    expected=-1 if rule in PAPER else math.nan,
                                    sides=(f"the regret of {rule!r}",
                                           "a random pick's regret")))
        chance = (f" (a random pick: {100 * by[RANDOM]['hit'].mean():.0f}%)"
                  if RANDOM in by else "")
        rows.append(descriptive(f"top-1 hit rate of the rule {rule!r}", 100 * by[rule][
            "hit"].mean(), paper="not in the paper", n=len(regret), unit="% of tasks",
            verdict=f"picks the oracle's component on {int(by[rule]['hit'].sum())} of "
                    f"{len(regret)} tasks" + chance))
    if RANDOM in by:
        rows.append(_chance_row(by[RANDOM]))
    return findings_table(rows)


def _chance_row(random: pd.DataFrame) -> dict:
    """Why a random pick's hit rate is not 1 / n (n the candidates run on a task, ``regret``'s
    ``candidates``): on a task where k candidates tie for the oracle's best validation
    accuracy, a random pick hits with chance k / n."""
    hit, n = random["hit"], random["candidates"].astype(int)
    tied = int((hit > 1 / n + 1e-12).sum())
    counts = sorted(set(n))
    of = f"{counts[0]}" if len(counts) == 1 else "n (the candidates run on the task)"
    return descriptive(
        "top-1 hit rate of a random pick", 100 * float(hit.mean()), paper="not in the paper",
        n=len(hit), unit="% of tasks, mean chance over tasks",
        verdict=(f"1 / {of} on a task with one best component, k / {of} where k tie for the "
                 f"best on validation: {tied} of {len(hit)} tasks have a tie"
                 + (f", so it is above {100 / counts[0]:g}%" if tied and len(counts) == 1
                    else "")))



def headline(found: pd.DataFrame) -> list[str]:
    """The claims a notebook's "What this shows" reads (``sentences.summary``): each rule of
    the paper's advice (``PAPER``) against a random pick, the other rule with the lowest mean
    regret against it, and the random pick's hit rate; the rest go to its appendix."""
    vs = found[found["claim"].str.endswith("- regret of a random pick")]
    paper = [c for c in vs["claim"] if any(f"{r!r}" in c for r in PAPER)]
    others = vs[~vs["claim"].isin(paper)].sort_values("measured")
    chance = [c for c in found["claim"] if c == "top-1 hit rate of a random pick"]
    return [*paper, *others["claim"].iloc[:1], *chance]


#: The kinds of ``findings`` rows ``select`` picks, by how their claim reads.
KINDS = {"regret": "(oracle's test accuracy minus its pick's)",
         "against random": "- regret of a random pick", "hit rate": "top-1 hit rate of"}


def select(found: pd.DataFrame, *kinds: str) -> pd.DataFrame:
    """The rows of ``findings`` of the given ``KINDS`` (all rows when none), in the table's
    order: what a Read cell says."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}; valid: {list(KINDS)}")
    keep = pd.Series(not kinds, index=found.index)
    for kind in kinds:
        keep |= found["claim"].str.contains(KINDS[kind], regex=False)
    return found[keep]


def supported(found: pd.DataFrame, gauge: pd.DataFrame | None = None) -> str:
    """The rule the ``findings`` rows support: of the rules whose regret is resolved below a
    random pick's, the one with the lowest mean regret; with ``gauge`` (``fragility`` rows),
    only among the rules whose pick the gauge never moved. "none" when no rule qualifies."""
    vs = found[found["claim"].str.endswith("- regret of a random pick")]
    beats = vs[(vs["p_holm"] < ALPHA) & (vs["measured"] < 0)]
    rules = list(beats["claim"].str.extract(r"rule '(.+)' -")[0])
    if gauge is not None:
        moved = gauge.assign(rule=gauge["claim"].str.extract(r"rule '(.+)':")[0])
        rules = [r for r in rules if (moved.loc[moved["rule"] == r, "measured"] == 0).any()]
    own = found.set_index("claim")["measured"]
    regrets = {r: own[f"regret of the rule {r!r} (oracle's test accuracy minus its pick's)"]
               for r in rules}
    return min(regrets, key=regrets.get) if regrets else "none"


def pick_changes(plain: pd.DataFrame, gauged: pd.DataFrame) -> pd.DataFrame:
    """Per task x rule present in both: the first choice on the model (``plain``, c = 1) and
    under the gauge (``gauged``, c = 8), and ``changed``."""
    def first(advice):
        return advice[advice["rank"] == 1].set_index(["task", "rule"])["config"]

    both = pd.concat([first(plain).rename("pick at c = 1"), first(gauged).rename(
        "pick at c = 8")], axis=1, join="inner").reset_index()
    return both.assign(changed=both["pick at c = 1"] != both["pick at c = 8"])


def fragility(changes: pd.DataFrame) -> pd.DataFrame:
    """One descriptive findings row per rule of ``pick_changes``: on how many tasks its first
    choice changes under the gauge, a function-preserving change (fragile when it does)."""
    rows = []
    for rule in [r for r in RULES if r in set(changes["rule"])]:
        c = changes[changes["rule"] == rule]
        k = int(c["changed"].sum())
        moves = ", ".join(f"{a} -> {b}" for a, b in c.loc[c["changed"], [
            "pick at c = 1", "pick at c = 8"]].value_counts().index) or "none"
        rows.append(descriptive(
            f"the rule {rule!r}: its first choice changes between c = 1 and c = 8 (the "
            "residual-stream gauge, the same function)", k, paper="not in the paper",
            n=len(c), unit="tasks whose first choice changed",
            verdict=(f"fragile: changes on {k} of {len(c)} tasks ({moves})" if k else
                     f"stable: the same choice on all {len(c)} tasks")))
    return findings_table(rows)


def on_study(study: str = "suite", root=None) -> pd.DataFrame:
    """``regret`` of every rule on a searched ``study``'s complete tasks (default the suite's
    33), from the rankings stored beside its runs (``experiments.advise.rank_tasks``; computed
    where missing) and its chosen runs (``SearchedStudy.load``): no new finetuning."""
    s = studies.get(study)
    root = root or files.results_root(study)
    o = oracle_of(s.load(root).runs)
    return regret(rank_tasks(models.EMBEDDED_NAME, list(dict.fromkeys(o["task"])), root=root), o)


def under_gauge(study: str = "gauge", plain: str = "suite") -> pd.DataFrame:
    """``pick_changes`` on the cross-gauge study's tasks: the rankings at c = 1 kept beside the
    ``plain`` study (the same model and tasks) and those at the study's c kept beside it."""
    spec = studies.get(study).spec
    c = next(v["ablation"]["c"] for v in spec.configs.values() if isinstance(v, dict))
    def ranked(name: str, **kw) -> pd.DataFrame:
        return rank_tasks(models.EMBEDDED_NAME, list(spec.tasks), root=files.results_root(name),
                          **kw)

    return pick_changes(ranked(plain), ranked(study, c=c))
