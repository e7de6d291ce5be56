"""LR search: bracket each setting's best learning rate on validation with few runs.

Paper: section 2 chooses each configuration's LR from a fixed grid of four. A fixed grid wastes
runs far from the optimum and can leave the best LR at its edge (then the choice is not a
best at all). The search here spends runs where they inform:

1. a setting (task, configuration, seed) starts with three LRs, half a decade apart on
   ``LR_LADDER``, centred on ``start`` (what earlier studies chose for the configuration);
2. while the best of the LRs tried (``best``: validation accuracy, ties broken by the lower
   validation loss at that checkpoint, then the smaller LR) is the smallest or largest tried,
   the next LR beyond it on the ladder is added;
3. it stops when the best has a tried LR on both sides (it is interior), or at the ladder's
   end (then ``bracketed`` is False and the study says so).

A diverged or failed run is worse than any finished one. The search is a pure function of the
outcomes stored so far (``next_lrs``), so a sweep that runs what it asks for, reads the
records back and asks again (``run_search``) resumes from any state. Where each search stands
is read from the store's records once (``records``: setting -> LR -> record), never by
hashing every LR of the ladder for every setting.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from vitplast import models
from vitplast.experiments import confound_variants, runs, sweep
from vitplast.experiments.runs import run_hash
from vitplast.experiments.runtime import Executor, Runtime
from vitplast.experiments.store import Store

#: Half-decade LR steps from 1e-4 to 100: the grid every study's LRs are taken from.
LR_LADDER = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def rung(lr: float) -> int:
    """The index of ``lr`` on ``LR_LADDER``; a ``ValueError`` naming the ladder otherwise."""
    for i, v in enumerate(LR_LADDER):
        if math.isclose(lr, v, rel_tol=1e-9):
            return i
    raise ValueError(f"lr {lr!r} is not on the LR ladder {list(LR_LADDER)}")


def score(record: dict | None) -> tuple[float, float]:
    """How good a run is for choosing its LR: (best validation accuracy, minus the validation
    loss at that checkpoint); a missing, diverged or failed run scores (-inf, -inf)."""
    if not record or record.get("status") != "ok" or record.get("best_val_acc") is None:
        return (-math.inf, -math.inf)
    losses = [h["val_loss"] for h in record.get("history", [])
              if h.get("step") == record.get("best_step") and h.get("val_loss") is not None]
    return (record["best_val_acc"], -losses[0] if losses else -math.inf)


def best(outcomes: dict[float, tuple[float, float]]) -> float | None:
    """The LR with the highest score; ties go to the smaller LR. ``None`` if nothing scored."""
    if not outcomes:
        return None
    return max(sorted(outcomes), key=lambda lr: outcomes[lr])  # max keeps the first of ties


def next_lrs(start: float, outcomes: dict[float, tuple[float, float]]) -> list[float]:
    """The LRs the search still needs, given the ``score`` of every LR tried so far.

    Args:
        start: the centre of the first three LRs (on ``LR_LADDER``).
        outcomes: LR -> ``score`` of each finished run (missing runs left out).

    Returns:
        The first three LRs not yet tried; else the next LR past the best when the best is at
        an edge of the LRs tried; else nothing (bracketed, or at the ladder's end).
    """
    i = rung(start)
    first = [LR_LADDER[j] for j in (i - 1, i, i + 1) if 0 <= j < len(LR_LADDER)]
    todo = [lr for lr in first if lr not in outcomes]
    if todo:
        return todo
    tried = sorted(outcomes)
    top = best(outcomes)
    if top == tried[0] and rung(top) > 0:
        return [LR_LADDER[rung(top) - 1]]
    if top == tried[-1] and rung(top) < len(LR_LADDER) - 1:
        return [LR_LADDER[rung(top) + 1]]
    return []


def bracketed(outcomes: dict[float, tuple[float, float]]) -> bool:
    """Whether the best LR has a tried LR on both sides (a finished search that did not run
    off the ladder)."""
    tried = sorted(outcomes)
    return len(tried) >= 3 and best(outcomes) not in (tried[0], tried[-1])


__all__ = ["LR_LADDER", "best", "bracketed", "next_lrs", "rung", "score"]


@functools.lru_cache(maxsize=1)
def _named() -> dict[str, dict]:
    """The confound study's named variants' run keywords (``Variant.keywords``), from the
    embedded architecture (random weights: no checkpoint is read), made once per process."""
    model = models.load_model(models.EMBEDDED_NAME, pretrained=False, num_classes=10,
                              device="cpu")
    return {name: v.keywords() for name, v in confound_variants.variants(model, {}).items()}


def settings(spec, **runtime) -> list[dict]:
    """A searched study's settings (``spec``: a ``spec_types.Search``), in its order (task >
    configuration > seed): each a dict of ``runs.make_run`` keywords without ``lr``, plus
    ``name`` (for display) and ``start`` (its search's centre), plus ``runtime`` keys (run
    keys of a ``runtime.Runtime``: precision, workers...; the spec's declared ``precision``
    unless ``runtime`` names one; ``eval_every`` is hashed, the others never).

    ``spec.configs`` maps a name to its start LR, or to a dict of run keywords with ``start``
    (e.g. ``dict(config="MHA", prepare="gauge", ablation=dict(c=8.0), start=0.1)``;
    ``variant="MHA sparse"`` starts from that named variant's keywords). A name with a start
    LR alone is a plain configuration (``configurations.CONFIGS``) or a named variant of the
    confound study (``confound_variants.variants``, e.g. ``"MHA sparse"``: its
    ``Variant.keywords``), so that identical runs hash identically.
    """
    if spec.precision:
        runtime = {"precision": spec.precision, **runtime}
    out = []
    for task in spec.tasks:
        for name, start in spec.configs.items():
            if isinstance(start, dict):
                base = _named()[start["variant"]] if "variant" in start else {}
                variant = {**base, **{k: v for k, v in start.items() if k != "variant"}}
            else:
                variant = dict(_named().get(name, dict(config=name)), start=start)
            for seed in spec.seeds:
                out.append(dict(variant, name=name, task=task, seed=seed,
                                **{**spec.fixed, **runtime}))
    return out


def _run(setting: dict, lr: float) -> dict:
    kwargs = {k: v for k, v in setting.items() if k not in ("task", "start", "name")}
    return runs.make_run(setting["task"], lr=lr, check_batch=False, **kwargs)  # checked in
    # the rounds (sweep.run_plan), so that listing a search loads no task


def records(root) -> dict[str, dict[float, dict]]:
    """The store's records, read once, by setting (``runs.setting``: a run without its
    LR) and LR."""
    out: dict[str, dict[float, dict]] = {}
    for record in Store(root).records() if Path(root).is_dir() else []:
        out.setdefault(runs.setting(record["run"]), {})[record["run"]["lr"]] = record
    return out


def _stored(setting: dict, table: dict) -> tuple[dict, dict[float, dict]]:
    """``setting``'s run at its start LR (made and checked once: its runs at other LRs differ
    in ``lr`` alone), and LR -> record of its runs in ``table`` (``records``)."""
    run = _run(setting, setting["start"])
    return run, table.get(runs.setting(run), {})


def _outcomes(stored: dict[float, dict], lrs) -> dict[float, tuple[float, float]]:
    """LR -> ``score`` of the stored runs at ``lrs`` (a failed run, one that raised, counts as
    not tried)."""
    return {lr: score(r) for lr, r in stored.items() if lr in lrs and r["status"] != "failed"}


def _asked(spec, setting: dict, stored: dict) -> list[float]:
    """The LRs of ``setting`` its search has tried or asks for next, and its grid's."""
    outcomes = _outcomes(stored, LR_LADDER)
    return sorted(set(outcomes) | set(next_lrs(setting["start"], outcomes)) | set(spec.grid))


def _asked_runs(spec, settings: list[dict], table: dict) -> list[tuple[dict, dict | None]]:
    """(run, its record in ``table`` or ``None``) for every LR each of ``settings`` has
    tried or asks for next (``_asked``)."""
    out = []
    for s in settings:
        run, stored = _stored(s, table)
        out += [({**run, "lr": lr}, stored.get(lr)) for lr in _asked(spec, s, stored)]
    return out


def search_runs(spec, root, **runtime) -> list[dict]:
    """Every run the search of ``spec`` has asked for so far, given the records under
    ``root``: per setting the runs stored on its path of the search, and the ones it asks
    for next (missing from the store), with ``runtime`` keys; and, where the spec names a
    fixed ``grid`` of LRs, every setting's runs at those LRs too (their outcomes join the
    search's). Read-only."""
    return [run for run, _ in _asked_runs(spec, settings(spec, **runtime), records(root))]


def state(spec, root, *, grid: bool = False, **runtime) -> pd.DataFrame:
    """Where the search of each setting stands: one row per (task, config, seed) with
    ``tried`` (LRs stored), ``best`` (LR), ``bracketed``, ``next`` (LRs still asked for), and
    the best run's ``val_acc``, ``test_acc`` (in %), ``trainable`` count and ``loss_rose``
    (its training loss rose above its first value somewhere: a run which rounding alone can
    move by points; NaN without a best run).

    ``grid``: the same for the spec's fixed ``grid`` instead of its search: ``best`` chosen
    on validation among the grid's LRs only, ``next`` the grid's LRs not stored yet.
    ``runtime``: the run keys its settings were searched with (``settings``), as
    ``search_runs`` takes them.
    """
    rows, lrs, table = [], spec.grid if grid else LR_LADDER, records(root)
    for s in settings(spec, **runtime):
        _, stored = _stored(s, table)
        outcomes = _outcomes(stored, lrs)
        asked = ([lr for lr in lrs if lr not in outcomes] if grid else
                 next_lrs(s["start"], outcomes))
        top = best(outcomes)
        record = stored.get(top)
        acc = {k: 100 * record[k] if record and record.get(k) is not None else math.nan
               for k in ("best_val_acc", "test_acc")}
        rows.append(dict(
            task=s["task"], config=s["name"], seed=s["seed"], tried=sorted(outcomes), best=top,
            bracketed=bracketed(outcomes), next=asked,
            val_acc=acc["best_val_acc"], test_acc=acc["test_acc"],
            trainable=(record or {}).get("trainable"), loss_rose=loss_rose(record)))
    return pd.DataFrame(rows)


def complete_tasks(state: pd.DataFrame) -> list[str]:
    """The tasks of a ``state`` table whose every setting has ended (nothing asked)."""
    done = state.assign(ended=state["next"].map(len) == 0).groupby("task", sort=False)["ended"]
    return [task for task, ended in done.all().items() if ended]


def losses(record: dict | None) -> list[float]:
    """A record's training loss at every logged step (empty without a history)."""
    return [h["loss"] for h in (record or {}).get("history") or [] if "loss" in h]


def loss_rose(record: dict | None) -> float:
    """1.0 if the record's training loss rose above its first logged value, else 0.0; NaN
    without a record or history."""
    seen = losses(record)
    return float(max(seen) > seen[0]) if seen else math.nan


def run_search(spec, root, *, runtime=None, executor=None, sources=()) -> "Outcome":  # noqa: F821
    """Run the search of ``spec`` into ``root`` until every setting of this shard is
    bracketed (or at the ladder's end); resumable at any point. Tasks are taken in the spec's
    order, one at a time, so the store fills task by task; ``runtime.shard`` ``(i, n)`` takes
    every n-th setting from the i-th (n processes share one store, none waiting on another's
    claims). A spec with a fixed ``grid`` runs in two passes: the searches of all its tasks
    first (what the primary questions read), then the grid's runs (which join the searches'
    outcomes, so a search may ask for more after them); the complete store is the same either
    way. Records of identical runs in ``sources`` (other stores) are copied, not re-run
    (``Store.plan``).

    ``runtime`` (a ``runtime.Runtime``): its run keys go to every run; ``limit``: at most
    that many runs trained; ``retry_failed``: a failed record (the run raised) is run again,
    once per call (else its search waits at it); device, ``batch_lrs`` and ``progress`` go to
    ``sweep.run_plan``, as does ``executor`` (a ``runtime.Executor``).

    Each round (``sweep.run_plan``) says what it left: a round whose runs are not stored and
    held by no live process (their job died, or was cancelled before it ran them) ends the
    search there, since what a search asks next depends on them; runs another process holds
    are waited for.

    Returns:
        The search's ``sweep.Outcome``: of every run this call planned, and every run its
        searches asked for that is stored failed; ``trained``, how many it stored.
    """
    runtime, executor = runtime or Runtime(), executor or Executor()
    i, n = runtime.shard or (0, 1)
    mine = settings(spec, **runtime.run_keys())[i::n]
    store, trained, retried, waited, lost = Store(root), 0, set(), False, False
    counted: dict[str, dict] = {}  # run hash -> run: what the outcome is of
    store.tidy()
    passes = [replace(spec, grid=()), spec] if spec.grid else [spec]
    for one, task in ((s, t) for s in passes for t in spec.tasks):
        ours = [s for s in mine if s["task"] == task]
        while not lost and ours and (runtime.limit is None or trained < runtime.limit):
            asked = _asked_runs(one, ours, records(root))
            counted.update({run_hash(r): r for r, record in asked
                            if record is not None and record["status"] == "failed"})
            todo = [(r, stale) for r, stale in store.plan([r for r, _ in asked],
                                                          runtime.retry_failed, sources)
                    if stale is None or json.dumps(r, sort_keys=True) not in retried]
            if not todo:
                if all(record is not None for _, record in asked):
                    break  # every run asked is stored: the searches of this task have ended
                continue  # records came (copied from sources, or another process's): ask again
            if runtime.limit is not None:
                todo = todo[:runtime.limit - trained]
            retried |= {json.dumps(r, sort_keys=True) for r, stale in todo if stale is not None}
            counted.update({run_hash(r): r for r, _ in todo})
            round_ = sweep.run_plan(todo, store, runtime, executor)
            trained += round_.trained
            missing = set(round_.table.loc[round_.table["status"] == "missing", "run"])
            lost = bool(missing - store.claimed())  # not stored, and no live process holds them
            if missing and not lost:  # another process holds the claims: wait for its records
                if not waited and runtime.progress:
                    print("search: waiting for runs another process is training (give each "
                          "process its own settings with --shard I/N)", flush=True)
                waited = True
                time.sleep(30)
    return sweep.outcome(list(counted.values()), store, trained)


__all__ += ["complete_tasks", "loss_rose", "losses", "records", "run_search", "search_runs",
            "settings", "state"]
