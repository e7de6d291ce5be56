"""Empirical plasticity of a model across tasks, protocols and pretraining checkpoints, and
how its ranking of components compares with the paper's.

Paper: section 4, Fig. 2-3 and Takeaway 2 (on ViT-B: MHA > FC1 > FC2 > LN2 > LN1, with MHA,
FC1, FC2 above 1 and the LayerNorms below; the values are ``vitplast.paper.FIG2_PLASTICITY``,
and ``plasticity_findings.plasticity_ranking`` compares with them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vitplast import cached, models
from vitplast.datasets import tasks as registry
from vitplast.measure.components import TABLE
from vitplast.measure.fingerprint import measuring, stamp, table_key
from vitplast.measure.pairs import PROTOCOLS, Pairs, make_pairs
from vitplast.measure.plasticity import measure, order, ranking, scale_curve, summarize
from vitplast.weights import ModelSpec, name_of, own

#: The pretraining-domain task whose test images are the x of each pair by default: the
#: embedded model's Fashion-MNIST (the paper's ImageNet val).
SOURCE = "fmnist"
#: Seed of the pretraining-domain sample: another draw than the tasks' (seed 0), because the
#: Fashion-MNIST tasks are built from the same test images; with one seed, pair i would hold
#: the same garment clean and corrupted, not two unrelated images as in the paper.
SOURCE_SEED = 1


def load_task_for(name: str, model=None, data_root: str | None = None, *, seed: int = 0,
                  **task_kwargs):
    """An embedded task, or a paper dataset under ``data_root`` with ``model``'s transforms.

    An embedded task (1 x 28 x 28) for a model that takes other images (a timm ViT by name)
    is resized to the model's input (``vitplast.inputs.Fitted``): any ViT can be measured
    on it offline."""
    return registry.fitted(registry.load(name, data_root, model=model, seed=seed, **task_kwargs),
                           model)


def task_pairs(task: str, source: str | None = SOURCE, *, n_pairs: int = 256, model=None,
               data_root: str | None = None, seed: int = 0, **task_kwargs) -> Pairs:
    """Image pairs for a task, as the paper builds them.

    With a ``source`` (the pretraining domain, the paper's ImageNet val): x = source test
    image i (drawn with ``SOURCE_SEED``), y = task test image i, unshuffled. Without one (or
    ``source == task``): random pairs within the task's test set.
    """
    y_task = load_task_for(task, model, data_root, **task_kwargs)
    if not source or source == task:
        return make_pairs(y_task.test, n_pairs=n_pairs, seed=seed)
    x_task = load_task_for(source, model, data_root, seed=SOURCE_SEED, **task_kwargs)
    return make_pairs(x_task.test, y_task.test, n_pairs=n_pairs)


def measure_tasks(model_name: str | ModelSpec, tasks: list[str], *, protocols=PROTOCOLS,
                  checkpoints=("final",), source: str | None = SOURCE, data_root: str = "",
                  n_pairs: int = 256, batch_size: int = 64, device=None, workers: int = 0,
                  progress: bool = True, components=TABLE) -> pd.DataFrame:
    """``measure`` over checkpoints x tasks x protocols, as one tidy table with ``model``,
    ``checkpoint`` and ``task`` columns.

    On the embedded model each (checkpoint, task, protocol) is load-or-compute, cached under
    the cache folder by its arguments, so notebooks measuring the same thing share it (02 and
    04 both measure the final checkpoint); other models are measured every time.

    Args:
        model_name: ``"vitplast_fmnist"`` or a timm name (``checkpoints`` then only label).
        tasks: embedded task names, or paper dataset names with ``data_root``.
        source: the pretraining-domain task whose test images are the x of each pair
            (the paper's ImageNet val); ``None`` or ``""`` pairs images within each task.
        data_root: folder of the paper's datasets (``vitplast.datasets.paper_datasets``).
        workers: DataLoader workers reading the pairs (a runtime setting: not in the cache
            key).
        components: the component table measured (``components.TABLE``; ``components.
            extended`` adds rows): its tables are stamped with its fingerprint
            (``fingerprint.stamp``), and another table's are cached apart
            (``fingerprint.table_key``).
    """
    frames = []
    for ckpt in checkpoints:
        kwargs = {"checkpoint": ckpt} if model_name == models.EMBEDDED_NAME else {}
        model = None  # loaded at the first measurement not in the cache
        for name in tasks:
            for protocol in protocols:
                def compute(name=name, protocol=protocol):
                    nonlocal model
                    model = model or models.load_model(model_name, device=device, **kwargs)
                    pairs = task_pairs(name, source, n_pairs=n_pairs, model=model,
                                       data_root=data_root)
                    return measure(model, pairs, protocol=protocol, batch_size=batch_size,
                                   workers=workers, progress=progress,
                                   meta=dict(model=name_of(model_name), checkpoint=ckpt,
                                             task=name),
                                   components=components)
                if model_name != models.EMBEDDED_NAME:
                    frames.append(compute())
                    continue
                key = dict(model_name=model_name, checkpoint=ckpt, task=name, protocol=protocol,
                           source=source or "", n_pairs=n_pairs, batch_size=batch_size,
                           **table_key(components))
                frames.append(cached.load_or_compute("rates", key, compute,
                                                     measured_by=measuring(components)))
    return pd.concat(frames, ignore_index=True)


def task_rates(model_name: str | ModelSpec, task: str, source: str | None = SOURCE, *,
               checkpoint: str = "final", protocol: str = "hidden", n_pairs: int = 256,
               batch_size: int = 64, data_root: str = "", root=None,
               components=TABLE) -> pd.DataFrame:
    """The per-pair rates of every component (``plasticity.measure``, a ``task`` column) of
    ``model_name`` (its ``checkpoint`` when embedded) on ``task_pairs(task, source)``,
    load-or-compute keyed by every argument and the model's weights
    (``models.weights_id``); with ``root``, kept beside a study there as arrays
    (``cached.kept_table``); every component of ``components`` (as ``measure_tasks``: stamped
    with its fingerprint, another table's cached apart).

    Paper: Definition 1 (notebook 01's estimator on the embedded model)."""
    def compute():
        model = models.load_model(model_name, checkpoint=checkpoint)
        pairs = task_pairs(task, source, n_pairs=n_pairs, model=model, data_root=data_root)
        return measure(model, pairs, protocol=protocol, batch_size=batch_size,
                       meta=dict(task=task), progress=False, components=components)

    key = dict(model_name=model_name, checkpoint=checkpoint, task=task, source=source or "",
               protocol=protocol, n_pairs=n_pairs, batch_size=batch_size, data_root=data_root,
               weights=models.weights_id(model_name, [checkpoint]), **table_key(components))
    return cached.kept_table("task-rates", key, compute, root, arrays=True,
                             **stamp(components))


def checkpoint_epochs(model_name: str, checkpoints) -> dict[str, float]:
    """Checkpoint name -> pretraining epoch, from the embedded manifest (NaN elsewhere)."""
    if model_name != models.EMBEDDED_NAME:
        return {c: np.nan for c in checkpoints}
    known = models.embedded_checkpoints()
    return {c: known[c]["epoch"] for c in checkpoints}


def plasticity_study(model_name: str | ModelSpec, tasks: list[str], *, checkpoints=("final",),
                     pretraining_tasks: list[str] | None = None, source: str | None = SOURCE,
                     data_root: str = "", n_pairs: int = 256, batch_size: int = 64,
                     workers: int = 0, root=None, components=TABLE) -> pd.DataFrame:
    """Notebook 02's measurement, load-or-compute (cached under the cache folder, keyed by
    every argument but ``workers`` and by the model's weights, ``models.weights_id``; with
    ``root``, kept beside a study there as arrays: ``cached.kept_table``): the last checkpoint
    on every task of ``tasks``, the earlier checkpoints on those of ``tasks`` in
    ``pretraining_tasks`` only (default: all tasks), both protocols, no progress bars; every
    component of ``components`` (as ``measure_tasks``).

    ``model_name``: a name, or a ``weights.ModelSpec`` that carries one's own weights file and
    architecture (``models.model_spec``: what a notebook's setup returns).

    Paper: section 4, Fig. 2-3.
    """
    for name in [*tasks, *(pretraining_tasks or []), *([source] if source else [])]:
        registry.source(name, data_root)  # "unknown task", naming the valid ones
    *early, last = list(checkpoints)
    along = [t for t in tasks if pretraining_tasks is None or t in pretraining_tasks]
    if early and not along:
        raise ValueError(f"pretraining_tasks {pretraining_tasks} share no task with tasks "
                         f"{tasks}: the earlier checkpoints are measured on tasks of both")
    weights_file = str(own(model_name)["weights_file"] or "")  # in the key, as notebooks gave it
    params = dict(model_name=name_of(model_name), weights_file=weights_file,
                  checkpoints=list(checkpoints),
                  tasks=list(tasks), pretraining_tasks=along, source=source,
                  data_root=data_root, n_pairs=n_pairs, batch_size=batch_size,
                  weights=models.weights_id(model_name, checkpoints), **table_key(components))
    kw = dict(source=source, data_root=data_root, n_pairs=n_pairs, batch_size=batch_size,
              workers=workers, progress=False,
              components=components)  # workers: not in the cache key (params)

    def compute():
        frames = [measure_tasks(model_name, along, checkpoints=early, **kw)] if early else []
        frames.append(measure_tasks(model_name, list(tasks), checkpoints=[last], **kw))
        return pd.concat(frames, ignore_index=True)

    return cached.kept_table("plasticity", params, compute, root, arrays=True,
                             **stamp(components))


def embedded_layers(tasks, *, protocol: str = "hidden", n_pairs: int = 256) -> pd.DataFrame:
    """Per task, block and component: the embedded model's plasticity before finetuning and its
    ``ci95`` (``measure_tasks``, ``plasticity.summarize``), components as plain text: the rows
    the study stores keep beside their runs (``confound_plasticity.layer_plasticity``,
    ``stored_layers``). Columns ``task``, ``layer``, ``component``, ``plasticity``,
    ``ci95``."""
    rates = measure_tasks(models.EMBEDDED_NAME, list(tasks), protocols=[protocol],
                          n_pairs=n_pairs, progress=False)
    per_layer = summarize(rates)
    per_layer = per_layer.assign(component=per_layer["component"].astype(str))
    return per_layer[["task", "layer", "component", "plasticity", "ci95"]]


def pooled_layers(rates: pd.DataFrame, checkpoint: str) -> pd.DataFrame:
    """Per (protocol, layer, component) at ``checkpoint``: ``plasticity`` and ``ci95`` of
    ``plasticity.summarize``, averaged over tasks (the figures' pooled view).

    Paper: Fig. 2-3."""
    per_layer = summarize(rates[rates["checkpoint"] == checkpoint], by=("layer", "component"))
    return (per_layer.groupby(["protocol", "layer", "component"], observed=True)
            [["plasticity", "ci95"]].mean().reset_index())


def precision(rates: pd.DataFrame, checkpoint: str) -> pd.DataFrame:
    """How precise the per-layer estimates are with the pairs used: per protocol, the median
    and the largest 95% CI half-width relative to the plasticity, over (task, layer,
    component), and the pairs per estimate."""
    per_layer = summarize(rates[rates["checkpoint"] == checkpoint], by=("layer", "component"))
    rel = per_layer.assign(relative_ci95=per_layer["ci95"] / per_layer["plasticity"])
    return rel.groupby("protocol").agg(pairs=("n", "min"), median_relative_ci95=(
        "relative_ci95", "median"), max_relative_ci95=("relative_ci95", "max")).reset_index()


def task_orders(ranked: pd.DataFrame) -> pd.DataFrame:
    """Per (protocol, task) of a ``plasticity.ranking`` table: the order of the components as
    text (``plasticity.order``)."""
    return (ranked.groupby(["protocol", "task"]).apply(order, include_groups=False)
            .rename("order").to_frame())


def along_pretraining(rates: pd.DataFrame, model_name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Plasticity along the pretraining checkpoints, on the tasks measured at every checkpoint.

    Returns:
        (ranked, curve): ``plasticity.ranking`` per checkpoint in measured order, and its mean
        over those tasks per (protocol, epoch, component), with ``epoch`` from the manifest.

    Paper: not studied there (it measures the final model).
    """
    ckpts = list(dict.fromkeys(rates["checkpoint"]))
    everywhere = set.intersection(*(set(rates.loc[rates["checkpoint"] == c, "task"])
                                    for c in ckpts))
    ranked = ranking(rates[rates["task"].isin(everywhere)])
    ranked["checkpoint"] = pd.Categorical(ranked["checkpoint"], ckpts, ordered=True)
    ranked = ranked.sort_values(["checkpoint", "task", "rank"], kind="stable")
    ranked["checkpoint"] = ranked["checkpoint"].astype(str)
    ranked["epoch"] = ranked["checkpoint"].map(checkpoint_epochs(model_name, ckpts))
    curve = (ranked.groupby(["protocol", "epoch", "component"], observed=True)["plasticity"]
             .mean().reset_index())
    return ranked, curve


def stored_layers(root, task: str, *, n_pairs: int = 256, protocol: str = "embedding"
                  ) -> pd.DataFrame:
    """``embedded_layers`` of one task, measured once and kept beside a study's runs in
    ``root/plasticity-<hash of the settings>.json`` (a store companion, validated when read;
    other settings name another file, measured anew): the file the suite study's
    ``task_measures.task_plasticity`` writes for the same settings (a test holds them to one name).

    Columns: ``task``, ``protocol``, ``layer``, ``component``, ``plasticity``, ``ci95``.
    """
    settings = dict(task=task, n_pairs=n_pairs, protocol=protocol)
    saved = cached.companion(
        root, f"plasticity-{cached.config_hash(settings)}.json",
        compute=lambda: dict(settings, rows=embedded_layers(
            [task], protocol=protocol, n_pairs=n_pairs).drop(columns="task").to_dict("records")),
        **stamp())
    return pd.DataFrame(saved["rows"]).assign(task=task, protocol=protocol)


#: How notebook 02 summarises a component's layers into one number per task (each a function
#: of one task's per-layer rows of ``plasticity.summarize``).
LAYER_SUMMARIES = {"layer mean": lambda g: g["plasticity"].mean(),
                   "layer median": lambda g: g["plasticity"].median(),
                   "layer mean without layer 0": lambda g: g.loc[g["layer"] > 0,
                                                                 "plasticity"].mean()}


def task_summaries(per_layer: pd.DataFrame) -> pd.DataFrame:
    """Per (protocol, task, component) of ``per_layer`` (``plasticity.summarize``, per task,
    layer and component): each of ``LAYER_SUMMARIES`` over its layers, one column each. The
    one computation behind ``layer_summary``'s table and the orders
    ``plasticity_findings.layer_summaries`` states, so that both give the same numbers."""
    groups = per_layer.groupby(["protocol", "task", "component"], observed=True)
    return pd.DataFrame({name: groups.apply(summary, include_groups=False)
                         for name, summary in LAYER_SUMMARIES.items()})


def layer_summary(per_layer: pd.DataFrame) -> pd.DataFrame:
    """Per (component; protocol as columns): each of ``LAYER_SUMMARIES`` (the layer mean, the
    layer median and the mean without layer 0, the layer that reads the raw embedding), taken
    per task by ``task_summaries`` and averaged over tasks: whether one layer decides a
    component's place. ``plasticity_findings.layer_summaries`` states the orders they give."""
    return (task_summaries(per_layer).groupby(["protocol", "component"], observed=True).mean()
            .unstack("protocol"))


def mha_scale_curve(model_name: str | ModelSpec, task: str, scales, *, source: str | None = SOURCE,
                    data_root: str = "", n_pairs: int = 256, batch_size: int = 64,
                    workers: int = 0, root=None) -> pd.DataFrame:
    """``plasticity.scale_curve`` of MHA on ``task``'s pairs (``task_pairs``) of the final
    model, load-or-compute (cached by every argument but ``workers``, a runtime setting, and
    by the model's weights, ``models.weights_id``; with ``root``, kept beside a study there:
    ``cached.kept_table``).

    Paper: not in the paper (objection to the embedding protocol)."""
    def compute():
        model = models.load_model(model_name)
        pairs = task_pairs(task, source, n_pairs=n_pairs, model=model, data_root=data_root)
        return scale_curve(model, pairs, scales=scales, batch_size=batch_size, workers=workers)

    key = dict(model_name=model_name, task=task, scales=list(scales), source=source or "",
               data_root=data_root, n_pairs=n_pairs, batch_size=batch_size,
               weights=models.weights_id(model_name))
    return cached.kept_table("mha-scale-curve", key, compute, root, **stamp())
