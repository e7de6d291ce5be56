"""Linear probes: logistic regression on a frozen model's features.

Paper: section 2 and the main table's "lin. probe" column, the baseline every finetuned
component is compared with. Used by notebook 04 (``empirical.finetuning_inputs``) and the suite
study (``task_measures.task_probe``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from vitplast import finetune


@torch.no_grad()  # features only: no autograd graph
def linear_probe(model: nn.Module, task, *, max_iter: int = 1000, C: float = 1.0) -> dict:
    """Logistic regression on the frozen model's features: the paper's "lin. probe" baseline.

    Paper: section 2 and the main table's "lin. probe" column. Features are what the head
    sees, ``model.forward_head(model.forward_features(x), pre_logits=True)``, standardised on
    the train split (the public code probes the last block's attention output instead). Train
    images get the eval transform when the task has one (no augmentation). L-BFGS:
    deterministic for given features. Used by notebook 04.

    Args:
        model: a timm ViT (its head is not used; nothing is trained).
        task: a ``vitplast.tasks.Task``.
        max_iter, C: of scikit-learn's ``LogisticRegression`` (``C``: inverse L2 strength).

    Returns:
        dict(train_acc, val_acc, test_acc, n_train, n_features), accuracies in [0, 1].
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()

    def features(dataset):
        xs, ys = [], []
        for x, y in DataLoader(dataset, batch_size=256):
            with finetune.autocast(device):
                f = model.forward_head(model.forward_features(x.to(device)), pre_logits=True)
            xs.append(f.float().cpu().numpy())
            ys.append(np.asarray(y))
        return np.concatenate(xs), np.concatenate(ys)

    train_set = task.train
    if hasattr(train_set, "transform") and hasattr(task.val, "transform"):  # paper datasets
        train_set = type(train_set)(train_set.dataset, task.val.transform)
    (xtr, ytr), (xva, yva), (xte, yte) = (features(d) for d in (train_set, task.val, task.test))
    model.train(was_training)
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter))
    clf.fit(xtr, ytr)
    return dict(train_acc=float(clf.score(xtr, ytr)), val_acc=float(clf.score(xva, yva)),
                test_acc=float(clf.score(xte, yte)), n_train=int(len(ytr)),
                n_features=int(xtr.shape[1]))


def linear_probes(model_name: str, tasks: list[str], **probe_kwargs):
    """``linear_probe`` of the pretrained ``model_name`` on each embedded task: the paper's
    linear-probe column. Returns a table: ``task``, ``train_acc``, ``val_acc``, ``test_acc``
    (in %), ``n_train``, ``n_features``. Used by notebook 04."""
    import pandas as pd

    from vitplast import models
    from vitplast import tasks as registry

    model = models.load_model(model_name)
    rows = []
    for name in tasks:
        r = linear_probe(model, registry.load(name), **probe_kwargs)
        rows.append(dict(task=name, **{k: 100 * v if k.endswith("_acc") else v
                                       for k, v in r.items()}))
    return pd.DataFrame(rows)


def stored_probe(root, task: str, *, compute: bool = True) -> dict | None:
    """The embedded model's ``linear_probe`` on ``task`` (``train_acc``, ``val_acc``,
    ``test_acc`` in %, ``n_train``, ``n_features``), computed once (about 20-40 s on a CPU core)
    and kept beside a study's runs in ``root/probe-<hash of the settings>.json`` (a store
    companion); ``None`` when not stored and ``compute`` is False. Used by notebook 04
    (``empirical.finetuning_inputs``) and the suite study (``task_measures.task_probe``)."""
    from vitplast import models, store

    settings = dict(task=task, model=models.EMBEDDED_NAME, probe="logistic, C=1, L-BFGS")

    def probe() -> dict:
        row = linear_probes(models.EMBEDDED_NAME, [task]).iloc[0].to_dict()
        return dict(settings, **{k: v for k, v in row.items() if k != "task"})

    return store.Store(root).companion(f"probe-{store.config_hash(settings)}.json",
                                       compute=probe if compute else None)
