"""The paper's measurements on a real pretrained ViT with DINOv2 ViT-S/14's architecture
(weights of unknown pretraining: ``vitplast.fetched``), fetched by ``vitplast weights get
dinov2-small``.

Paper: section 4 (Fig. 2, Takeaway 2), Props. 1-4 (Takeaway 1), and the gauge (not in the paper:
``vitplast.measure.gauge``, ``vitplast.measure.relative``).

``measure_model`` measures, at the model's own input size (224 px), on pairs of two sources
(``SOURCES``: random pairs within each):

- ``layers``: per source, protocol, block and component, the plasticity (Definition 1), its
  relative form (gauge-invariant), the largest observed rate and local Lipschitz estimate, and
  the bounds of Props. 1-4 (``intervals`` and ``relative`` read from one pass per protocol);
- ``stream``: per source and block, the statistics the bounds read (``stream.model_statistics``:
  the RMS token norm r of the embedding, the sigma of the stream each LayerNorm reads, attention
  entropy);
- ``gauge``: per block, the mean |gamma| of its two LayerScales (DINOv2's LayerScale multiplies
  each branch's output: a per-block gauge the model learned);
- ``check``: the per-pair rates (embedding protocol) of the first ``CHECK_PAIRS`` pairs of each
  source, which notebook 02c re-measures where the weights are present;
- ``tasks``: per task of the real-model study, at the study's input size, the plasticity and
  relative plasticity of each component (mean over blocks, both protocols, random pairs within
  the task's test set): what the study's primaries correlate with the gains (``task_plasticity``).

``write`` stores them in ``data/real_vit/measurements/`` (CSV, with ``meta.json``: model, its
weights' sha256, sizes, pairs; ``vitplast weights measure`` makes them); ``read`` reads them
back, so notebook 02c runs without the weights.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import torch
from torch.utils.data import Subset

from vitplast import files, models
from vitplast.datasets import photos, tasks
from vitplast.measure import empirical, fingerprint, intervals, plasticity, relative, stream
from vitplast.measure.pairs import PROTOCOLS, make_pairs

#: The pair sources: random pairs within ``photos`` (crops of scikit-learn's two photographs,
#: ``vitplast.datasets.photos``: natural images, the kind ImageNet-scale ViTs are pretrained
#: on) and within
#: ``fmnist`` (Fashion-MNIST test images upscaled to 224 px, grayscale repeated to 3 channels:
#: the embedded model's world, far from the real model's).
SOURCES = ("photos", "fmnist")
#: The folder of the shipped measurements, under the real-model study's store.
FOLDER = "measurements"
TABLES = ("layers", "stream", "gauge", "check", "tasks")
#: Pairs per source whose per-pair rates are stored (``check``): notebook 02c re-measures them
#: where the weights are present.
CHECK_PAIRS = 8


def source_images(model: torch.nn.Module, source: str, n: int, *, seed: int = 0) -> torch.Tensor:
    """``n`` images of ``source`` (``SOURCES``) in ``model``'s input format."""
    if source == "photos":
        return photos.crops_for(model, n, seed=seed)
    if source == "fmnist":
        test = tasks.fitted(tasks.load("fmnist", seed=seed), model).test
        return torch.stack([test[i][0] for i in range(min(n, len(test)))])
    raise ValueError(f"unknown source {source!r}; valid: {list(SOURCES)}")


def measure_model(model_name: str = "dinov2-small", *, n_pairs: int = 128,
                  batch_size: int = 16, n_lipschitz: int = 4, power_iters: int = 10,
                  stream_images: int = 16, progress: bool = True,
                  device: str = "cpu") -> dict[str, pd.DataFrame]:
    """The tables of the module docstring, measured on ``model_name`` (module docstring).

    Args:
        n_pairs: random pairs per source, within it (from ``2 * n_pairs`` images).
        batch_size: pairs per forward pass.
        n_lipschitz, power_iters: inputs and power-iteration steps of the local Lipschitz
            estimate (``intervals.intervals``).
        stream_images: images per source of the stream statistics.
        device: where the model is measured: the CPU by default, where the shipped tables were
            measured (``recheck`` re-measures them as they were made); on a GPU it runs too
            (every measuring function moves its inputs to the model's device), up to its
            kernels' round-off.
    """
    model = models.load_model(model_name, device=device)
    layers, streams, checks = [], [], []
    for source in SOURCES:
        images = source_images(model, source, 2 * n_pairs)
        pairs = make_pairs(images, n_pairs=n_pairs, seed=0)
        for protocol in PROTOCOLS:  # one pass: rates, statistics, kept inputs and scales
            m = plasticity.measurement(model, pairs, protocol=protocol, batch_size=batch_size,
                                       progress=progress, keep=n_lipschitz, scales=True)
            iv = intervals.from_measurement(model, m, power_iters=power_iters)
            rel = relative.from_measurement(m)
            iv["component"] = iv["component"].astype(str)
            rel["component"] = rel["component"].astype(str)
            table = iv.merge(rel[["layer", "component", "s_in", "s_out",
                                  "relative_plasticity"]], on=["layer", "component"])
            table.insert(0, "source", source)
            layers.append(table)
        few = images[:stream_images]
        st = stream.model_statistics(model, few, token_images=few)
        st.insert(0, "source", source)
        streams.append(st)
        check = plasticity.measure(model, Subset(pairs, range(CHECK_PAIRS)),
                                   protocol="embedding", batch_size=CHECK_PAIRS, progress=False)
        check.insert(0, "source", source)
        checks.append(check)
    gauge = pd.DataFrame([dict(layer=i, ls1_gamma=b.ls1.gamma.abs().mean().item(),
                               ls2_gamma=b.ls2.gamma.abs().mean().item())
                          for i, b in enumerate(model.blocks)])
    return dict(layers=pd.concat(layers, ignore_index=True),
                stream=pd.concat(streams, ignore_index=True), gauge=gauge,
                check=pd.concat(checks, ignore_index=True))


def recheck(check: pd.DataFrame, n_pairs: int, model_name: str = "dinov2-small", *,
            device: str = "cpu") -> pd.DataFrame:
    """The stored per-pair rates ``check`` (``measure_model``'s, made with ``n_pairs`` pairs per
    source) re-measured now on the same pairs (the first ``CHECK_PAIRS`` of each source, rebuilt
    from their seeds), with
    ``rate_now`` and ``rel_diff`` (|now - stored| / stored): what notebook 02c shows where the
    weights are present; ``device`` as ``measure_model``."""
    model = models.load_model(model_name, device=device)
    k = int(check["pair"].max()) + 1
    frames = []
    for source, g in check.groupby("source", sort=False):
        pairs = make_pairs(source_images(model, source, 2 * n_pairs), n_pairs=n_pairs, seed=0)
        now = plasticity.measure(model, Subset(pairs, range(k)), protocol="embedding",
                                 batch_size=k, progress=False)
        now["component"] = now["component"].astype(str)
        frames.append(g.merge(now[["layer", "component", "pair", "rate"]],
                              on=["layer", "component", "pair"], suffixes=("", "_now")))
    out = pd.concat(frames, ignore_index=True)
    out["rel_diff"] = (out["rate_now"] - out["rate"]).abs() / out["rate"]
    return out


def task_plasticity(model_name: str, tasks, *, img_size: int, n_pairs: int = 128,
                    batch_size: int = 32, device: str = "cpu") -> pd.DataFrame:
    """Per task, protocol and component: plasticity and relative plasticity, each the mean over
    blocks, at ``img_size``, on ``n_pairs`` random pairs within the task's test set (one
    ``relative.measure`` pass per task and protocol). What the real-model study's primaries
    read (``vitplast.experiments.study_specs.REAL_PRIMARIES``); ``device`` as
    ``measure_model``."""
    model = models.load_model(model_name, img_size=img_size, device=device)
    rows = []
    for task in tasks:
        pairs = empirical.task_pairs(task, None, n_pairs=n_pairs, model=model)
        for protocol in PROTOCOLS:
            per = relative.measure(model, pairs, protocol=protocol, batch_size=batch_size)
            per["component"] = per["component"].astype(str)
            mean = per.groupby("component")[["plasticity", "relative_plasticity"]].mean()
            rows += [dict(task=task, protocol=protocol, component=c, **v)
                     for c, v in mean.to_dict("index").items()]
    return pd.DataFrame(rows)


def write(tables: dict[str, pd.DataFrame], root: str | Path, meta: dict) -> Path:
    """Store ``tables`` (``measure_model``) and ``meta`` under ``root/measurements``, each file
    written atomically, ``meta.json`` last (its presence means the set is whole), stamped with
    the measuring code that made them (``meta["measuring"]``: ``fingerprint.measuring``)."""
    folder = Path(root) / FOLDER
    for name in TABLES:
        files.write_text(folder / f"{name}.csv", tables[name].to_csv(index=False))
    files.write_json(folder / "meta.json", dict(meta, measuring=fingerprint.measuring()))
    return folder


def read(root: str | Path) -> dict:
    """The stored tables and ``meta`` (``write``), ``stream`` with its columns named as shown
    (``stream.shown``: the plug-in ``ln1_plugin``, stored as ``ln1_bound``);
    ``FileNotFoundError`` naming the command that makes them when they are absent, a warning
    when ``meta["measuring"]`` is not this measuring code's fingerprint
    (``fingerprint.measuring``)."""
    folder = Path(root) / FOLDER
    meta = files.read_json(folder / "meta.json")
    if meta is None:
        raise FileNotFoundError(f"no real-model measurements in {folder}: `vitplast weights "
                                "measure dinov2-small` makes them (after `vitplast weights get "
                                "dinov2-small`)")
    if meta.get("measuring") != fingerprint.measuring():
        warnings.warn(f"the real-model measurements in {folder} were made by other measuring code "
                      f"({meta.get('measuring')!r}, this code: {fingerprint.measuring()!r}): "
                      "remake them with `vitplast weights measure dinov2-small`", stacklevel=2)
    out = {name: pd.read_csv(folder / f"{name}.csv") for name in TABLES}
    return dict(out, stream=stream.shown(out["stream"]), meta=meta)


def means(layers: pd.DataFrame, value: str = "plasticity") -> pd.DataFrame:
    """Per source, protocol and component: the mean over blocks of ``value`` (the paper's Fig. 2
    summary of a component), in one wide table (a column per component)."""
    return (layers.groupby(["source", "protocol", "component"])[value].mean()
            .unstack("component"))
