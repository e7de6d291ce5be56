"""Tasks: the one registry of downstream tasks, and ``load`` for any of them.

Paper: section 2 (datasets; "train sets split 80/20 train/val").

A task is a name of ``TASKS``, from one of two sources:

- ``embedded``: built offline from Fashion-MNIST and scikit-learn's digits
  (``vitplast.datasets.data``), or generated (glyphs, drawn pictures, relabellings: the task suite,
  ``vitplast.datasets.suite``), in the embedded model's format (1 x 28 x 28).
- ``paper``: the paper's 11 datasets, read from files under ``data_root``
  (``vitplast.datasets.paper_datasets``), with timm's transforms for the model they are loaded for.

``load(name, data_root, **options)`` returns a ``Task`` either way: the source gives a
train+val set and a test set (or none: then 80/20 train/test first), and ``split`` cuts
train/val 80/20 with the same seed. ``source`` validates a name without loading anything
(``vitplast.experiments.runs`` does, for every run).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.utils.data import Dataset, Subset

from vitplast import inputs
from vitplast.datasets import data, paper_datasets, suite

#: Names of the embedded tasks: ``vitplast.datasets.data.EMBEDDED_TASKS`` (Fashion-MNIST under
#: shifts, digits) and the task suite's generated ones (``vitplast.datasets.suite.GENERATED``).
EMBEDDED = tuple(data.EMBEDDED_TASKS) + suite.GENERATED
#: Names of the paper's datasets (``vitplast.datasets.paper_datasets.PAPER_DATASETS``).
PAPER = tuple(paper_datasets.PAPER_DATASETS)
#: Every task: name -> source, ``"embedded"`` or ``"paper"`` (needs ``data_root``).
TASKS = {**{name: "embedded" for name in EMBEDDED}, **{name: "paper" for name in PAPER}}
#: ``load`` options per source (besides ``model``, which every source takes).
OPTIONS = {"embedded": ("train_size", "test_size", "severity", "seed", "root"),
           "paper": ("severity", "img_size", "mean", "std", "crop_pct", "interpolation",
                     "seed")}


@dataclass
class Task:
    """A classification task: train / val / test splits and what the model needs to know.

    Attributes:
        name: registry name, e.g. ``"fmnist_contrast"``.
        train, val, test: datasets yielding ``(image, label)``; images normalised.
        num_classes: number of labels.
        in_chans, img_size: image channels and side length.
    """

    name: str
    train: Dataset
    val: Dataset
    test: Dataset
    num_classes: int
    in_chans: int = 1
    img_size: int = 28


def split(dataset: Dataset, fraction: float = 0.8, seed: int = 0) -> tuple[Subset, Subset]:
    """Deterministic random split into (first ``fraction``, rest), as the paper's 80/20.

    Paper: section 2, "train sets split 80/20 train/val".
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    cut = int(round(fraction * len(dataset)))
    return Subset(dataset, perm[:cut]), Subset(dataset, perm[cut:])


def stack(dataset: Dataset, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``limit`` items of a dataset as two tensors (images, labels)."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    items = [dataset[i] for i in range(n)]
    return torch.stack([x for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


def source(name: str, data_root: str | Path | None = None) -> str:
    """The source of task ``name`` (``"embedded"`` or ``"paper"``), or a ``ValueError``
    naming the valid tasks: for an unknown name, or a paper dataset without ``data_root``."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: embedded tasks {list(EMBEDDED)}, and "
                         f"with data_root the paper datasets {list(PAPER)}")
    if TASKS[name] == "paper" and not data_root:
        raise ValueError(f"unknown task {name!r} without data_root: it is a paper dataset, "
                         "read from files; give data_root (the folder of the paper datasets, "
                         "layouts: vitplast.datasets.paper_datasets), or an embedded task "
                         f"{list(EMBEDDED)}")
    return TASKS[name]


def load(name: str, data_root: str | Path | None = None, *, model=None, **options) -> Task:
    """Build task ``name`` of ``TASKS``: offline for an embedded task, from the files under
    ``data_root`` for a paper dataset.

    Embedded tasks are cached in memory (a sweep builds each once): treat them as read-only.

    Args:
        name: a name of ``TASKS``.
        data_root: folder of the paper's datasets (layouts: ``vitplast.datasets.paper_datasets``);
            needed for paper datasets only.
        model: the timm model (or name) a paper dataset is loaded for: its data config gives
            the transforms (``paper_datasets.data_config``; default the paper's ViT-B/16
            in21k). Embedded tasks are in the embedded model's format and ignore it.
        **options: the source's ``OPTIONS``. Embedded: ``train_size`` and ``test_size``
            (Fashion-MNIST images taken from its train and test sets; default 5000, 2000),
            ``severity`` (corruptions, 1..5, default 5), ``seed`` (subsampling, noise and
            splits), ``root`` (a Fashion-MNIST folder, ``data.fashion_mnist_arrays``).
            Paper: ``severity`` (CIFAR-10-C), ``img_size``, ``mean``, ``std``, ``crop_pct``,
            ``interpolation`` (override the model's) and ``seed`` (the splits).

    Raises:
        ValueError: unknown task or option, naming the valid ones.
        FileNotFoundError: a paper dataset's file is missing (the message names its layout).
    """
    origin = source(name, data_root)
    unknown = sorted(set(options) - set(OPTIONS[origin]))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for the {origin} task {name!r}; "
                         f"valid: {list(OPTIONS[origin])}")
    if origin == "embedded":
        return _embedded(name, **options)
    return _paper(name, Path(data_root), model=model, **options)


@functools.lru_cache(maxsize=16)
def _embedded(name: str, *, seed: int = 0, **options) -> Task:
    build = suite.sets if name in suite.GENERATED else data.embedded_sets
    trainval, test, num_classes = build(name, seed=seed, **options)
    return _split(name, trainval, test, num_classes, seed)


def _paper(name: str, root: Path, *, model=None, severity: int = 5, seed: int = 0,
           **overrides) -> Task:
    """A paper dataset, transformed as ``model`` (default the paper's) expects; ``overrides``
    (img_size, mean, std, crop_pct, interpolation) win over the model's values."""
    config = paper_datasets.data_config(paper_datasets.PAPER_MODEL if model is None else model,
                                        **overrides)
    trainval, test, num_classes = paper_datasets.PAPER_DATASETS[name](root, severity=severity)
    task = _split(name, trainval, test, num_classes, seed)
    train_tf, eval_tf = paper_datasets.paper_transforms(**config)
    return Task(name, paper_datasets.Transformed(task.train, train_tf),
                paper_datasets.Transformed(task.val, eval_tf),
                paper_datasets.Transformed(task.test, eval_tf), num_classes, in_chans=3,
                img_size=config["img_size"])


def fitted(task: Task, model) -> Task:
    """``task`` in the format ``model`` takes: an embedded task (1 x 28 x 28) for a model built
    for other images (a timm ViT, a fetched real model) has its images resized, grayscale
    repeated to the model's channels and normalised as the model expects
    (``vitplast.inputs.Fitted``); any other task, a model it fits or a module that is not a ViT
    (no ``patch_embed``) is returned as it is."""
    if TASKS.get(task.name) != "embedded" or not hasattr(model, "patch_embed") or inputs.fits(
            model, (task.in_chans, task.img_size, task.img_size)):
        return task
    mean, std = data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD
    c, h, _ = inputs.native_input(model)
    fit = [inputs.Fitted(split, model, mean, std) for split in (task.train, task.val, task.test)]
    return replace(task, train=fit[0], val=fit[1], test=fit[2], in_chans=c, img_size=h)


def _split(name, trainval, test, num_classes, seed) -> Task:
    """The paper's protocol: 80/20 train/test where a source has no test set, then the
    train set 80/20 train/val, both with ``seed``."""
    if test is None:
        trainval, test = split(trainval, 0.8, seed)
    train, val = split(trainval, 0.8, seed)
    return Task(name, train, val, test, num_classes)


__all__ = ["EMBEDDED", "OPTIONS", "PAPER", "TASKS", "Task", "load", "source", "split", "stack"]
