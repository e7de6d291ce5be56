"""The paper datasets' loaders on tiny fake files in the official on-disk formats
(``vitplast.datasets.fake_datasets``), with timm's transforms for the model they are loaded for."""

from types import SimpleNamespace

import pytest
import torch
from torchvision.transforms import InterpolationMode

from vitplast.datasets import fake_datasets, tasks
from vitplast.datasets.fake_datasets import CORRUPTIONS
from vitplast.datasets.fake_datasets import SIZES as EXPECTED
from vitplast.datasets.paper_datasets import (
    PAPER_DATASETS,
    PAPER_STEPS,
    data_config,
    transforms_for,
)

SIZE = 32  # small img_size: every image comes out (3, 32, 32)


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    return fake_datasets.write_all(tmp_path_factory.mktemp("paper_data"))


@pytest.fixture(autouse=True)
def no_md5():
    """torchvision checks CIFAR's and Flowers102's files against the real files' md5 sums,
    which fakes cannot match: accept any file. Existence is still checked by the loaders."""
    with fake_datasets.accept_fake_checksums():
        yield


def test_registry_names_and_steps():
    assert sorted(PAPER_DATASETS) == sorted(EXPECTED)
    assert PAPER_STEPS == {**{n: 10_000 for n in EXPECTED if n.startswith("cifar")},
                           "domainnet_clipart": 20_000, "domainnet_sketch": 20_000,
                           "flowers102": 5_000, "pet": 4_000}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loader_splits_shapes_and_eval_determinism(fake_root, name):
    task = tasks.load(name, fake_root, img_size=SIZE)
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
    task = tasks.load("domainnet_clipart", fake_root, img_size=SIZE)
    torch.manual_seed(0)
    assert any(not torch.equal(task.train[0][0], task.train[0][0]) for _ in range(5))
    assert torch.equal(task.val[0][0], task.val[0][0])


@pytest.mark.parametrize("severity", [1, 2, 5])
def test_cifar10c_severity_selects_rows(fake_root, severity):
    task = tasks.load("cifar10c_snow", fake_root, severity=severity, img_size=SIZE)
    expected = (40 * severity / 255 - 0.5) / 0.5  # constant image, default mean = std = 0.5
    for ds in (task.train, task.val, task.test):
        for i in range(len(ds)):
            assert torch.allclose(ds[i][0], torch.full((3, SIZE, SIZE), expected), atol=1e-6)


def test_cifar10c_default_severity_is_5_and_bad_severity_fails(fake_root):
    x = tasks.load("cifar10c_contrast", fake_root, img_size=SIZE).test[0][0]
    assert torch.allclose(x, torch.full_like(x, (200 / 255 - 0.5) / 0.5), atol=1e-6)
    with pytest.raises(ValueError, match="severity"):
        tasks.load("cifar10c_contrast", fake_root, severity=6)


def test_seed_changes_splits_deterministically(fake_root):
    a, b, c = (tasks.load("cifar10", fake_root, img_size=SIZE, seed=s) for s in (0, 0, 1))
    assert a.val.dataset.indices == b.val.dataset.indices != c.val.dataset.indices


def test_domainnet_split_file_labels(fake_root):
    task = tasks.load("domainnet_sketch", fake_root, img_size=SIZE)
    lines = (fake_root / "domainnet" / "sketch_test.txt").read_text().split("\n")
    assert [task.test[i][1] for i in range(len(task.test))] == [
        int(line.split()[1]) for line in lines if line]


def test_mean_std_crop_pct_and_transforms_for(fake_root):
    model = SimpleNamespace(pretrained_cfg={"mean": (0.1, 0.2, 0.3), "std": (1.0, 1.0, 1.0),
                                            "crop_pct": 1.0, "interpolation": "bilinear"})
    kwargs = transforms_for(model)
    assert kwargs == {"mean": (0.1, 0.2, 0.3), "std": (1.0, 1.0, 1.0), "crop_pct": 1.0,
                      "interpolation": "bilinear", "img_size": 224}
    x = tasks.load("cifar10c_snow", fake_root, **{**kwargs, "img_size": SIZE}).test[0][0]
    assert torch.allclose(x.mean((1, 2)), torch.tensor([200 / 255 - m for m in (0.1, 0.2, 0.3)]))


def _interpolations(transform) -> list:
    return [t.interpolation for t in transform.transforms if hasattr(t, "interpolation")]


def test_timm_transforms_of_the_model_bicubic_for_orig_in21k(fake_root):
    """The paper's ViT-B/16 in21k (the default) resizes bicubic with mean = std = 0.5 and
    crop 0.9, from timm's own data config; another model brings its own."""
    assert data_config() == data_config("vit_base_patch16_224.orig_in21k") == {
        "img_size": 224, "interpolation": "bicubic", "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5), "crop_pct": 0.9}
    task = tasks.load("pet", fake_root, img_size=SIZE)
    train, evaluate = task.train.transform, task.val.transform
    assert _interpolations(train) + _interpolations(evaluate) == [InterpolationMode.BICUBIC] * 2
    assert [type(t).__name__ for t in train.transforms][:2] == [
        "RandomResizedCropAndInterpolation", "RandomHorizontalFlip"]  # no colour jitter
    resize, crop = evaluate.transforms[:2]
    assert (resize.size, crop.size) == (int(SIZE / 0.9), (SIZE, SIZE))
    model = SimpleNamespace(pretrained_cfg={"interpolation": "bilinear", "input_size": (3, 64, 64)})
    other = tasks.load("pet", fake_root, model=model)  # a model's own config
    assert _interpolations(other.val.transform) == [InterpolationMode.BILINEAR]
    assert other.img_size == 64 and other.val[0][0].shape == (3, 64, 64)
    override = tasks.load("pet", fake_root, img_size=SIZE, interpolation="bilinear")
    assert _interpolations(override.train.transform) == [InterpolationMode.BILINEAR]


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown task 'imagenet'.*cifar10"):
        tasks.load("imagenet", "/nonexistent")
    with pytest.raises(ValueError, match="give data_root"):
        tasks.load("cifar10")


EXPECTED_PATH = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python",
                 **{f"cifar10c_{c}": f"CIFAR-10-C/{c}.npy" for c in CORRUPTIONS},
                 "pet": "oxford-iiit-pet", "flowers102": "flowers-102",
                 "domainnet_clipart": "domainnet/clipart", "domainnet_sketch": "domainnet/sketch"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_missing_folder_names_expected_path(tmp_path, name):
    with pytest.raises(FileNotFoundError) as err:
        tasks.load(name, tmp_path)
    assert str(tmp_path / EXPECTED_PATH[name]) in str(err.value)
    assert "Get it from" in str(err.value)


def test_missing_single_files(fake_root, tmp_path):
    import shutil

    shutil.copytree(fake_root / "CIFAR-10-C", tmp_path / "CIFAR-10-C")
    (tmp_path / "CIFAR-10-C" / "labels.npy").unlink()
    with pytest.raises(FileNotFoundError, match="labels.npy"):
        tasks.load("cifar10c_snow", tmp_path)
    shutil.copytree(fake_root / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        tasks.load("cifar10", tmp_path)


def test_domainnet_broken_split_files(fake_root, tmp_path):
    import shutil

    base = tmp_path / "domainnet"
    shutil.copytree(fake_root / "domainnet", base)
    (base / "sketch_test.txt").unlink()  # only one of the two split files
    with pytest.raises(FileNotFoundError, match="sketch_test.txt"):
        tasks.load("domainnet_sketch", tmp_path)
    (base / "sketch_test.txt").write_text("sketch/bus/not_there.jpg 1\n")
    with pytest.raises(FileNotFoundError, match="not_there.jpg"):
        tasks.load("domainnet_sketch", tmp_path)


@pytest.mark.slow
def test_vitb_dry_run_at_full_size_on_fake_files():
    """benchmarks/vitb_dry_run.py with tiny settings: ViT-B/16 through weights_file, two
    dataset layouts, plasticity pairs and a finetuning step through runner.run_one (~1.5 min)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "vitb_dry_run.py"), "--datasets",
         "cifar10c_snow,domainnet_sketch", "--pairs", "2", "--steps", "1", "--batch-size", "2",
         "--target", "600"], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("RESULT vitb_dry_run_seconds ") and lines[-1].endswith(
        "target <= 600")
    assert "85,798,656 parameters" in lines[0]  # ViT-B/16 without a head
    assert any(line.startswith("finetune cifar10c_snow (full") for line in lines)
    assert any("s/pair" in line for line in lines) and any("GPU-h" in line for line in lines)
