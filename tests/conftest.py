"""Shared fixtures: tiny random timm ViTs (seconds on a CPU) and synthetic images."""

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer


def tiny_vit(**kwargs) -> VisionTransformer:
    """A 2-block ViT on 16x16 images, with non-trivial LayerNorm weights."""
    torch.manual_seed(kwargs.pop("seed", 0))
    args = dict(img_size=16, patch_size=4, in_chans=1, num_classes=5, embed_dim=32, depth=2,
                num_heads=4, mlp_ratio=4.0)
    args.update(kwargs)
    model = VisionTransformer(**args).eval()
    with torch.no_grad():  # timm inits LayerNorms to (1, 0): make them generic
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.fixture
def model():
    return tiny_vit()


@pytest.fixture
def images():
    g = torch.Generator().manual_seed(1)
    return torch.randn(24, 1, 16, 16, generator=g), torch.randn(24, 1, 16, 16, generator=g)


def write_idx(path, array):
    """Write a uint8 array in the gzipped IDX format Fashion-MNIST ships in."""
    import gzip

    import numpy as np

    array = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 8, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


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
