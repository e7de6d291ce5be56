"""Another pretraining recipe: what training, not a gauge, does to the plasticity ranking.

Paper: Takeaway 2 (its order, Fig. 2). The residual-stream gauge (``vitplast.measure.gauge``)
shows that the ranking rests on a scale the architecture leaves free; which scale a network
ends up with is set by its pretraining (initialisation, weight decay, learning rate).
``vitplast pretrain --out FOLDER --weight-decay W --stages ...`` pretrains the same architecture
by another recipe (the kit ships one as package data,
``vitplast/checkpoints/pretrain_no_weight_decay``: no weight decay;
``models.load_pretrained("pretrain_no_weight_decay")``); ``recipe_rankings`` measures its
ranking beside the embedded model's and ``recipe_statistics`` the statistics that set it
(``stream.model_statistics``); ``vitplast.report.scale_findings.recipe_findings`` states both
orders against the paper's Fig. 2. Not the same function as the embedded model: another network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from vitplast import cached, models
from vitplast.measure import empirical
from vitplast.measure.empirical import SOURCE
from vitplast.measure.stream import changed_rankings, model_statistics, shown, token_images


def recipe_rankings(folder, tasks, *, protocols=("embedding", "hidden"), source: str = SOURCE,
                    data_root: str = "", n_pairs: int = 256, root=None) -> pd.DataFrame:
    """The ranking of a model another pretraining recipe made (``vitplast pretrain --out
    FOLDER``, read by ``models.load_pretrained``) beside the embedded model's, per task and
    protocol (load-or-compute; with ``root``, kept beside a study there:
    ``cached.kept_table``): ``plasticity.ranking`` with a ``recipe`` column ("shipped", or the
    folder's name)."""
    folder = Path(folder)
    final = json.loads((folder / "checkpoints.json").read_text())["checkpoints"]["final"]
    key = dict(folder=folder.name, sha256=final["sha256"], tasks=list(tasks),
               protocols=list(protocols), source=source, data_root=data_root, n_pairs=n_pairs,
               weights=models.weights_id(models.EMBEDDED_NAME))

    def compute():  # value 1: the embedded model (its cached rates); 2: the folder's model
        ranked = changed_rankings(models.EMBEDDED_NAME, tasks, (1.0, 2.0),
                           lambda _, __: models.load_pretrained(folder), "recipe", protocols,
                           source=source, data_root=data_root, n_pairs=n_pairs)
        return ranked.assign(recipe=ranked["recipe"].map({1.0: "shipped", 2.0: folder.name}))

    return cached.kept_table("recipe-rankings", key, compute, root)


def recipe_statistics(folder, task: str, *, source: str = SOURCE, data_root: str = "",
                      n_pairs: int = 32) -> pd.DataFrame:
    """``stream.model_statistics`` of the embedded model and of the folder's model on the same
    images (both images of ``n_pairs`` pairs of ``task``), averaged over layers: one row per
    recipe ("shipped", or the folder's name); the plug-in named a plug-in (``stream.shown``)."""
    folder = Path(folder)
    nets = {"shipped": models.load_model(), folder.name: models.load_pretrained(folder)}
    pairs = empirical.task_pairs(task, source, n_pairs=n_pairs, model=nets["shipped"],
                                 data_root=data_root)
    images = torch.cat(pairs.tensors())
    return shown(pd.DataFrame({name: model_statistics(net, images, token_images(
        net, task=source or task, data_root=data_root)).drop(columns="layer").mean()
                                for name, net in nets.items()}).T.rename_axis("recipe"))
