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
records back and asks again (``vitplast.experiments.studies.run_search``) resumes from any state.
"""

from __future__ import annotations

import math

from vitplast.experiments import confound_variants

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


def settings(study: dict, **runtime) -> list[dict]:
    """A searched study's settings, in its order (task > configuration > seed): each a dict
    of ``runs.make_run`` keywords without ``lr``, plus ``name`` (for display) and ``start``
    (its search's centre), plus ``runtime`` keys (``runs.RUNTIME_KEYS``: device, precision...;
    the study's declared ``precision`` unless ``runtime`` names one;
    never hashed).

    ``study["configs"]`` maps a name to its start LR, or to a dict of run keywords with
    ``start`` (e.g. ``dict(config="MHA", prepare="gauge", ablation=dict(c=8.0), start=0.1)``;
    ``variant="MHA sparse"`` starts from that named variant's keywords).
    A name with a start LR alone is a plain configuration (``components.CONFIGS``) or a named
    variant of the confound study (``confound_variants.variants``, e.g. ``"MHA sparse"``: its
    ``Variant.keywords``), so that identical runs hash identically. The variants' counts come
    from the embedded architecture (no checkpoint is read).
    """
    from vitplast import models

    model = models.load_model(models.EMBEDDED_NAME, pretrained=False, num_classes=10,
                              device="cpu")
    named = {name: v.keywords() for name, v in confound_variants.variants(model, {}).items()}
    if "precision" in study:
        runtime = {"precision": study["precision"], **runtime}
    out = []
    for task in study["tasks"]:
        for name, spec in study["configs"].items():
            if isinstance(spec, dict):
                base = named[spec["variant"]] if "variant" in spec else {}
                variant = {**base, **{k: v for k, v in spec.items() if k != "variant"}}
            else:
                variant = dict(named.get(name, dict(config=name)), start=spec)
            for seed in study["seeds"]:
                out.append(dict(variant, name=name, task=task, seed=seed,
                                **study.get("fixed", {}), **runtime))
    return out


def _run(setting: dict, lr: float) -> dict:
    from vitplast.experiments import runs

    kwargs = {k: v for k, v in setting.items() if k not in ("task", "start", "name")}
    return runs.make_run(setting["task"], lr=lr, **kwargs)


def _outcomes(setting: dict, root, lrs) -> dict[float, tuple[float, float]]:
    """LR -> ``score`` of the setting's stored runs at ``lrs`` (a failed run, one that
    raised, counts as not tried: ``run_search`` runs it again once per call)."""
    out = {}
    for lr in lrs:
        record = _record(root, _run(setting, lr))
        if record is not None and record["status"] != "failed":  # failed: not tried
            out[lr] = score(record)
    return out


def _record(root, run: dict) -> dict | None:
    from vitplast.experiments import store

    return store.Store(root).record(run)


def search_runs(study: dict, root, **runtime) -> list[dict]:
    """Every run the search of ``study`` has asked for so far, given the records under
    ``root``: per setting the runs stored on its path of the search, and the ones it asks
    for next (missing from the store), with ``runtime`` keys; and, where the study names a
    fixed ``grid`` of LRs, every setting's runs at those LRs too (their outcomes join the
    search's). Read-only."""
    out = []
    for setting in settings(study, **runtime):
        outcomes = _outcomes(setting, root, LR_LADDER)
        asked = set(outcomes) | set(next_lrs(setting["start"], outcomes))
        out += [_run(setting, lr) for lr in sorted(asked | set(study.get("grid", ())))]
    return out


def state(study: dict, root, *, grid: bool = False) -> "pd.DataFrame":  # noqa: F821
    """Where the search of each setting stands: one row per (task, config, seed) with
    ``tried`` (LRs stored), ``best`` (LR), ``bracketed``, ``next`` (LRs still asked for), and
    the best run's ``val_acc``, ``test_acc`` (in %), ``trainable`` count and ``loss_rose``
    (its training loss rose above its first value somewhere: a run
    which rounding alone can move by points; NaN without a best run).

    ``grid``: the same for the study's fixed ``grid`` instead of its search: ``best`` chosen
    on validation among the grid's LRs only, ``next`` the grid's LRs not stored yet.
    """
    import pandas as pd

    rows, lrs = [], study["grid"] if grid else LR_LADDER
    for s in settings(study):
        outcomes = _outcomes(s, root, lrs)
        asked = ([lr for lr in lrs if lr not in outcomes] if grid else
                 next_lrs(s["start"], outcomes))
        top = best(outcomes)
        record = _record(root, _run(s, top)) if top is not None else None
        acc = {k: 100 * record[k] if record and record.get(k) is not None else math.nan
               for k in ("best_val_acc", "test_acc")}
        rows.append(dict(
            task=s["task"], config=s["name"], seed=s["seed"], tried=sorted(outcomes), best=top,
            bracketed=bracketed(outcomes), next=asked,
            val_acc=acc["best_val_acc"], test_acc=acc["test_acc"],
            trainable=(record or {}).get("trainable"), loss_rose=loss_rose(record)))
    return pd.DataFrame(rows)


def losses(record: dict | None) -> list[float]:
    """A record's training loss at every logged step (empty without a history)."""
    return [h["loss"] for h in (record or {}).get("history") or [] if "loss" in h]


def loss_rose(record: dict | None) -> float:
    """1.0 if the record's training loss rose above its first logged value, else 0.0; NaN
    without a record or history."""
    seen = losses(record)
    return float(max(seen) > seen[0]) if seen else math.nan


def reuse(runs: list[dict], root, sources) -> int:
    """Copy into ``root`` the records of ``runs`` that another store in ``sources`` holds
    (same hash: the same run, whatever study made it); return how many were copied."""
    import shutil

    from vitplast.experiments import store

    into, copied = store.Store(root), 0
    for run in runs:
        if into.has(run):
            continue
        for source in map(store.Store, sources):
            if source.has(run):
                into.path(run).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source.path(run), into.path(run))
                copied += 1
                break
    return copied


def run_search(study: dict, root, *, shard: str | tuple[int, int] = (0, 1), sources=(),
               runtime: dict | None = None, progress: bool = True, **sweep_kwargs) -> int:
    """Run the search of ``study`` into ``root`` until every setting of this shard is
    bracketed (or at the ladder's end); resumable at any point. Tasks are taken in the study's
    order, one at a time, so the store fills task by task; shard ``(i, n)`` takes every n-th
    task from the i-th (n processes share one store without waiting on each other's claims).
    A study with a fixed ``grid`` runs in two passes: the searches of all its tasks first (what
    the primary questions read), then the grid's runs (which join the searches' outcomes, so
    a search may ask for more after them); the complete store is the same either way.
    Records of identical runs in ``sources`` (other stores) are copied, not re-run; a failed
    record (the run raised) is run again, once per call.
    ``runtime``: run keys that change how runs execute (``precision``, ``workers``...), never
    what they compute; ``sweep_kwargs`` go to ``sweep.run_sweep`` (device, executor...).

    Returns:
        The number of runs this call trained.
    """
    import time

    from vitplast.experiments import sweep
    from vitplast.experiments.runs import run_hash

    i, n = sweep.parse_shard(shard)
    trained, retried, waited = 0, set(), False
    passes = [dict(study, grid=()), study] if study.get("grid") else [study]
    for one in (dict(s, tasks=[task]) for s in passes for task in study["tasks"][i::n]):
        while True:
            runs = search_runs(one, root, **(runtime or {}))
            if reuse(runs, root, sources):  # copied outcomes may move the search: ask again
                continue
            missing = [r for r in runs if (record := _record(root, r)) is None or (
                run_hash(r) not in retried and record["status"] == "failed")]
            if not missing:
                break
            retried |= {run_hash(r) for r in missing}
            done = sweep.run_sweep(missing, root, progress=progress, retry_failed=True,
                                   **sweep_kwargs)
            stored = int((done["status"] != "missing").sum())
            trained += stored
            if not stored:  # another process holds the claims: wait for its records
                if not waited and progress:
                    print("search: waiting for runs another process is training (a search "
                          "asks for one LR at a time: give each process its own tasks with "
                          "--shard I/N)", flush=True)
                waited = True
                time.sleep(30)
    return trained


__all__ += ["loss_rose", "losses", "reuse", "run_search", "search_runs", "settings",
            "state"]
