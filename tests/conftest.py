"""Shared fixtures: tiny random timm ViTs (seconds on a CPU), synthetic images, fake
Fashion-MNIST files, and a fake training loop. Plain helpers: ``helpers.py``."""

import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import FakeTrain, tiny_vit, write_idx

from vitplast.course.kernels import threads_each
from vitplast.train import finetune


def _share_the_cores() -> None:
    """Under pytest-xdist, each worker computes on its share of the cores, as notebooks run
    side by side do (``kernels.threads_each``), and so do the kernels and command lines it
    starts (OMP_NUM_THREADS): N workers each running torch's default of one thread per core
    would put N threads on every core, waiting for each other inside every operation."""
    threads = threads_each(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


_share_the_cores()


def pytest_configure(config):
    """Where the tests' one-node Slurm lives (``slurm`` fixture): a folder named once per test
    session by the controlling process and inherited by the xdist workers; started by the
    first test that needs it, stopped here at the end (``pytest_unconfigure``)."""
    if not hasattr(config, "workerinput") and "VITPLAST_TEST_SLURM" not in os.environ:
        import tempfile

        os.environ["VITPLAST_TEST_SLURM"] = tempfile.mkdtemp(prefix="vitplast-slurm-")
        config._vitplast_slurm = os.environ["VITPLAST_TEST_SLURM"]


def pytest_unconfigure(config):
    folder = getattr(config, "_vitplast_slurm", None)
    if folder:
        from vitplast.experiments import local_slurm

        local_slurm.down(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm():
    """A Slurm that answers: the user's (``SLURM_CONF`` set and ``sinfo`` answering), else a
    one-node cluster started for this test session (``local_slurm.up``); the test is skipped,
    with the reason, where neither is possible (Slurm or munge not installed, not root)."""
    from vitplast.experiments import local_slurm
    from vitplast.files import locked

    if local_slurm.answers():
        yield os.environ["SLURM_CONF"]
        return
    why = local_slurm.missing()
    if why:
        pytest.skip(f"no Slurm for the cluster tests: {why}; make slurm-up says what to install")
    folder = os.environ["VITPLAST_TEST_SLURM"]
    with locked(Path(folder) / "up"):  # xdist workers: one starts it, the others find it
        conf = local_slurm.up(folder)
    os.environ["SLURM_CONF"] = str(conf)
    yield str(conf)
    del os.environ["SLURM_CONF"]


@pytest.fixture(scope="session", autouse=True)
def shipped_results(tmp_path_factory):
    """The shipped results as the tests read them: a copy of the checkout's ``data/``
    (``VITPLAST_DATA``), so that what a test computes beside them (a notebook's kept tables at
    a test's tiny settings) lands in the copy, never in the checkout. A ``VITPLAST_DATA`` set
    by the user is kept."""
    if "VITPLAST_DATA" in os.environ:
        yield Path(os.environ["VITPLAST_DATA"])
        return
    copy = shutil.copytree(Path(__file__).resolve().parents[1] / "data",
                           tmp_path_factory.mktemp("shipped") / "data")
    os.environ["VITPLAST_DATA"] = str(copy)
    yield copy
    del os.environ["VITPLAST_DATA"]


@pytest.fixture
def model():
    """A 2-block ViT on 16x16 one-channel images, 5 classes (``helpers.tiny_vit``)."""
    return tiny_vit()


@pytest.fixture
def vit28():
    """A tiny ViT in the embedded format (28x28, one channel, 10 classes): digits' images."""
    return tiny_vit(img_size=28, patch_size=7, num_classes=10)


@pytest.fixture
def images():
    g = torch.Generator().manual_seed(1)
    return torch.randn(24, 1, 16, 16, generator=g), torch.randn(24, 1, 16, 16, generator=g)


@pytest.fixture
def fake_train(monkeypatch):
    """``finetune.train`` replaced by a ``helpers.FakeTrain`` (returned), for the test."""
    fake = FakeTrain()
    monkeypatch.setattr(finetune, "train", fake)
    return fake


@pytest.fixture(scope="session")
def fake_fmnist(tmp_path_factory):
    """A folder with Fashion-MNIST-format files: 600 train and 1,000 test random images."""
    import numpy as np

    root = tmp_path_factory.mktemp("fmnist_gz")
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 600), ("t10k", 1000)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        images[:, 4:24, 4:24] += (labels[:, None, None] * 19)  # learnable: brightness = label
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of the kit's own (``VITPLAST_CACHE``), for the test."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
