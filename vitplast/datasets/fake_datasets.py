"""Tiny fake files in the on-disk layout of every paper dataset
(``vitplast.datasets.paper_datasets``).

For the tests and for dry runs of the paper's protocol without the data
(``benchmarks/vitb_dry_run.py``): ``write_all(root)`` writes a few random images per dataset in
its official format (CIFAR pickles, CIFAR-10-C ``.npy``, Oxford Pet and Flowers102 folders with
their annotation files, DomainNet class folders with and without split files), and
``accept_fake_checksums()`` lets torchvision read them (it checks CIFAR's and Flowers102's files
against the real files' md5 sums, which fakes cannot match; existence is still checked).

``SIZES`` says what each fake holds: name -> (train, val, test, num_classes) after the loaders'
80/20 splits.
"""

from __future__ import annotations

import contextlib
import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from vitplast.datasets.corruptions import CORRUPTIONS

C10C_ROWS = 20  # rows per severity in the fake CIFAR-10-C files
#: name -> (len train, len val, len test, num_classes); 80/20 splits round like tasks.split
SIZES = {
    "cifar10": (16, 4, 5, 10),  # 5 batches x 4 = 20 -> 16 / 4; test_batch 5
    "cifar100": (13, 3, 6, 100),  # 16 -> 13 / 3; test 6
    **{f"cifar10c_{c}": (13, 3, 4, 10) for c in CORRUPTIONS},  # 20 -> 16 / 4 -> 13 / 3
    "pet": (8, 2, 4, 2),  # trainval.txt 10 -> 8 / 2; test.txt 4; 2 breeds
    "flowers102": (8, 2, 3, 102),  # train 6 + val 4 = 10 -> 8 / 2; test 3
    "domainnet_clipart": (10, 2, 3, 3),  # folder 15 -> 12 / 3 -> 10 / 2 (no split files)
    "domainnet_sketch": (8, 2, 5, 3),  # sketch_train.txt 10 -> 8 / 2; sketch_test.txt 5
}


def _rgb(rng, h=40, w=48):
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def _pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def write_cifar(root: Path, rng) -> None:
    c10 = root / "cifar-10-batches-py"
    c10.mkdir()
    for name, n in [*((f"data_batch_{i}", 4) for i in range(1, 6)), ("test_batch", 5)]:
        _pickle(c10 / name, {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                             "labels": rng.integers(0, 10, n).tolist()})
    _pickle(c10 / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    c100 = root / "cifar-100-python"
    c100.mkdir()
    for name, n in (("train", 16), ("test", 6)):
        _pickle(c100 / name, {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                              "fine_labels": rng.integers(0, 100, n).tolist()})
    _pickle(c100 / "meta", {"fine_label_names": [f"f{i}" for i in range(100)]})


def write_cifar10c(root: Path) -> None:
    folder = root / "CIFAR-10-C"
    folder.mkdir()
    # every pixel of a severity-s row is 40 * s: the rows a severity selects are recognisable
    sev = np.repeat(np.arange(1, 6, dtype=np.uint8), C10C_ROWS)
    images = np.broadcast_to((40 * sev)[:, None, None, None], (5 * C10C_ROWS, 32, 32, 3))
    for c in CORRUPTIONS:
        np.save(folder / f"{c}.npy", np.ascontiguousarray(images))
    np.save(folder / "labels.npy", np.tile(np.arange(C10C_ROWS) % 10, 5).astype(np.int64))


def write_pet(root: Path, rng) -> None:
    folder = root / "oxford-iiit-pet"
    (folder / "images").mkdir(parents=True)
    (folder / "annotations").mkdir()
    for split, n in (("trainval", 10), ("test", 4)):
        lines = []
        for i in range(n):
            breed, label = ("Abyssinian", 1) if i % 2 else ("beagle", 2)
            image_id = f"{breed}_{split}{i}"
            Image.fromarray(_rgb(rng)).save(folder / "images" / f"{image_id}.jpg")
            lines.append(f"{image_id} {label} {label} 1")
        (folder / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")


def write_flowers(root: Path, rng) -> None:
    from scipy.io import savemat

    folder = root / "flowers-102"
    (folder / "jpg").mkdir(parents=True)
    for i in range(1, 14):
        Image.fromarray(_rgb(rng)).save(folder / "jpg" / f"image_{i:05d}.jpg")
    savemat(folder / "imagelabels.mat", {"labels": np.arange(13) % 102 + 1})
    savemat(folder / "setid.mat", {"trnid": np.arange(1, 7), "valid": np.arange(7, 11),
                                   "tstid": np.arange(11, 14)})


def write_domainnet(root: Path, rng) -> None:
    for domain in ("clipart", "sketch"):
        paths = []
        for label, cls in enumerate(("apple", "bus", "zebra")):
            (root / "domainnet" / domain / cls).mkdir(parents=True)
            for i in range(5):
                rel = f"{domain}/{cls}/{domain}_{label:03d}_{i:06d}." + ("png" if i % 2 else "jpg")
                Image.fromarray(_rgb(rng)).save(root / "domainnet" / rel)
                paths.append(f"{rel} {label}")
    split = {"train": paths[::3] + paths[1::3], "test": paths[2::3]}  # sketch: 10 / 5
    for part, lines in split.items():
        (root / "domainnet" / f"sketch_{part}.txt").write_text("\n".join(lines) + "\n")


def write_all(root: str | Path, seed: int = 0) -> Path:
    """Fake files of all 11 paper datasets under ``root`` (created); returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    write_cifar(root, rng)
    write_cifar10c(root)
    write_pet(root, rng)
    write_flowers(root, rng)
    write_domainnet(root, rng)
    return root


@contextlib.contextmanager
def accept_fake_checksums():
    """Inside the block, torchvision accepts CIFAR and Flowers102 files whatever their md5."""
    import torchvision.datasets.cifar
    import torchvision.datasets.flowers102

    modules = (torchvision.datasets.cifar, torchvision.datasets.flowers102)
    saved = [m.check_integrity for m in modules]
    try:
        for m in modules:
            m.check_integrity = lambda *a, **k: True
        yield
    finally:
        for m, check in zip(modules, saved):
            m.check_integrity = check
