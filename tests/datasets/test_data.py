"""Embedded data: the three Fashion-MNIST routes and digits (tasks: test_tasks.py)."""

import pytest
import torch
import torchvision

from vitplast.datasets import data


def test_fashion_mnist_from_a_folder_of_gz_files(fake_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    x, y = data.fashion_mnist_arrays(train=False, root=fake_fmnist)
    assert x.shape == (1000, 1, 28, 28) and y.shape == (1000,)
    assert x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert (fake_fmnist / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte").exists()
    again, _ = data.fashion_mnist_arrays(train=False, root=fake_fmnist)  # now the raw/ route
    assert torch.equal(x, again)


def test_fashion_mnist_from_the_debian_folder(fake_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST", fake_fmnist)
    x, y = data.fashion_mnist_arrays(train=True)
    assert x.shape == (600, 1, 28, 28)
    assert (tmp_path / "cache" / "data" / "FashionMNIST" / "raw").is_dir()
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_missing_fashion_mnist_names_all_three_routes(tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST", tmp_path / "nowhere")

    def offline(self):
        raise OSError("no network")

    monkeypatch.setattr(torchvision.datasets.FashionMNIST, "download", offline)
    with pytest.raises(FileNotFoundError) as err:
        data.fashion_mnist_arrays(root=tmp_path / "empty")
    text = str(err.value)
    assert "root=" in text and "apt-get install dataset-fashion-mnist" in text
    assert "download" in text and "no network" in text


def test_digits():
    x, y = data.digits_arrays()
    assert x.shape == (1797, 1, 28, 28) and set(y.tolist()) == set(range(10))
    assert 0 <= x.min() and x.max() <= 1
