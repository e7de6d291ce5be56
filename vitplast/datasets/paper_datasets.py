"""The paper's 11 real downstream datasets, read from disk (never downloaded).

Every dataset lives under one folder ``root``, in the layout its official release unpacks to:

- ``cifar10``: ``root/cifar-10-batches-py/`` (``data_batch_1``..``5``, ``test_batch``,
  ``batches.meta``), read by torchvision's ``CIFAR10(download=False)``.
- ``cifar100``: ``root/cifar-100-python/`` (``train``, ``test``, ``meta``), by ``CIFAR100``.
- ``cifar10c_<corruption>`` (contrast, gaussian_noise, motion_blur, snow, speckle_noise):
  ``root/CIFAR-10-C/<corruption>.npy`` (N, 32, 32, 3) uint8 and ``root/CIFAR-10-C/labels.npy``;
  the N rows are 5 severities of N / 5 CIFAR-10 test images each (10,000 in the release).
- ``pet``: ``root/oxford-iiit-pet/images/*.jpg`` and ``annotations/{trainval,test}.txt``,
  read by torchvision's ``OxfordIIITPet(download=False)``.
- ``flowers102``: ``root/flowers-102/jpg/``, ``imagelabels.mat``, ``setid.mat``, read by
  torchvision's ``Flowers102(download=False)``.
- ``domainnet_clipart``, ``domainnet_sketch``: ``root/domainnet/<domain>/<class>/*.jpg`` and,
  optionally, the official ``root/domainnet/<domain>_{train,test}.txt`` (lines
  ``"<domain>/<class>/<file>.jpg <label>"``).

Protocol (paper, section 2): each train set is split 80/20 train/val with
``vitplast.datasets.tasks.split``; val and test get the deterministic eval transform. Choices where
the paper is silent: CIFAR-10-C has no train set, so (as the public code does) the N / 5
images of one severity are split 80/20 train/test, then the train part 80/20 train/val.
Flowers102's official train and val splits (10 images per class each) are joined into the
train set; its test split is the test set. DomainNet without split files: a deterministic
80/20 train/test split of the folder, labels = sorted class folder names; with them, their
labels (num_classes = largest label + 1).

Transforms: timm's own, for the model the task is loaded for (``data_config``: timm's
``resolve_data_config`` of its pretrained config; ``create_transform`` builds them): train =
RandomResizedCrop + RandomHorizontalFlip (no colour jitter, as the paper); eval =
Resize(img_size / crop_pct) + CenterCrop; both with the model's interpolation (bicubic for
``vit_base_patch16_224.orig_in21k``) and ending in ToTensor + Normalize(mean, std). The
default model is the paper's ViT-B/16 in21k (mean = std = (0.5, 0.5, 0.5), crop_pct 0.9); the
public code used ImageNet's mean/std instead, which does not match it. ``transforms_for(model)``
gives a loaded timm model's values.

``PAPER_STEPS`` holds the paper's finetuning step counts per dataset.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image
from torch.utils.data import ConcatDataset, Dataset

from vitplast.datasets.corruptions import CORRUPTIONS

#: The paper's model: its data config is the default one.
PAPER_MODEL = "vit_base_patch16_224.orig_in21k"
_DOMAINS = ("clipart", "sketch")
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
_HALF = (0.5, 0.5, 0.5)

#: The paper's finetuning steps per dataset.
PAPER_STEPS = {"cifar10": 10_000, "cifar100": 10_000, "pet": 4_000, "flowers102": 5_000,
               **{f"cifar10c_{c}": 10_000 for c in CORRUPTIONS},
               **{f"domainnet_{d}": 20_000 for d in _DOMAINS}}


class Transformed(Dataset):
    """``(transform(image), label)`` for each ``(image, label)`` of an untransformed dataset."""

    def __init__(self, dataset: Dataset, transform: Callable):
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        image, label = self.dataset[i]
        return self.transform(image), int(label)


class _ArrayImages(Dataset):
    """uint8 images (N, H, W, 3) and labels (N,), as (PIL image, int)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return Image.fromarray(self.images[i]), int(self.labels[i])


class _ImageFiles(Dataset):
    """Image files and their labels, as (RGB PIL image, int)."""

    def __init__(self, paths: list[Path], labels: list[int]):
        self.paths, self.labels = paths, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        with Image.open(self.paths[i]) as image:
            return image.convert("RGB"), self.labels[i]


def data_config(model=PAPER_MODEL, **overrides) -> dict:
    """timm's ``resolve_data_config`` for ``model`` (a timm model, or a timm name with its
    pretrained tag), as ``vitplast.datasets.tasks.load`` options: ``img_size``, ``interpolation``,
    ``mean``, ``std``, ``crop_pct``; ``overrides`` that are not ``None`` win.

    E.g. ``data_config()`` is ViT-B/16 in21k's: 224 px, bicubic, mean = std = 0.5, crop 0.9.
    """
    import timm
    from timm.data import resolve_data_config

    if isinstance(model, str):
        cfg = timm.models.get_pretrained_cfg(model)
        config = resolve_data_config(pretrained_cfg=cfg.to_dict() if cfg else None,
                                     args={} if cfg else {"input_size": (3, 224, 224)})
    else:
        config = resolve_data_config(model=model)
    out = {"img_size": int(config["input_size"][-1]), "interpolation": config["interpolation"],
           "mean": tuple(config["mean"]), "std": tuple(config["std"]),
           "crop_pct": float(config["crop_pct"])}
    out.update({k: v for k, v in overrides.items() if v is not None})
    return out


def paper_transforms(img_size: int = 224, mean=_HALF, std=_HALF, crop_pct: float = 0.9,
                     interpolation: str = "bicubic"):
    """The paper's (train, eval) transforms of PIL images to normalised tensors, built by
    timm's ``create_transform``."""
    from timm.data import create_transform

    common = dict(input_size=(3, img_size, img_size), interpolation=interpolation,
                  mean=tuple(mean), std=tuple(std), crop_pct=crop_pct)
    train = create_transform(**common, is_training=True, color_jitter=None)
    evaluate = create_transform(**common, is_training=False)
    return train, evaluate


def transforms_for(model) -> dict:
    """A timm model's data config (``data_config``) as keyword arguments for
    ``vitplast.datasets.tasks.load``, e.g. ``tasks.load("pet", root, **transforms_for(model))``;
    ``None``: the paper's model."""
    return data_config(PAPER_MODEL if model is None else model)


def _require(paths: list[Path], what: str, layout: str, source: str) -> None:
    """Raise ``FileNotFoundError`` naming the first missing path, the layout and the source."""
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{what} not found: missing {missing[0]}. Expected {layout}. "
                                f"Get it from {source}; nothing is downloaded.")


def _torchvision(cls, folder: Path, what: str, **kwargs):
    """``cls(..., download=False)``, with torchvision's checksum failures explained."""
    try:
        return cls(download=False, **kwargs)
    except RuntimeError as err:
        raise RuntimeError(f"{what} files under {folder} are present but torchvision rejects "
                           f"them (partial or corrupted copy?): {err}") from err


def _cifar(root: Path, *, hundred: bool, **_):
    from torchvision.datasets import CIFAR10, CIFAR100

    cls = CIFAR100 if hundred else CIFAR10
    folder, what = root / cls.base_folder, "CIFAR-100" if hundred else "CIFAR-10"
    names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    _require([folder / f for f in names], what, f"{folder}/ holding {', '.join(names)}",
             f"the '{what} python version' archive on Alex Krizhevsky's CIFAR page "
             f"(University of Toronto), extracted into {root}")
    trainval = _torchvision(cls, folder, what, root=root, train=True)
    test = _torchvision(cls, folder, what, root=root, train=False)
    return trainval, test, len(trainval.classes)


def _cifar10c(root: Path, *, corruption: str, severity: int, **_):
    if severity not in range(1, 6):
        raise ValueError(f"severity must be 1..5, got {severity}")
    folder = root / "CIFAR-10-C"
    data_file, label_file = folder / f"{corruption}.npy", folder / "labels.npy"
    _require([data_file, label_file], "CIFAR-10-C",
             f"{data_file} of shape (50000, 32, 32, 3) uint8 and {label_file}",
             f"Hendrycks & Dietterich's CIFAR-10-C release (Zenodo), extracted into {root}")
    images, labels = np.load(data_file, mmap_mode="r"), np.load(label_file, mmap_mode="r")
    if images.ndim != 4 or images.shape[3] != 3 or len(images) != len(labels) \
            or len(images) % 5:
        raise ValueError(f"{data_file} has shape {images.shape} with {len(labels)} labels; "
                         "expected (5 * n, H, W, 3) and 5 * n labels")
    n = len(images) // 5
    rows = slice((severity - 1) * n, severity * n)
    return _ArrayImages(np.ascontiguousarray(images[rows]), np.asarray(labels[rows], np.int64)), \
        None, 10


def _pet(root: Path, **_):
    from torchvision.datasets import OxfordIIITPet

    folder = root / "oxford-iiit-pet"
    _require([folder / "images", folder / "annotations" / "trainval.txt",
              folder / "annotations" / "test.txt"], "Oxford-IIIT Pet",
             f"{folder}/images/*.jpg and {folder}/annotations/{{trainval,test}}.txt",
             f"the Oxford-IIIT Pet page of Oxford's Visual Geometry Group (images.tar.gz and "
             f"annotations.tar.gz, both extracted into {folder})")
    trainval = _torchvision(OxfordIIITPet, folder, "Oxford-IIIT Pet", root=root, split="trainval")
    test = _torchvision(OxfordIIITPet, folder, "Oxford-IIIT Pet", root=root, split="test")
    return trainval, test, len(trainval.classes)


def _flowers(root: Path, **_):
    from torchvision.datasets import Flowers102

    folder = root / "flowers-102"
    _require([folder / "jpg", folder / "imagelabels.mat", folder / "setid.mat"],
             "Oxford Flowers102", f"{folder}/jpg/image_*.jpg, {folder}/imagelabels.mat and "
             f"{folder}/setid.mat", "the Oxford 102 Flowers page of Oxford's Visual Geometry "
             f"Group (102flowers.tgz extracted into {folder}, the two .mat files beside it)")
    parts = [_torchvision(Flowers102, folder, "Flowers102", root=root, split=s)
             for s in ("train", "val", "test")]
    return ConcatDataset(parts[:2]), parts[2], len(Flowers102.classes)


def _domainnet(root: Path, *, domain: str, **_):
    base = root / "domainnet"
    source = (f"the DomainNet page of the M3SDA project (Peng et al., 2019): {domain}.zip "
              f"extracted into {base}, optionally with {domain}_train.txt / {domain}_test.txt")
    _require([base / domain], f"DomainNet {domain}",
             f"{base / domain}/<class>/*.jpg (and optionally {base}/{domain}_train.txt and "
             f"{domain}_test.txt)", source)
    classes = sorted(p.name for p in (base / domain).iterdir() if p.is_dir())
    files = {p.relative_to(base).as_posix(): p for c in classes
             for p in sorted((base / domain / c).iterdir()) if p.suffix.lower() in _IMAGE_SUFFIXES}
    if not files:
        raise FileNotFoundError(f"DomainNet {domain}: no images in {base / domain}/<class>/. "
                                f"Get it from {source}.")
    lists = [base / f"{domain}_{s}.txt" for s in ("train", "test")]
    if not any(p.exists() for p in lists):
        index = {c: i for i, c in enumerate(classes)}
        labels = [index[Path(k).parent.name] for k in files]
        return _ImageFiles(list(files.values()), labels), None, len(classes)
    _require(lists, f"DomainNet {domain} split files", "both or neither split file", source)
    parts = []
    for path in lists:
        entries = [line.split() for line in path.read_text().splitlines() if line.strip()]
        absent = [rel for rel, _ in entries if rel not in files]
        if absent:
            raise FileNotFoundError(f"{path} lists {len(absent)} images missing under {base}, "
                                    f"e.g. {base / absent[0]}. Get them from {source}.")
        parts.append(_ImageFiles([files[rel] for rel, _ in entries],
                                 [int(label) for _, label in entries]))
    return parts[0], parts[1], 1 + max(max(p.labels, default=-1) for p in parts)


#: Paper dataset name -> reader ``(root, *, severity) -> (trainval, test, num_classes)``
#: of untransformed datasets yielding (PIL image, label); ``test`` is ``None`` where the
#: dataset has no test split (``vitplast.datasets.tasks.load`` splits one off, 80/20).
PAPER_DATASETS: dict[str, Callable] = {
    "cifar10": functools.partial(_cifar, hundred=False),
    "cifar100": functools.partial(_cifar, hundred=True),
    **{f"cifar10c_{c}": functools.partial(_cifar10c, corruption=c) for c in CORRUPTIONS},
    "pet": _pet,
    "flowers102": _flowers,
    **{f"domainnet_{d}": functools.partial(_domainnet, domain=d) for d in _DOMAINS},
}


__all__ = ["PAPER_DATASETS", "PAPER_MODEL", "PAPER_STEPS", "Transformed", "data_config",
           "paper_transforms", "transforms_for"]
