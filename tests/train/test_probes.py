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


def test_linear_probes_build_each_task_with_the_options_given():
    """A study's probe is fitted on the splits its runs train on (``options``)."""
    from vitplast import models

    small = probes.linear_probes(models.EMBEDDED_NAME, ["fmnist_contrast"],
                                 options=dict(train_size=160, test_size=64))
    assert small["n_train"].tolist() == [128]  # 80% of 160; the rest validates
