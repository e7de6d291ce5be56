"""Embedded data: the three Fashion-MNIST routes, digits, tasks and splits."""

import pytest
import torch
import torchvision

from vitplast import data


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


def test_digits_task_has_the_papers_splits():
    task = data.load_task("digits")
    assert (len(task.train), len(task.val), len(task.test)) == (1150, 288, 359)
    assert task.num_classes == 10
    x, label = task.val[0]
    assert x.shape == (1, 28, 28) and 0 <= int(label) < 10


@pytest.mark.parametrize("name", ["fmnist", "fmnist_invert", "fmnist_rotate90"])
def test_fmnist_tasks(name, fake_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    task = data.load_task(name, train_size=500, test_size=200, root=fake_fmnist)
    assert (len(task.train), len(task.val), len(task.test)) == (400, 100, 200)
    a, b = data.stack(task.test, 10)[0], data.stack(task.test, 10)[0]
    assert torch.equal(a, b)
    base = data.load_task("fmnist", train_size=500, test_size=200, root=fake_fmnist)
    if name != "fmnist":
        assert not torch.equal(a, data.stack(base.test, 10)[0])


def test_split_is_deterministic_and_disjoint():
    ds = data.NormalizedTensors(torch.rand(50, 1, 4, 4), torch.zeros(50, dtype=torch.long))
    a, b = data.split(ds, 0.8, seed=3)
    assert len(a) == 40 and len(b) == 10 and not set(a.indices) & set(b.indices)
    assert data.split(ds, 0.8, seed=3)[0].indices == a.indices
    assert data.split(ds, 0.8, seed=4)[0].indices != a.indices
    with pytest.raises(ValueError, match="fraction"):
        data.split(ds, 1.0)


def test_unknown_tasks_fail_with_the_valid_names():
    with pytest.raises(ValueError, match="embedded tasks: .*digits"):
        data.load_task("mnist")
    with pytest.raises(ValueError, match="load_paper_task"):
        data.load_task("cifar10")
