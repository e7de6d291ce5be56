"""Which component should I finetune? Rank the five components of a model for a task from
signals measured before any finetuning run, and score each rule against the oracle.

Rules (``RULES``; each ranks LN1, MHA, LN2, FC1, FC2, 1 = finetune this one):

- ``plasticity``: the component's measured plasticity (hidden protocol, pairs of a
  pretraining-domain image and a task image): the paper's advice read literally (Takeaway 3).
- ``gradient norm``: the norm of the task loss's gradient on the component, one batch, a new
  head (the paper's Fig. 4 signal, at step 0); it grows with the component's size.
- ``Auto-RGN``: the relative gradient norm ||g|| / ||theta|| of each parameter tensor, averaged
  over the component's tensors (Auto-RGN of Surgical Fine-Tuning, Lee et al., ICLR 2023).
- ``gradient norm per parameter``: ||g|| / sqrt(#parameters) (objection 4, docs/objections.md).
- ``loss drop``: how much a few SGD steps on the component alone lower the training loss of a
  fixed batch, at each configuration's ``LOSS_DROP_LR`` (the middle of its grid in the main
  study).
- ``paper: MHA``: always MHA first (no signal, no cost).

``rank`` computes them for one model and task (seconds on a laptop CPU); ``regret`` and
``regret_table`` score them on a finetuning study: the oracle is the component with the best
seed-mean validation accuracy at its chosen LR; a rule's regret is the oracle's test accuracy
minus that of the rule's first choice (points; the task is the unit).

Not in the paper. Used by notebook 04; the README shows the call.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from vitplast import components, studies
from vitplast.measure.empirical import SOURCE

RULES = ("plasticity", "gradient norm", "Auto-RGN", "gradient norm per parameter", "loss drop",
         "paper: MHA")
#: The configurations the rules rank (each trains one component, plus the head).
CANDIDATES = tuple(components.COMPONENTS)
#: Peak LR of the ``loss drop`` rule per configuration: the middle of its main-study grid.
_MAIN_LRS = studies.get("main").spec["lrs"]
LOSS_DROP_LR = {c: _MAIN_LRS[c][len(_MAIN_LRS[c]) // 2] for c in CANDIDATES}


def _batch(dataset, n: int, seed: int, model) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` examples of ``dataset`` drawn with ``seed``: images (n, C, H, W), labels (n), on
    ``model``'s device."""
    from vitplast.inputs import to_model

    idx = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    items = [dataset[int(i)] for i in idx]
    return to_model(model, torch.stack([x for x, _ in items]),
                    torch.as_tensor([int(y) for _, y in items]))


def _plasticity(model, task: str, n_pairs: int, source: str | None) -> pd.Series:
    """Per component, plasticity (mean over layers) on ``n_pairs`` pairs of the task."""
    from vitplast import empirical, plasticity

    pairs = empirical.task_pairs(task, source, n_pairs=n_pairs, model=model)
    rates = plasticity.measure(model, pairs, protocol="hidden", progress=False)
    return plasticity.ranking(rates).set_index("component")["plasticity"].rename(str)


def _gradients(model, x: torch.Tensor, y: torch.Tensor) -> pd.DataFrame:
    """Per component, from one backward pass of the task loss on (x, y): the gradient norm,
    Auto-RGN (mean over tensors of ||g|| / ||theta||) and the norm per sqrt(parameter)."""
    m = copy.deepcopy(model).eval()
    for p in m.parameters():
        p.requires_grad_(True)
    F.cross_entropy(m(x), y).backward()
    rows = [dict(component=components.component_of(n), g2=float(p.grad.pow(2).sum()),
                 rgn=float(p.grad.norm() / p.detach().norm().clamp_min(1e-12)), size=p.numel())
            for n, p in m.named_parameters()]
    g = pd.DataFrame(rows)
    g = g[g["component"].isin(CANDIDATES)].groupby("component").agg(
        g2=("g2", "sum"), rgn=("rgn", "mean"), size=("size", "sum"))
    return pd.DataFrame({"gradient norm": np.sqrt(g["g2"]), "Auto-RGN": g["rgn"],
                         "gradient norm per parameter": np.sqrt(g["g2"] / g["size"])})


def _loss_drop(model, config: str, train, probe: tuple, before: float, *, steps: int,
               batch_size: int, seed: int) -> float:
    """``before`` (the loss on the ``probe`` batch) minus that loss after ``steps`` SGD steps
    (momentum 0.9, clip 1.0, constant LR ``LOSS_DROP_LR``) on ``config``'s parameters and the
    head."""
    m = copy.deepcopy(model).eval()  # eval: no dropout, the drop is the update's alone
    components.set_trainable(m, components.trainable_names(m, config))
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=LOSS_DROP_LR[config], momentum=0.9)
    for step in range(steps):
        x, y = _batch(train, batch_size, seed + 1 + step, m)
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    with torch.no_grad():
        after = float(F.cross_entropy(m(probe[0]), probe[1]))
    return before - after if math.isfinite(after) else -math.inf


def rank(model_name: str, task: str, *, rules=RULES, n_pairs: int = 64, batch_size: int = 32,
         steps: int = 2, source: str | None = SOURCE, seed: int = 0, threads: int | None = 1
         ) -> pd.DataFrame:
    """Every rule's ranking of the five components for finetuning ``model_name`` on ``task``.

    Args:
        model_name: a model ``models.load_model`` knows (default the embedded one).
        task: a task name (``tasks.TASKS``).
        rules: which of ``RULES`` to compute (cheaper with fewer).
        n_pairs: pairs for the plasticity rule; batch_size: images per SGD step of the
            loss-drop rule (twice as many in the one batch the gradient rules and the loss drop
            are measured on); steps: SGD steps of the loss-drop rule; source: the pretraining
            domain of the pairs.
        threads: torch's CPU threads while ranking, restored after (None: as set). One is
            the fastest for a small model on a shared CPU (measured: 6 s against 50 s for two
            threads on a busy 2-core machine).

    Returns:
        One row per rule x component: ``task``, ``rule``, ``config``, ``score`` (higher: sooner),
        ``rank`` (1 = finetune this one) and ``seconds`` (the rule's cost on this task).
    """
    unknown = set(rules) - set(RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}; valid: {list(RULES)}")
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        return _rank(model_name, task, rules=rules, n_pairs=n_pairs, batch_size=batch_size,
                     steps=steps, source=source, seed=seed)
    finally:
        torch.set_num_threads(before)


def _rank(model_name: str, task: str, *, rules, n_pairs: int, batch_size: int, steps: int,
          source: str | None, seed: int) -> pd.DataFrame:
    """``rank``'s work, at the thread count it set."""
    from vitplast import models, tasks

    t = tasks.load(task)
    model = models.load_model(model_name, num_classes=t.num_classes)
    models.new_head(model, t.num_classes, seed=seed)
    probe = _batch(t.train, 2 * batch_size, seed, model)  # the gradient rules' batch, the drop's
    scores, cost = {}, {}
    clock = time.perf_counter()
    if "plasticity" in rules:
        scores["plasticity"] = _plasticity(model, task, n_pairs, source)
        cost["plasticity"], clock = time.perf_counter() - clock, time.perf_counter()
    grad_rules = [r for r in rules if r in ("gradient norm", "Auto-RGN",
                                            "gradient norm per parameter")]
    if grad_rules:
        g = _gradients(model, *probe)
        elapsed, clock = time.perf_counter() - clock, time.perf_counter()
        scores.update({r: g[r] for r in grad_rules})
        cost.update({r: elapsed for r in grad_rules})  # one pass serves the three
    if "loss drop" in rules:
        with torch.no_grad():
            before = float(F.cross_entropy(model.eval()(probe[0]), probe[1]))
        scores["loss drop"] = pd.Series({c: _loss_drop(model, c, t.train, probe, before,
                                                       steps=steps, batch_size=batch_size,
                                                       seed=seed) for c in CANDIDATES})
        cost["loss drop"] = time.perf_counter() - clock
    if "paper: MHA" in rules:
        scores["paper: MHA"], cost["paper: MHA"] = pd.Series(
            {c: float(c == "MHA") for c in CANDIDATES}), 0.0
    rows = [dict(task=task, rule=r, config=c, score=float(scores[r][c]), seconds=cost[r])
            for r in rules for c in CANDIDATES]
    out = pd.DataFrame(rows)
    out["rank"] = out.groupby("rule")["score"].rank(ascending=False, method="first").astype(int)
    return out[["task", "rule", "config", "score", "rank", "seconds"]]


def rank_tasks(model_name: str, task_names, **kwargs) -> pd.DataFrame:
    """``rank`` on each task (load-or-compute, cached by its arguments). Used by notebook 04."""
    from vitplast import store

    kwargs = {"threads": 1, **kwargs}  # in the key: the cost column depends on it
    return pd.concat([store.load_or_compute("advise", dict(model=model_name, task=t, **kwargs),
                                            lambda t=t: rank(model_name, t, **kwargs))
                      for t in task_names], ignore_index=True)


def oracle(runs: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per task and candidate of a finetuning study's ``runs``: ``val`` (the seed-mean
    validation accuracy its LR was chosen on, %) and ``test`` (seed-mean test accuracy at that
    LR, %); ``best`` marks the oracle's choice, the best ``val`` per task."""
    from vitplast import results

    chosen = results.select_lr(runs[runs["config"].isin(CANDIDATES)], on)
    main = results.main_table(runs[runs["config"].isin(CANDIDATES)], on)
    out = chosen[["task", "config", "selection_score"]].merge(
        main[["task", "config", "test_acc_mean"]], on=["task", "config"])
    out = out.rename(columns={"selection_score": "val", "test_acc_mean": "test"})
    out["val"] *= 100
    out["best"] = out["val"] == out.groupby("task")["val"].transform("max")
    return out


def regret(advice: pd.DataFrame, runs: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per task x rule: the rule's first choice (``pick``), the oracle's, ``regret`` (the
    oracle's test accuracy minus the pick's, points) and ``hit`` (pick == oracle); and a
    ``random pick`` row per task, its regret the mean over the five candidates."""
    o = oracle(runs, on)
    best = o[o["best"]].drop_duplicates("task").set_index("task")
    test = o.set_index(["task", "config"])["test"]
    first = advice[advice["rank"] == 1]
    rows = [dict(task=r.task, rule=r.rule, pick=r.config, oracle=best.at[r.task, "config"],
                 regret=best.at[r.task, "test"] - test[(r.task, r.config)],
                 hit=r.config == best.at[r.task, "config"], seconds=r.seconds)
            for r in first.itertuples() if r.task in best.index]
    rows += [dict(task=task, rule="random pick", pick="(any)", oracle=b["config"],
                  regret=b["test"] - test[task].mean(), hit=1 / len(CANDIDATES), seconds=0.0)
             for task, b in best.iterrows()]
    return pd.DataFrame(rows)


def regret_table(per_task: pd.DataFrame) -> pd.DataFrame:
    """Per rule (``regret``): ``mean regret`` (points of test accuracy) with ``ci95`` (half-width
    of its 95% t interval over tasks), ``top-1 hit rate``, ``tasks`` and ``seconds per task``
    (median cost), best rule first."""
    from scipy import stats

    def ci(v):
        return (stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
                if len(v) > 1 else math.nan)

    g = per_task.groupby("rule")
    out = pd.DataFrame({"mean regret": g["regret"].mean(), "ci95": g["regret"].agg(ci),
                        "top-1 hit rate": g["hit"].mean().astype(float),
                        "tasks": g["task"].nunique(), "seconds per task": g["seconds"].median()})
    return out.sort_values("mean regret").reset_index()
