"""Fake paper datasets (``vitplast.datasets.fake_datasets``): CIFAR-10-C fakes whose rows tell their
severity, annotation files in the official layout, and checksums accepted only inside the
block."""

import numpy as np
import pytest

from vitplast.datasets import fake_datasets
from vitplast.datasets.corruptions import CORRUPTIONS


def test_cifar10c_fakes_tell_each_row_s_severity(tmp_path):
    fake_datasets.write_cifar10c(tmp_path)
    rows = fake_datasets.C10C_ROWS
    for name in CORRUPTIONS:
        images = np.load(tmp_path / "CIFAR-10-C" / f"{name}.npy")
        assert images.shape == (5 * rows, 32, 32, 3) and images.dtype == np.uint8
        assert [int(images[s * rows:(s + 1) * rows].min()) for s in range(5)] == [
            40, 80, 120, 160, 200]
        assert [int(images[s * rows:(s + 1) * rows].max()) for s in range(5)] == [
            40, 80, 120, 160, 200]
    labels = np.load(tmp_path / "CIFAR-10-C" / "labels.npy")
    assert labels.tolist() == [i % 10 for i in range(rows)] * 5


def test_pet_annotations_list_every_image_written(tmp_path):
    fake_datasets.write_pet(tmp_path, np.random.default_rng(0))
    folder = tmp_path / "oxford-iiit-pet"
    for split, n in (("trainval", 10), ("test", 4)):
        lines = (folder / "annotations" / f"{split}.txt").read_text().splitlines()
        assert len(lines) == n
        assert all((folder / "images" / f"{line.split()[0]}.jpg").is_file() for line in lines)


def test_checksums_are_accepted_only_inside_the_block():
    import torchvision.datasets.cifar as cifar

    before = cifar.check_integrity
    with pytest.raises(RuntimeError), fake_datasets.accept_fake_checksums():
        assert cifar.check_integrity is not before
        raise RuntimeError("boom")
    assert cifar.check_integrity is before
