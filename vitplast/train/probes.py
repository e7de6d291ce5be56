"""Linear probes: logistic regression on a frozen model's features.

Paper: section 2 and the main table's "lin. probe" column, the baseline every finetuned
component is compared with.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from vitplast import cached, models
from vitplast.datasets import tasks as registry  # the parameters named tasks are names
from vitplast.measure import empirical
from vitplast.train import passes


@torch.no_grad()  # features only: no autograd graph
def linear_probe(model: nn.Module, task, *, max_iter: int = 1000, C: float = 1.0) -> dict:
    """Logistic regression on the frozen model's features: the paper's "lin. probe" baseline.

    Paper: section 2 and the main table's "lin. probe" column. Features are what the head
    sees, ``model.forward_head(model.forward_features(x), pre_logits=True)``, standardised on
    the train split (the public code probes the last block's attention output instead). Train
    images get the eval transform when the task has one (no augmentation). L-BFGS:
    deterministic for given features.

    Args:
        model: a timm ViT (its head is not used; nothing is trained).
        task: a ``vitplast.datasets.tasks.Task``.
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
            with passes.autocast(device):
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


def linear_probes(model_name: str, tasks: list[str], *, options: dict | None = None,
                  **probe_kwargs):
    """``linear_probe`` of the pretrained ``model_name`` on each embedded task (built with
    ``tasks.load``'s ``options``, e.g. ``train_size``): the paper's linear-probe column.
    Returns a table: ``task``, ``train_acc``, ``val_acc``, ``test_acc`` (in %), ``n_train``,
    ``n_features``."""
    model = models.load_model(model_name)
    rows = []
    for name in tasks:
        r = linear_probe(model, registry.load(name, **(options or {})), **probe_kwargs)
        rows.append(dict(task=name, **{k: 100 * v if k.endswith("_acc") else v
                                       for k, v in r.items()}))
    return pd.DataFrame(rows)


def stored_probe(root, task: str, *, options: dict | None = None, compute: bool = True
                 ) -> dict | None:
    """The embedded model's ``linear_probe`` on ``task`` (``train_acc``, ``val_acc``,
    ``test_acc`` in %, ``n_train``, ``n_features``), computed once and kept beside a study's runs in
    ``root/probe-<hash of the settings>.json`` (a store companion); ``None`` when not stored and
    ``compute`` is False. ``options``: the task's ``tasks.load`` options where the study's runs
    set them (its settings hold them then)."""
    settings = dict(task=task, model=models.EMBEDDED_NAME, probe="logistic, C=1, L-BFGS",
                    **({"options": options} if options else {}))

    def probe() -> dict:
        row = linear_probes(models.EMBEDDED_NAME, [task], options=options).iloc[0].to_dict()
        return dict(settings, **{k: v for k, v in row.items() if k != "task"})

    return cached.companion(root, f"probe-{cached.config_hash(settings)}.json",
                           compute=probe if compute else None)


def finetuning_inputs(tasks: list[str], root, *, protocols=empirical.PROTOCOLS, n_pairs: int = 256,
                      options: dict | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """What notebook 04 needs besides its runs, kept beside them in the store ``root`` (computed
    once, then read: ``empirical.stored_layers``, ``stored_probe``): the embedded model's
    plasticity on each task under each of ``protocols``, one row per block and component with
    its ``rate`` the block's plasticity (the mean over pairs: what ``plasticity.ranking``
    averages over blocks), and the linear probe's test accuracy (%) per task, on the tasks as
    the study's runs build them (``options``: ``Study.task_options``).

    Paper: Takeaway 3 (plasticity vs gain), Table 1's linear-probe column.
    """
    layers = pd.concat([empirical.stored_layers(root, t, n_pairs=n_pairs, protocol=p)
                        for p in protocols for t in tasks], ignore_index=True)
    rates = layers.rename(columns={"plasticity": "rate"}).drop(columns="ci95")
    probe = pd.Series({t: stored_probe(root, t, options=options)["test_acc"] for t in tasks},
                      name="test_acc").rename_axis("task")
    return rates, probe
