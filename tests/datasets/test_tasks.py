"""Tasks: one registry of embedded and paper tasks, one ``load``, the paper's 80/20 splits."""

import pytest
import torch

from vitplast.datasets import data, paper_datasets, suite, tasks


def test_digits_task_has_the_papers_splits():
    task = tasks.load("digits")
    assert (len(task.train), len(task.val), len(task.test)) == (1150, 288, 359)
    assert task.num_classes == 10
    x, label = task.val[0]
    assert x.shape == (1, 28, 28) and 0 <= int(label) < 10


@pytest.mark.parametrize("name", ["fmnist", "fmnist_invert", "fmnist_rotate90"])
def test_fmnist_tasks(name, fake_fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    task = tasks.load(name, train_size=500, test_size=200, root=fake_fmnist)
    assert (len(task.train), len(task.val), len(task.test)) == (400, 100, 200)
    a, b = tasks.stack(task.test, 10)[0], tasks.stack(task.test, 10)[0]
    assert torch.equal(a, b)
    base = tasks.load("fmnist", train_size=500, test_size=200, root=fake_fmnist)
    if name != "fmnist":
        assert not torch.equal(a, tasks.stack(base.test, 10)[0])


def test_split_is_deterministic_and_disjoint():
    ds = data.NormalizedTensors(torch.rand(50, 1, 4, 4), torch.zeros(50, dtype=torch.long))
    a, b = tasks.split(ds, 0.8, seed=3)
    assert len(a) == 40 and len(b) == 10 and not set(a.indices) & set(b.indices)
    assert tasks.split(ds, 0.8, seed=3)[0].indices == a.indices
    assert tasks.split(ds, 0.8, seed=4)[0].indices != a.indices
    with pytest.raises(ValueError, match="fraction"):
        tasks.split(ds, 1.0)


def test_unknown_tasks_fail_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown task 'mnist'; valid: embedded tasks .*digits.*"
                                         "paper datasets .*cifar10"):
        tasks.load("mnist")
    with pytest.raises(ValueError, match="paper dataset.*give data_root"):
        tasks.load("cifar10")
    with pytest.raises(ValueError, match="unknown option.*'size'.*valid: \\['train_size'"):
        tasks.load("digits", size=3)
    assert tasks.source("cifar10", "/data") == "paper" and tasks.source("digits") == "embedded"


def test_one_registry_of_embedded_and_paper_tasks():
    assert set(tasks.TASKS) == (set(data.EMBEDDED_TASKS) | set(suite.GENERATED)
                                | set(paper_datasets.PAPER_DATASETS))
    assert len(tasks.TASKS) == len(tasks.EMBEDDED) + len(tasks.PAPER) == 9 + 8 + 17 + 11
