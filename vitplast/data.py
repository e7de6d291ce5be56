"""Datasets: the embedded offline tasks and the shared split / cache helpers.

Everything the embedded default needs is built offline:

- Fashion-MNIST, the pretraining domain, read through torchvision's real ``FashionMNIST``
  class from (1) an explicit folder, (2) the Debian package ``dataset-fashion-mnist``, or
  (3) torchvision's download when online.
- scikit-learn's digits (8x8, upsampled to 28x28): a new domain with new labels.
- Fashion-MNIST with each of the paper's corruptions (``vitplast.corruptions``).
- Fashion-MNIST inverted and rotated by 90 degrees: two more domain shifts.

Embedded tasks hold images as float tensors in [0, 1] of shape (N, 1, 28, 28); ``Task``
normalises them with the embedded model's mean and std. The paper's real datasets live in
``vitplast.paper_datasets`` and return the same ``Task``.

Used by every notebook.
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Subset, TensorDataset

#: Where the Debian package ``dataset-fashion-mnist`` puts its gzipped IDX files.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
#: Fashion-MNIST train-set pixel statistics; the embedded model's input normalisation.
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def cache_dir() -> Path:
    """The folder for caches: ``$VITPLAST_CACHE``, else ``.cache/`` in a repo checkout,
    else ``~/.cache/vitplast``."""
    if "VITPLAST_CACHE" in os.environ:
        return Path(os.environ["VITPLAST_CACHE"])
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").exists():
        return repo / ".cache"
    return Path.home() / ".cache" / "vitplast"


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


class NormalizedTensors(Dataset):
    """Images in [0, 1] (N, C, H, W) and labels (N,), normalised on access."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor,
                 mean: float = FASHION_MNIST_MEAN, std: float = FASHION_MNIST_STD):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels, self.mean, self.std = images, labels, mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return (self.images[i] - self.mean) / self.std, self.labels[i]


def split(dataset: Dataset, fraction: float = 0.8, seed: int = 0) -> tuple[Subset, Subset]:
    """Deterministic random split into (first ``fraction``, rest), as the paper's 80/20.

    Paper: section 2, "train sets split 80/20 train/val".
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    cut = int(round(fraction * len(dataset)))
    return Subset(dataset, perm[:cut]), Subset(dataset, perm[cut:])


def _fashion_mnist_root(root: str | Path | None) -> Path:
    """A folder holding ``FashionMNIST/raw/`` with the four IDX files, made if needed."""
    target = (Path(root) if root is not None else cache_dir() / "data")
    raw = target / "FashionMNIST" / "raw"
    if all((raw / f).exists() for f in _IDX_FILES):
        return target
    sources = [Path(root)] if root is not None else []
    sources += [DEBIAN_FASHION_MNIST]
    for src in sources:
        if all((src / f"{f}.gz").exists() or (src / f).exists() for f in _IDX_FILES):
            raw.mkdir(parents=True, exist_ok=True)
            for f in _IDX_FILES:
                if (src / f).exists():
                    shutil.copyfile(src / f, raw / f)
                else:  # gunzip to a temp name, then rename: never a half-written file
                    with gzip.open(src / f"{f}.gz") as fin, open(raw / f"{f}.tmp", "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                    os.replace(raw / f"{f}.tmp", raw / f)
            return target
    try:
        import torchvision

        torchvision.datasets.FashionMNIST(target, train=True, download=True)
        torchvision.datasets.FashionMNIST(target, train=False, download=True)
        return target
    except Exception as err:  # offline, or the mirror is gone
        raise FileNotFoundError(
            "Fashion-MNIST not found. Give it by one of three routes:\n"
            f"  1. root=FOLDER holding the four IDX files (.gz or not) or FashionMNIST/raw/ "
            f"(tried {root});\n"
            f"  2. the Debian package: `apt-get install dataset-fashion-mnist` "
            f"(puts them in {DEBIAN_FASHION_MNIST});\n"
            f"  3. torchvision's download when online (failed: {err})."
        ) from err


def fashion_mnist_arrays(train: bool = True, root: str | Path | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST as (images in [0, 1] of shape (N, 1, 28, 28), int64 labels).

    Loaded through torchvision's ``FashionMNIST(download=False)``.
    """
    import torchvision

    ds = torchvision.datasets.FashionMNIST(_fashion_mnist_root(root), train=train, download=False)
    return ds.data.unsqueeze(1).float().div(255.0), ds.targets.long()


def digits_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 digits, upsampled 8x8 -> 28x28 (bilinear), in [0, 1]."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.from_numpy(d.images.astype(np.float32) / 16.0).unsqueeze(1)  # (N, 1, 8, 8)
    x = torch.nn.functional.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    return x.clamp(0.0, 1.0), torch.from_numpy(d.target).long()


def _shifted_fmnist(shift, *, train_size, test_size, severity, seed, root):
    """Fashion-MNIST with ``shift(images, rng, severity)`` applied, subsampled deterministically."""
    rng = np.random.default_rng(seed)
    out = []
    for train, size in ((True, train_size), (False, test_size)):
        x, y = fashion_mnist_arrays(train=train, root=root)
        idx = torch.from_numpy(np.sort(rng.choice(len(y), size=min(size, len(y)), replace=False)))
        out.append((shift(x[idx], rng, severity), y[idx]))
    return out


def _identity(x, rng, severity):
    return x


def _invert(x, rng, severity):
    return 1.0 - x


def _rotate90(x, rng, severity):
    return torch.rot90(x, 1, dims=(2, 3))


def _corruption(name):
    def shift(x, rng, severity):
        from vitplast import corruptions

        return corruptions.corrupt(x, name, severity=severity, seed=int(rng.integers(2**31)))
    return shift


#: Embedded task name -> image shift of Fashion-MNIST (``None``: scikit-learn digits).
EMBEDDED_TASKS = {
    "fmnist": _identity,
    "fmnist_contrast": _corruption("contrast"),
    "fmnist_gaussian_noise": _corruption("gaussian_noise"),
    "fmnist_motion_blur": _corruption("motion_blur"),
    "fmnist_snow": _corruption("snow"),
    "fmnist_speckle_noise": _corruption("speckle_noise"),
    "fmnist_invert": _invert,
    "fmnist_rotate90": _rotate90,
    "digits": None,
}


@functools.lru_cache(maxsize=16)
def load_task(name: str, *, train_size: int = 5000, test_size: int = 2000, severity: int = 5,
              seed: int = 0, root: str | Path | None = None) -> Task:
    """Build an embedded task, offline and deterministic for a seed.

    Fashion-MNIST tasks take ``train_size`` images from its train set (split 80/20
    train/val) and ``test_size`` from its test set. Digits has no test set: 80/20
    train/test, then 80/20 train/val, as the paper does.

    Tasks are cached in memory (a sweep builds each once); treat them as read-only.

    Args:
        name: one of ``EMBEDDED_TASKS`` (or a paper dataset name: see
            ``vitplast.paper_datasets.PAPER_DATASETS``).
        severity: corruption severity 1..5 (the paper uses 5).
        seed: fixes subsampling, corruption noise and splits.
        root: Fashion-MNIST folder (see ``fashion_mnist_arrays``).
    """
    if name not in EMBEDDED_TASKS:
        from vitplast import paper_datasets

        if name in paper_datasets.PAPER_DATASETS:
            raise ValueError(f"{name!r} is a paper dataset: use "
                             f"vitplast.paper_datasets.load_paper_task({name!r}, root=...)")
        raise ValueError(f"unknown task {name!r}; embedded tasks: {sorted(EMBEDDED_TASKS)}")
    shift = EMBEDDED_TASKS[name]
    if shift is None:
        x, y = digits_arrays()
        trainval, test = split(NormalizedTensors(x, y), 0.8, seed)
        num_classes = 10
    else:
        (xtr, ytr), (xte, yte) = _shifted_fmnist(shift, train_size=train_size, test_size=test_size,
                                                 severity=severity, seed=seed, root=root)
        trainval, test = NormalizedTensors(xtr, ytr), NormalizedTensors(xte, yte)
        num_classes = 10
    train, val = split(trainval, 0.8, seed)
    return Task(name, train, val, test, num_classes)


def stack(dataset: Dataset, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``limit`` items of a dataset as two tensors (images, labels)."""
    n = len(dataset) if limit is None else min(limit, len(dataset))
    items = [dataset[i] for i in range(n)]
    return torch.stack([x for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


__all__ = ["Task", "NormalizedTensors", "TensorDataset", "EMBEDDED_TASKS", "cache_dir",
           "digits_arrays", "fashion_mnist_arrays", "load_task", "split", "stack"]
