"""The token scale: how large the tokens a model embeds are, one definition for the course.

Paper: r = 19.4 on ViT-B (``paper.VITB_RMS_TOKEN_NORM``), the RMS token norm
sqrt(mean_i ||x_i||^2) of its embedded CIFAR-10 test tokens, plugged into Prop. 3 (an average,
not a largest radius). Here, the same statistic of a model's embedding (``rms_token_norm``) on
the first ``TOKEN_SCALE_IMAGES`` test images of the pretraining domain (``token_images``:
Fashion-MNIST for the embedded model, drawn as the x of every pair), natural images of the kind
its pretraining saw, as CIFAR-10 is for ViT-B: not a low-contrast task's images, which would
shrink it. ``token_scale`` gives r beside the paper's and their ratio (how many times larger
ViT-B's tokens are); its findings row is ``vitplast.report.plasticity_findings.token_findings``.
Notebooks 01, 02 and 02b quote this one number (and ``stream.model_statistics`` reads the same
images for its ``r_embedding``).
"""

from __future__ import annotations

import torch
from torch import nn

from vitplast.measure.empirical import SOURCE, SOURCE_SEED, load_task_for
from vitplast.measure.rates import embed
from vitplast.paper import VITB_RMS_TOKEN_NORM

__all__ = ["TOKEN_SCALE_IMAGES", "rms_token_norm", "token_images", "token_scale"]

#: How many test images of the pretraining domain the token scale is measured on
#: (``token_scale``): the x images of the first pairs of every task.
TOKEN_SCALE_IMAGES = 256


@torch.no_grad()
def rms_token_norm(model: nn.Module, images: torch.Tensor) -> float:
    """sqrt(mean_i ||x_i||^2) over every token (CLS, patches) of the embedding of ``images``
    (``rates.embed``): the paper's r (an average, not a largest radius)."""
    return embed(model, images).float().pow(2).sum(-1).mean().sqrt().item()


def token_scale(model: nn.Module, *, n_images: int = TOKEN_SCALE_IMAGES, task: str = SOURCE,
                data_root: str = "") -> dict:
    """The model's token scale, ONE definition for every notebook: the RMS token norm of its
    embedding (``rms_token_norm``) on the first ``n_images`` test images of the pretraining
    domain ``task`` (drawn as the x of every pair: ``empirical.task_pairs``), beside the
    paper's r on ViT-B (19.4, on CIFAR-10 test images: natural images of the kind its
    pretraining saw, not a low-contrast task's), and their ratio.

    Returns:
        ``{"r": ..., "paper_r": 19.4, "ratio": paper_r / r, "n_images": ...}``: ``ratio`` is
        how many times larger ViT-B's tokens are (the scale s at which this model's embedding
        is as large as ViT-B's).

    Paper: the r = 19.4 plugged into Prop. 3 (``paper.VITB_RMS_TOKEN_NORM``)."""
    images = token_images(model, n_images=n_images, task=task, data_root=data_root)
    r = rms_token_norm(model.eval(), images)
    return dict(r=r, paper_r=VITB_RMS_TOKEN_NORM, ratio=VITB_RMS_TOKEN_NORM / r,
                n_images=len(images))


def token_images(model: nn.Module, *, n_images: int = TOKEN_SCALE_IMAGES, task: str = SOURCE,
                 data_root: str = "") -> torch.Tensor:
    """The images ``token_scale`` reads: the first ``n_images`` test images of ``task`` as
    the x of every pair is drawn (``empirical.SOURCE_SEED``), in ``model``'s input format."""
    test = load_task_for(task, model, data_root or None, seed=SOURCE_SEED).test
    return torch.stack([test[i][0] for i in range(min(n_images, len(test)))])
