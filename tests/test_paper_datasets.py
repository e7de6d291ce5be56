"""The paper datasets' loaders on tiny fake files in the official on-disk formats."""

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.io import savemat

from vitplast.data import load_task
from vitplast.paper_datasets import PAPER_DATASETS, PAPER_STEPS, load_paper_task, transforms_for

SIZE = 32  # small img_size: every image comes out (3, 32, 32)
CORRUPTIONS = ["contrast", "gaussian_noise", "motion_blur", "snow", "speckle_noise"]
C10C_ROWS = 20  # rows per severity in the fake CIFAR-10-C files
# name -> (len train, len val, len test, num_classes); 80/20 splits round like vitplast.data.split
EXPECTED = {
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


def _write_cifar(root, rng):
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


def _write_cifar10c(root):
    folder = root / "CIFAR-10-C"
    folder.mkdir()
    # every pixel of a severity-s row is 40 * s: the rows a severity selects are recognisable
    sev = np.repeat(np.arange(1, 6, dtype=np.uint8), C10C_ROWS)
    images = np.broadcast_to((40 * sev)[:, None, None, None], (5 * C10C_ROWS, 32, 32, 3))
    for c in CORRUPTIONS:
        np.save(folder / f"{c}.npy", np.ascontiguousarray(images))
    np.save(folder / "labels.npy", np.tile(np.arange(C10C_ROWS) % 10, 5).astype(np.int64))


def _write_pet(root, rng):
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


def _write_flowers(root, rng):
    folder = root / "flowers-102"
    (folder / "jpg").mkdir(parents=True)
    for i in range(1, 14):
        Image.fromarray(_rgb(rng)).save(folder / "jpg" / f"image_{i:05d}.jpg")
    savemat(folder / "imagelabels.mat", {"labels": np.arange(13) % 102 + 1})
    savemat(folder / "setid.mat", {"trnid": np.arange(1, 7), "valid": np.arange(7, 11),
                                   "tstid": np.arange(11, 14)})


def _write_domainnet(root, rng):
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


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper_data")
    rng = np.random.default_rng(0)
    _write_cifar(root, rng)
    _write_cifar10c(root)
    _write_pet(root, rng)
    _write_flowers(root, rng)
    _write_domainnet(root, rng)
    return root


@pytest.fixture(autouse=True)
def no_md5(monkeypatch):
    """torchvision checks CIFAR's and Flowers102's files against the real files' md5 sums,
    which fakes cannot match: accept any file. Existence is still checked by the loaders."""
    import torchvision.datasets.cifar
    import torchvision.datasets.flowers102

    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(torchvision.datasets.flowers102, "check_integrity", lambda *a, **k: True)


def test_registry_names_and_steps():
    assert sorted(PAPER_DATASETS) == sorted(EXPECTED)
    assert PAPER_STEPS == {**{n: 10_000 for n in EXPECTED if n.startswith("cifar")},
                           "domainnet_clipart": 20_000, "domainnet_sketch": 20_000,
                           "flowers102": 5_000, "pet": 4_000}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loader_splits_shapes_and_eval_determinism(fake_root, name):
    task = load_paper_task(name, fake_root, img_size=SIZE)
    n_train, n_val, n_test, num_classes = EXPECTED[name]
    assert (len(task.train), len(task.val), len(task.test)) == (n_train, n_val, n_test)
    assert (task.name, task.num_classes, task.in_chans, task.img_size) == (
        name, num_classes, 3, SIZE)
    for ds in (task.train, task.val, task.test):
        x, y = ds[0]
        assert x.shape == (3, SIZE, SIZE) and x.dtype == torch.float32
        assert isinstance(y, int) and 0 <= y < num_classes
    for ds in (task.val, task.test):  # eval transform: no randomness
        assert torch.equal(ds[1][0], ds[1][0])
    # train and val are disjoint parts of one train set
    assert not set(task.train.dataset.indices) & set(task.val.dataset.indices)


def test_train_transform_is_random_val_is_not(fake_root):
    task = load_paper_task("domainnet_clipart", fake_root, img_size=SIZE)
    torch.manual_seed(0)
    assert any(not torch.equal(task.train[0][0], task.train[0][0]) for _ in range(5))
    assert torch.equal(task.val[0][0], task.val[0][0])


@pytest.mark.parametrize("severity", [1, 2, 5])
def test_cifar10c_severity_selects_rows(fake_root, severity):
    task = load_paper_task("cifar10c_snow", fake_root, severity=severity, img_size=SIZE)
    expected = (40 * severity / 255 - 0.5) / 0.5  # constant image, default mean = std = 0.5
    for ds in (task.train, task.val, task.test):
        for i in range(len(ds)):
            assert torch.allclose(ds[i][0], torch.full((3, SIZE, SIZE), expected), atol=1e-6)


def test_cifar10c_default_severity_is_5_and_bad_severity_fails(fake_root):
    x = load_paper_task("cifar10c_contrast", fake_root, img_size=SIZE).test[0][0]
    assert torch.allclose(x, torch.full_like(x, (200 / 255 - 0.5) / 0.5), atol=1e-6)
    with pytest.raises(ValueError, match="severity"):
        load_paper_task("cifar10c_contrast", fake_root, severity=6)


def test_seed_changes_splits_deterministically(fake_root):
    a, b, c = (load_paper_task("cifar10", fake_root, img_size=SIZE, seed=s) for s in (0, 0, 1))
    assert a.val.dataset.indices == b.val.dataset.indices != c.val.dataset.indices


def test_domainnet_split_file_labels(fake_root):
    task = load_paper_task("domainnet_sketch", fake_root, img_size=SIZE)
    lines = (fake_root / "domainnet" / "sketch_test.txt").read_text().split("\n")
    assert [task.test[i][1] for i in range(len(task.test))] == [
        int(line.split()[1]) for line in lines if line]


def test_mean_std_crop_pct_and_transforms_for(fake_root):
    model = SimpleNamespace(pretrained_cfg={"mean": (0.1, 0.2, 0.3), "std": (1.0, 1.0, 1.0),
                                            "crop_pct": 1.0})
    kwargs = transforms_for(model)
    assert kwargs == {"mean": (0.1, 0.2, 0.3), "std": (1.0, 1.0, 1.0), "crop_pct": 1.0}
    x = load_paper_task("cifar10c_snow", fake_root, img_size=SIZE, **kwargs).test[0][0]
    assert torch.allclose(x.mean((1, 2)), torch.tensor([200 / 255 - m for m in (0.1, 0.2, 0.3)]))


def test_unknown_name():
    with pytest.raises(ValueError, match="valid names.*cifar10"):
        load_paper_task("imagenet", "/nonexistent")
    with pytest.raises(ValueError, match="load_paper_task"):
        load_task("cifar10")


EXPECTED_PATH = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python",
                 **{f"cifar10c_{c}": f"CIFAR-10-C/{c}.npy" for c in CORRUPTIONS},
                 "pet": "oxford-iiit-pet", "flowers102": "flowers-102",
                 "domainnet_clipart": "domainnet/clipart", "domainnet_sketch": "domainnet/sketch"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_missing_folder_names_expected_path(tmp_path, name):
    with pytest.raises(FileNotFoundError) as err:
        load_paper_task(name, tmp_path)
    assert str(tmp_path / EXPECTED_PATH[name]) in str(err.value)
    assert "Get it from" in str(err.value)


def test_missing_single_files(fake_root, tmp_path):
    import shutil

    shutil.copytree(fake_root / "CIFAR-10-C", tmp_path / "CIFAR-10-C")
    (tmp_path / "CIFAR-10-C" / "labels.npy").unlink()
    with pytest.raises(FileNotFoundError, match="labels.npy"):
        load_paper_task("cifar10c_snow", tmp_path)
    shutil.copytree(fake_root / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        load_paper_task("cifar10", tmp_path)


def test_domainnet_broken_split_files(fake_root, tmp_path):
    import shutil

    base = tmp_path / "domainnet"
    shutil.copytree(fake_root / "domainnet", base)
    (base / "sketch_test.txt").unlink()  # only one of the two split files
    with pytest.raises(FileNotFoundError, match="sketch_test.txt"):
        load_paper_task("domainnet_sketch", tmp_path)
    (base / "sketch_test.txt").write_text("sketch/bus/not_there.jpg 1\n")
    with pytest.raises(FileNotFoundError, match="not_there.jpg"):
        load_paper_task("domainnet_sketch", tmp_path)
