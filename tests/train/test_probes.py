"""Linear probes: deterministic, nothing trained, far above chance on random features."""

import torch

from vitplast.datasets import tasks
from vitplast.train import probes


def test_linear_probe_is_deterministic(vit28):
    task, model = tasks.load("digits"), vit28
    before = {n: p.clone() for n, p in model.state_dict().items()}
    first = probes.linear_probe(model, task)
    assert first == probes.linear_probe(model, task)
    assert first["n_train"] == len(task.train) and first["n_features"] == 32
    for split in ("train_acc", "val_acc", "test_acc"):
        assert 0.0 <= first[split] <= 1.0
    assert first["test_acc"] > 0.5  # random ViT features of digits are far above chance (0.1)
    assert all(torch.equal(p, before[n]) for n, p in model.state_dict().items())
