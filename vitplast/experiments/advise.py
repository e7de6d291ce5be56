"""Which component should I finetune? Rank the components of a model for a task from signals
measured before any finetuning run.

Rules (``RULES``; each ranks the components of ``components.TABLE``, 1 = finetune this one):

- ``plasticity [embedding]`` and ``plasticity [hidden]``: the component's measured plasticity
  under each protocol (pairs of a pretraining-domain image and a task image): the paper's
  advice read literally (Takeaway 3).
- ``relative plasticity [hidden]``: the same pairs' plasticity in units of the component's own
  input and output scale (``vitplast.measure.relative``): unchanged by the residual-stream gauge.
- ``gradient norm``: the norm of the task loss's gradient on the component, one batch, a new
  head (the paper's Fig. 4 signal, at step 0); it grows with the component's size.
- ``Auto-RGN``: the relative gradient norm ||g|| / ||theta|| of each parameter tensor, averaged
  over the component's tensors (Auto-RGN of Surgical Fine-Tuning, Lee et al., ICLR 2023).
- ``gradient norm per parameter``: ||g|| / sqrt(#parameters) (objection 4, docs/objections.md).
- ``loss drop``: how much a few SGD steps on the component alone (the one training loop,
  ``finetune.run``) lower the training loss of a fixed batch, at each configuration's LR of
  ``loss_drop_lrs`` (the middle of its grid in the main study).
- ``paper: MHA``: always MHA first (no signal, no cost).

``rank`` computes them for one model and task (seconds on a laptop CPU), optionally on the
model under the residual-stream gauge (``c``: the same function, ``vitplast.measure.gauge``);
``stored`` keeps them beside a study's runs as a companion file (``advise-<hash>.json``, with
its settings and provenance: computed once, validated when read, recomputed when an input
changes, a missing rule computed alone); ``rank_tasks`` reads or computes them for many tasks.
Their scores against the oracle, as tables and findings rows, are ``vitplast.report.regret``'s
(notebook 04b).

Not in the paper.
"""

from __future__ import annotations

import copy
import json
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from vitplast import cached, models, provenance
from vitplast.datasets import tasks
from vitplast.experiments import store, studies
from vitplast.inputs import fits, model_device, to_model
from vitplast.measure import components, empirical, gauge, plasticity, relative
from vitplast.measure.empirical import SOURCE
from vitplast.train import batched, finetune, trainees

#: The plasticity rules: rule -> (the protocol it measures under, what it measures: Definition
#: 1's ``plasticity`` or ``relative`` plasticity, ``vitplast.measure.relative``).
PLASTICITY_RULES = {"plasticity [embedding]": ("embedding", "plasticity"),
                    "plasticity [hidden]": ("hidden", "plasticity"),
                    "relative plasticity [hidden]": ("hidden", "relative")}
#: The rules computed from one backward pass (``_gradients``).
GRADIENT_RULES = ("gradient norm", "Auto-RGN", "gradient norm per parameter")
RULES = (*PLASTICITY_RULES, *GRADIENT_RULES, "loss drop", "paper: MHA")
#: The columns of ``rank`` (and of a companion's ``rows``).
COLUMNS = ["task", "rule", "config", "score", "rank", "seconds"]


def candidates() -> tuple[str, ...]:
    """The configurations the rules rank, read from ``components.TABLE`` when called: one per
    component (each trains that component, plus the head)."""
    return components.names(components.TABLE)


def loss_drop_lrs() -> dict[str, float]:
    """Peak LR of the ``loss drop`` rule per configuration of ``candidates()``: the middle of
    its grid in the main study (``studies.get("main").spec.lrs``). A component that study has
    no grid for (a row added to the table) gets the middle of the full configuration's grid:
    every parameter trains in it."""
    grids = studies.get("main").spec.lrs
    middle = {c: grid[len(grid) // 2] for c, grid in grids.items()}
    return {c: middle.get(c, middle["full"]) for c in candidates()}


def _draw(dataset, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` examples of ``dataset`` drawn with ``seed``: images (n, C, H, W), labels (n)."""
    idx = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    items = [dataset[int(i)] for i in idx]
    return torch.stack([x for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


def _plasticity(model, task: str, n_pairs: int, source: str | None, rules) -> tuple[dict, dict]:
    """Per plasticity rule of ``rules``: per component, its quantity (mean over layers) under
    its protocol on ``n_pairs`` pairs of the task; and its cost (the pairs' loading shared)."""
    clock = time.perf_counter()
    pairs = empirical.task_pairs(task, source, n_pairs=n_pairs, model=model)
    loading = time.perf_counter() - clock
    scores, cost = {}, {}
    for rule in rules:
        clock = time.perf_counter()
        protocol, quantity = PLASTICITY_RULES[rule]
        if quantity == "relative":
            ranked = relative.ranking(relative.measure(model, pairs, protocol=protocol))
            score = ranked.set_index("component")["relative_plasticity"]
        else:
            rates = plasticity.measure(model, pairs, protocol=protocol, progress=False)
            score = plasticity.ranking(rates).set_index("component")["plasticity"]
        scores[rule] = score.rename(str).rename(index=str)
        cost[rule] = loading + time.perf_counter() - clock
    return scores, cost


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
    g = g[g["component"].isin(candidates())].groupby("component").agg(
        g2=("g2", "sum"), rgn=("rgn", "mean"), size=("size", "sum"))
    return pd.DataFrame({"gradient norm": np.sqrt(g["g2"]), "Auto-RGN": g["rgn"],
                         "gradient norm per parameter": np.sqrt(g["g2"] / g["size"])})


class _Still(trainees.Single):
    """``trainees.Single`` with its model in eval mode (no dropout: the loss drop is the
    update's alone)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        return super().forward(x)


def _constant(step: int, *, lr: float, steps: int, warmup_steps: int) -> float:
    """The loss drop's schedule (``finetune.run``'s ``schedule``): ``lr`` at every step."""
    return lr


def _loss_drop(model, config: str, train, probe: tuple, before: float, *, lr: float,
               steps: int, batch_size: int, seed: int) -> float:
    """``before`` (the loss on the ``probe`` batch) minus that loss after ``steps`` SGD steps
    of the one training loop (``finetune.run``: momentum 0.9, clip 1.0, constant LR ``lr``,
    fp32, eval mode, step k on the ``batch_size`` images drawn with ``seed + 1 + k``) on
    ``config``'s parameters and the head; -inf when the run diverges
    (``finetune.DIVERGENCE_FACTOR``)."""
    m = copy.deepcopy(model)
    args = {**batched.DEFAULTS, **dict(
        config=config, steps=steps, batch_size=batch_size, momentum=0.9, weight_decay=0.0,
        clip_grad_norm=1.0, warmup_steps=0, seed=seed, device=model_device(m),
        keep_best=False, precision="fp32", progress=False)}
    batches = (_draw(train, batch_size, seed + 1 + k) for k in range(steps))
    [result] = finetune.run(m, _Still, (train, None, None), args, [lr], desc=f"drop {config}",
                            batches=batches, schedule=_constant)
    with torch.no_grad():
        after = float(F.cross_entropy(m.eval()(probe[0]), probe[1]))
    return before - after if math.isfinite(after) and not result.diverged else -math.inf


def rank(model_name: str, task: str, *, rules=RULES, n_pairs: int = 64, batch_size: int = 32,
         steps: int = 2, source: str | None = SOURCE, seed: int = 0, c: float = 1.0,
         threads: int | None = 1, weights_file: str = "", model_args: dict | None = None
         ) -> pd.DataFrame:
    """Every rule's ranking of the components (``candidates()``) for finetuning ``model_name``
    on ``task``. Used by notebook 04b (``rank_tasks``).

    Args:
        model_name: a model ``models.load_model`` knows (default the embedded one), as the
            notebooks take it: with ``weights_file`` and ``model_args`` (timm keyword
            arguments) for a model of one's own, e.g. ``rank("vit_tiny_patch16_224", "digits",
            weights_file="tiny32.safetensors", model_args=dict(img_size=32, patch_size=4))``.
            The task's images are fitted to the model's input (``empirical.load_task_for``, as
            in notebooks 02 and 03); the head is a new one of the task's classes.
        task: a task name (``tasks.TASKS``).
        rules: which of ``RULES`` to compute (cheaper with fewer).
        n_pairs: pairs for the plasticity rules; batch_size: images per SGD step of the
            loss-drop rule (twice as many in the one batch the gradient rules and the loss drop
            are measured on); steps: SGD steps of the loss-drop rule; source: the pretraining
            domain of the pairs.
        c: the residual-stream gauge applied after the new head (``gauge.rescale_stream``; 1: none):
            the same function, so a rule whose pick moves with ``c`` reads a parametrisation.
        threads: torch's CPU threads while ranking, restored after (None: as set). One is
            the fastest for a small model on a shared CPU (measured: 6 s against 50 s for two
            threads on a busy 2-core machine).

    Returns:
        One row per rule x component (``COLUMNS``): ``task``, ``rule``, ``config``, ``score``
        (higher: sooner), ``rank`` (1 = finetune this one) and ``seconds`` (the rule's cost on
        this task).
    """
    unknown = set(rules) - set(RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}; valid: {list(RULES)}")
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        return _rank(model_name, task, rules=rules, n_pairs=n_pairs, batch_size=batch_size,
                     steps=steps, source=source, seed=seed, c=c, own=dict(
                         weights_file=weights_file or None, **(model_args or {})))
    finally:
        torch.set_num_threads(before)


def _rank(model_name: str, task: str, *, rules, n_pairs: int, batch_size: int, steps: int,
          source: str | None, seed: int, c: float, own: dict) -> pd.DataFrame:
    """``rank``'s work, at the thread count it set; ``own``: ``load_model``'s weights file and
    timm keyword arguments."""
    t, configs = tasks.load(task), candidates()
    if own["weights_file"] is None:
        own.pop("weights_file")
    model = models.load_model(model_name, **{**own, "num_classes": t.num_classes})
    if not fits(model, (t.in_chans, t.img_size, t.img_size)):  # resized, as notebooks 02-03
        t = empirical.load_task_for(task, model)
    models.new_head(model, t.num_classes, seed=seed)
    if c != 1:
        gauge.rescale_stream(model, c)
    # the gradient rules' batch, the drop's
    probe = to_model(model, *_draw(t.train, 2 * batch_size, seed))
    scores, cost = _plasticity(model, task, n_pairs, source,
                               [r for r in rules if r in PLASTICITY_RULES])
    if any(r in GRADIENT_RULES for r in rules):
        clock = time.perf_counter()
        g = _gradients(model, *probe)
        elapsed = time.perf_counter() - clock
        scores.update({r: g[r] for r in rules if r in GRADIENT_RULES})
        cost.update({r: elapsed for r in rules if r in GRADIENT_RULES})  # one pass, three rules
    if "loss drop" in rules:
        clock, lrs = time.perf_counter(), loss_drop_lrs()
        with torch.no_grad():
            before = float(F.cross_entropy(model.eval()(probe[0]), probe[1]))
        scores["loss drop"] = pd.Series({k: _loss_drop(model, k, t.train, probe, before,
                                                       lr=lrs[k], steps=steps,
                                                       batch_size=batch_size, seed=seed)
                                         for k in configs})
        cost["loss drop"] = time.perf_counter() - clock
    if "paper: MHA" in rules:
        scores["paper: MHA"], cost["paper: MHA"] = pd.Series(
            {k: float(k == "MHA") for k in configs}), 0.0
    out = pd.DataFrame([dict(task=task, rule=r, config=k, score=float(scores[r][k]),
                             seconds=cost[r]) for r in rules for k in configs])
    out["rank"] = out.groupby("rule")["score"].rank(ascending=False, method="first").astype(int)
    return out[COLUMNS]


def settings(model_name: str, task: str, *, n_pairs: int = 64, batch_size: int = 32,
             steps: int = 2, source: str | None = SOURCE, seed: int = 0, c: float = 1.0,
             threads: int | None = 1) -> dict:
    """Everything a companion's rankings depend on (``stored``), its name's hash: ``rank``'s
    arguments, the model's weights (sha256 of the embedded checkpoint; else its name) and the
    loss-drop rule's LRs. ``threads`` is in it: the ``seconds`` column depends on it."""
    weights = (models.embedded_checkpoints()["final"]["sha256"]
               if model_name == models.EMBEDDED_NAME else model_name)
    return dict(task=task, model=model_name, weights=weights, c=float(c), n_pairs=n_pairs,
                batch_size=batch_size, steps=steps, source=source or "", seed=seed,
                threads=threads, loss_drop_lr=loss_drop_lrs())


def _problems(saved: dict, expected: dict) -> list[str]:
    """Why a companion's content is not the rankings of ``expected``'s settings."""
    moved = [k for k, v in expected.items() if saved.get(k) != v]
    if moved:
        return [f"settings {moved} differ from the stored ones"]
    rows, configs = pd.DataFrame(saved.get("rows") or [], columns=COLUMNS), candidates()
    bad = [r for r, g in rows.groupby("rule") if r not in RULES or sorted(g["config"]) != sorted(
        configs) or sorted(g["rank"]) != list(range(1, len(configs) + 1))
        or not np.isfinite(g["seconds"].astype(float)).all()]
    return [f"rules {bad}: not one full ranking of {list(configs)}"] if bad else []


def stored(root, model_name: str, task: str, *, rules=RULES, **kwargs) -> pd.DataFrame:
    """``rank``'s rows for ``task`` kept beside a study in ``root``: the companion file
    ``advise-<hash of settings(...)>.json`` (the settings, ``rows``, ``provenance`` of each
    computation). Read and validated (a file that does not hold its settings' full rankings
    is computed again); a rule of ``rules`` it lacks is computed alone and added; a change
    of any setting (weights, pairs, steps, c...) names another file, computed anew."""
    expected = settings(model_name, task, **kwargs)
    name = f"advise-{cached.config_hash(expected)}.json"
    saved = store.Store(root).companion(name) or {}
    if _problems(saved, json_round(expected)):
        saved = {}
    rows = pd.DataFrame(saved.get("rows") or [], columns=COLUMNS)
    missing = [r for r in rules if r not in set(rows["rule"])]
    if missing:
        new = rank(model_name, task, rules=missing, **kwargs)
        rows = pd.concat([rows, new], ignore_index=True) if len(rows) else new
        # where ``rank`` computed: load_model's device (CUDA when available)
        made = dict(provenance.provenance(models.pick_device()), rules=missing)
        store.Store(root).write_companion(name, dict(
            expected, rows=rows.to_dict("records"),
            provenance=[*saved.get("provenance", []), made]))
    return rows[rows["rule"].isin(rules)].reset_index(drop=True)


def json_round(value):
    """``value`` as it reads back from JSON (tuples as lists, keys as text)."""
    return json.loads(json.dumps(value, default=str))


def rank_tasks(model_name: str, task_names, *, root=None, **kwargs) -> pd.DataFrame:
    """``rank`` on each task: kept beside a study in ``root`` (``stored``), else in the user
    cache (load-or-compute, keyed by its arguments). Used by notebook 04b and
    ``vitplast.report.regret``."""
    kwargs = {"threads": 1, **kwargs}  # in the key: the cost column depends on it
    if root is not None:
        return pd.concat([stored(root, model_name, t, **kwargs) for t in task_names],
                         ignore_index=True)
    return pd.concat([cached.load_or_compute("advise", dict(model=model_name, task=t, **kwargs),
                                            lambda t=t: rank(model_name, t, **kwargs))
                      for t in task_names], ignore_index=True)
