"""The embedded tasks' images, built offline.

- Fashion-MNIST, the pretraining domain, read through torchvision's real ``FashionMNIST``
  class from (1) an explicit folder, (2) the Debian package ``dataset-fashion-mnist``, or
  (3) torchvision's download when online.
- scikit-learn's digits (8x8, upsampled to 28x28): a new domain with new labels.
- Fashion-MNIST with each of the paper's corruptions (``vitplast.datasets.corruptions``).
- Fashion-MNIST inverted and rotated by 90 degrees: two more domain shifts.
- For the task suite (``vitplast.datasets.suite``): Fashion-MNIST under six more CIFAR-10-C
  corruption families (``corruptions.MORE_CORRUPTIONS``), flipped upside down, and shrunk to half
  size.

Images are float tensors in [0, 1] of shape (N, 1, 28, 28); ``NormalizedTensors`` normalises
them with the embedded model's mean and std. ``embedded_sets`` gives a task's sets;
``vitplast.datasets.tasks.load`` splits them and returns the ``Task`` (as it does for the paper's
datasets, ``vitplast.datasets.paper_datasets``).
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from vitplast.datasets import corruptions
from vitplast.files import atomic_path, cache_dir
from vitplast.models import FASHION_MNIST_MEAN, FASHION_MNIST_STD

# FASHION_MNIST_MEAN, FASHION_MNIST_STD: the embedded model's input normalisation, defined with
# it in ``models`` and imported here for the images they describe.

#: Where the Debian package ``dataset-fashion-mnist`` puts its gzipped IDX files.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


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
                else:  # never a half-written file, also when several sweep processes
                    # unpack at once (each into its own temp file)
                    with atomic_path(raw / f) as tmp, gzip.open(src / f"{f}.gz") as fin, \
                            open(tmp, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
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


def _flip(x, rng, severity):
    return torch.flip(x, dims=(2,))  # upside down


def _shrink(x, rng, severity):
    """Half size (bilinear), centred on a blank canvas."""
    small = torch.nn.functional.interpolate(x, scale_factor=0.5, mode="bilinear",
                                            align_corners=False, antialias=True)
    return torch.nn.functional.pad(small, (7, 7, 7, 7))


def _corruption(name):
    def shift(x, rng, severity):
        return corruptions.corrupt(x, name, severity=severity, seed=int(rng.integers(2**31)))
    return shift


#: Embedded task name -> image shift of Fashion-MNIST (``None``: scikit-learn digits).
EMBEDDED_TASKS = {
    "fmnist": _identity,
    **{f"fmnist_{c}": _corruption(c) for c in corruptions.CORRUPTIONS},  # the paper's five
    "fmnist_invert": _invert,
    "fmnist_rotate90": _rotate90,
    "digits": None,
    # more CIFAR-10-C families and geometric shifts, for the task suite
    # (``vitplast.datasets.suite``)
    **{f"fmnist_{c}": _corruption(c) for c in corruptions.MORE_CORRUPTIONS},
    "fmnist_flip": _flip,
    "fmnist_shrink": _shrink,
}


def embedded_sets(name: str, *, train_size: int = 5000, test_size: int = 2000,
                  severity: int = 5, seed: int = 0, root: str | Path | None = None
                  ) -> tuple[Dataset, Dataset | None, int]:
    """An embedded task's (train+val set, test set, number of classes), offline and
    deterministic for a seed; the test set is ``None`` where the task has none (digits), and
    ``vitplast.datasets.tasks.load`` splits one off.

    Fashion-MNIST tasks take ``train_size`` images from its train set and ``test_size`` from
    its test set.

    Args:
        name: one of ``EMBEDDED_TASKS``.
        severity: corruption severity 1..5 (the paper uses 5).
        seed: fixes subsampling and corruption noise.
        root: Fashion-MNIST folder (see ``fashion_mnist_arrays``).
    """
    if name not in EMBEDDED_TASKS:
        raise ValueError(f"unknown embedded task {name!r}; valid: {sorted(EMBEDDED_TASKS)}")
    shift = EMBEDDED_TASKS[name]
    if shift is None:
        return NormalizedTensors(*digits_arrays()), None, 10
    (xtr, ytr), (xte, yte) = _shifted_fmnist(shift, train_size=train_size, test_size=test_size,
                                             severity=severity, seed=seed, root=root)
    return NormalizedTensors(xtr, ytr), NormalizedTensors(xte, yte), 10


__all__ = ["EMBEDDED_TASKS", "NormalizedTensors", "digits_arrays", "embedded_sets",
           "fashion_mnist_arrays"]
