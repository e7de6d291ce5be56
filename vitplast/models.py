"""Models: any timm ViT by name, and the embedded pretrained model shipped in data/.

``load_model`` takes weights from one of three places:

1. the embedded checkpoints in ``data/`` (``name="vitplast_fmnist"``), verified by sha256
   against the manifest ``data/checkpoints.json``;
2. a local weights file for any timm name (``weights_file=...``), loaded by timm through
   ``pretrained_cfg_overlay=dict(file=...)`` so that heads and position embeddings adapt;
3. the Hugging Face hub for any timm name when online (``pretrained=True``).

Used by every notebook.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

import timm
import torch
from timm.models.vision_transformer import VisionTransformer

#: Folder holding the embedded checkpoints, their manifest and model card.
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
MANIFEST = DATA_DIR / "checkpoints.json"
EMBEDDED_NAME = "vitplast_fmnist"
#: The embedded model's architecture: a small ViT for 28x28 grayscale, 1,199,882 parameters.
EMBEDDED_ARCH = dict(img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=128,
                     depth=6, num_heads=4, mlp_ratio=4.0)


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` if given, else CUDA when available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_embedded(num_classes: int | None = None) -> VisionTransformer:
    """The embedded architecture with random weights (timm's default init)."""
    arch = dict(EMBEDDED_ARCH)
    if num_classes is not None:
        arch["num_classes"] = num_classes
    model = VisionTransformer(**arch)
    from vitplast.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD

    model.pretrained_cfg = dict(architecture=EMBEDDED_NAME, input_size=(1, 28, 28),
                                mean=(FASHION_MNIST_MEAN,), std=(FASHION_MNIST_STD,),
                                num_classes=arch["num_classes"], classifier="head")
    return model


def sha256(path: str | Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def embedded_checkpoints() -> dict:
    """The manifest's checkpoints: name -> dict(file, sha256, epoch, accuracies...)."""
    if not MANIFEST.exists():
        raise FileNotFoundError(f"{MANIFEST} is missing: run `python -m vitplast pretrain` "
                                "to make the embedded checkpoints")
    return json.loads(MANIFEST.read_text())["checkpoints"]


def _load_embedded(checkpoint: str, num_classes: int | None) -> VisionTransformer:
    from safetensors.torch import load_file

    checkpoints = embedded_checkpoints()
    if checkpoint not in checkpoints:
        raise ValueError(f"unknown checkpoint {checkpoint!r} of {EMBEDDED_NAME}; "
                         f"valid: {list(checkpoints)}")
    entry = checkpoints[checkpoint]
    path = DATA_DIR / entry["file"]
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (listed in {MANIFEST.name})")
    digest = sha256(path)
    if digest != entry["sha256"]:
        raise ValueError(f"{path.name} is corrupt or was changed: sha256 {digest} differs from "
                         f"the manifest's {entry['sha256']}. Restore it with `git checkout -- "
                         f"data/{path.name}` or remake it with `python -m vitplast pretrain`.")
    model = build_embedded()
    state = {k: v.float() for k, v in load_file(path).items()}
    model.load_state_dict(state)
    if num_classes is not None and num_classes != model.num_classes:
        model.reset_classifier(num_classes)
    return model


@torch.no_grad()
def new_head(model: VisionTransformer, num_classes: int, *, seed: int) -> VisionTransformer:
    """Replace the classifier by a freshly initialised one of ``num_classes`` outputs, in
    place; everything else (the final norm included) is kept.

    Paper: section 2 ("a new classification head" in every finetuning configuration). The
    init is PyTorch's default for a linear layer, U(-1/sqrt(d), 1/sqrt(d)) for weight and
    bias, drawn from a generator seeded by ``seed`` alone: the same seed gives the same head,
    whatever else used the global random state. Used by every finetuning run
    (``vitplast.sweep``), notebooks 04-05.
    """
    device = next(model.parameters()).device
    model.reset_classifier(num_classes)
    head = model.get_classifier()
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / head.in_features ** 0.5
    for p in (head.weight, head.bias):
        p.copy_(torch.rand(p.shape, generator=generator) * 2 * bound - bound)
    head.to(device)
    return model


def load_model(name: str = EMBEDDED_NAME, *, pretrained: bool = True, checkpoint: str = "final",
               weights_file: str | Path | None = None, num_classes: int | None = None,
               device: str | torch.device | None = "cpu", **timm_kwargs) -> VisionTransformer:
    """Load a ViT by name, in eval mode.

    Args:
        name: ``"vitplast_fmnist"`` (the embedded model) or any timm model name, e.g.
            ``"vit_base_patch16_224.orig_in21k"`` (the paper's ViT-B/16).
        pretrained: load weights; ``False`` gives timm's random initialisation.
        checkpoint: for the embedded model, which checkpoint along pretraining
            (``"init"``, ``"epoch1"``, ..., ``"final"``; see ``embedded_checkpoints()``).
        weights_file: a local weights file for a timm name (safetensors or a torch file).
        num_classes: the classifier's size. For the embedded model the pretrained head is
            kept when it already has this size; finetuning always replaces it (``new_head``).
        device: where to put the model; ``None`` picks CUDA when available.
        **timm_kwargs: passed to ``timm.create_model``.

    Raises:
        ValueError: unknown name or checkpoint, or a checksum mismatch.
        RuntimeError: hub weights requested but unreachable (with what to do instead).
    """
    if name == EMBEDDED_NAME:
        if timm_kwargs or weights_file is not None:
            raise ValueError(f"{EMBEDDED_NAME} takes no timm kwargs or weights_file")
        if pretrained:
            model = _load_embedded(checkpoint, num_classes)
        else:
            model = build_embedded(num_classes)
        return model.to(pick_device(device)).eval()
    if name.split(".")[0] not in timm.list_models():
        close = difflib.get_close_matches(name.split(".")[0], timm.list_models("*vit*"), n=5)
        raise ValueError(f"unknown model {name!r}. Valid: {EMBEDDED_NAME!r} or a timm ViT name "
                         f"(timm.list_models('*vit*')); close matches: {close}")
    if num_classes is not None:
        timm_kwargs["num_classes"] = num_classes
    if weights_file is not None:
        if not Path(weights_file).exists():
            raise FileNotFoundError(f"weights_file {weights_file} does not exist")
        timm_kwargs["pretrained_cfg_overlay"] = dict(file=str(weights_file))
        pretrained = True
    try:
        model = timm.create_model(name, pretrained=pretrained, **timm_kwargs)
    except Exception as err:
        if not pretrained or weights_file is not None:
            raise
        raise RuntimeError(
            f"could not fetch {name!r} weights from the hub ({type(err).__name__}: {err}). "
            "Offline? Download the weights elsewhere and pass weights_file=PATH, or set "
            "HF_HUB_OFFLINE=1 with a filled Hugging Face cache, or pretrained=False for a "
            f"random init, or use the embedded model {EMBEDDED_NAME!r}.") from err
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{name!r} builds a {type(model).__name__}, not a timm VisionTransformer; "
                         "vitplast measures the five components of VisionTransformer blocks")
    return model.to(pick_device(device)).eval()
