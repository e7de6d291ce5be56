"""Models: any timm ViT by name, and the embedded pretrained model shipped with the package.

``load_model`` takes weights from one of four places:

1. the embedded checkpoints in ``vitplast/checkpoints/`` (``name="vitplast_fmnist"``, package
   data: present in a checkout and in an installed wheel), verified by sha256 against the
   manifest ``checkpoints.json`` beside them;
2. a local weights file for any timm name (``weights_file=...``), loaded by timm through
   ``pretrained_cfg_overlay=dict(file=...)`` and checked by ``vitplast.weights``: a file saved
   for another patch or image size is refused (no silent resampling; pass the timm kwargs it
   was saved with), a saved head of the size asked is kept, a replaced head is announced;
3. a local folder in the Hugging Face layout (``"local-dir:PATH"``: ``config.json`` and
   ``model.safetensors``, as ``timm.models.push_to_hf_hub`` writes them);
4. the Hugging Face hub for any timm name when online (``pretrained=True``, or an
   ``"hf-hub:ORG/REPO"`` name).

Names are checked with timm's own parser before anything is built: unknown architectures
and pretrained tags fail at once with the valid ones.

Whether the hub is reachable, and reading its cache only when it is not, is
``vitplast.hub``'s.

The shipped study results are not package data (they are large): ``results_root`` finds them
in a checkout's ``data/``, or under ``$VITPLAST_DATA``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from pathlib import Path

import timm
import torch
from timm.models.vision_transformer import VisionTransformer

from vitplast import weights
from vitplast.hub import (
    cache_only,
    hub_reachable,
    maybe_cached,
)

#: Folder holding the embedded checkpoints, their manifest and model card (package data).
DATA_DIR = Path(__file__).resolve().parent / "checkpoints"
MANIFEST = DATA_DIR / "checkpoints.json"
#: Environment variable naming the folder that holds the shipped results stores (``finetune/``,
#: ``confounds/``) when vitplast is installed rather than run from a checkout.
DATA_ENV = "VITPLAST_DATA"
EMBEDDED_NAME = "vitplast_fmnist"
#: Fashion-MNIST train-set pixel statistics: the embedded model's input normalisation.
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
#: The embedded model's architecture: a small ViT for 28x28 grayscale, 1,199,882 parameters.
EMBEDDED_ARCH = dict(img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=128,
                     depth=6, num_heads=4, mlp_ratio=4.0)


def results_root(name: str) -> Path:
    """Where the shipped results store ``name`` (``"finetune"``, ``"confounds"``) lives:
    ``$VITPLAST_DATA/name`` when that variable is set, else the checkout's ``data/name``.

    The path is returned whether or not it exists (a sweep may be about to fill it); readers
    call ``require_results`` to fail clearly on an absent store instead of reading it as empty.
    """
    base = os.environ.get(DATA_ENV)
    return Path(base) / name if base else Path(__file__).resolve().parents[1] / "data" / name


def cache_dir() -> Path:
    """The folder for caches (load-or-compute results, unpacked data): ``$VITPLAST_CACHE``,
    else ``.cache/`` in a repo checkout, else ``$XDG_CACHE_HOME/vitplast`` (default
    ``~/.cache/vitplast``)."""
    if "VITPLAST_CACHE" in os.environ:
        return Path(os.environ["VITPLAST_CACHE"])
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").exists():
        return repo / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vitplast"


def require_results(root: str | Path) -> Path:
    """``root`` if it is a folder, else ``FileNotFoundError`` saying where the shipped stores
    live (a checkout's ``data/``) and how to point vitplast at them."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"no results store at {root}. The shipped study results are in a checkout's "
            f"data/{root.name}/, not in the installed package (`vitplast sweep` makes or resumes "
            f"a store). Point vitplast at them with {DATA_ENV}=FOLDER holding {root.name}/, or "
            "pass the store's folder (--root, results_dir=...).")
    return root


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` if given, else CUDA when available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_embedded(num_classes: int | None = None, arch: dict | None = None
                   ) -> VisionTransformer:
    """The embedded architecture (``arch``: ``VisionTransformer`` keywords, default
    ``EMBEDDED_ARCH``) with random weights (timm's default init)."""
    arch = dict(arch or EMBEDDED_ARCH)
    if num_classes is not None:
        arch["num_classes"] = num_classes
    model = VisionTransformer(**arch)
    model.pretrained_cfg = dict(architecture=EMBEDDED_NAME,
                                input_size=(arch["in_chans"], arch["img_size"], arch["img_size"]),
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
    return _manifest()["checkpoints"]


def _manifest(folder: Path | None = None) -> dict:
    """The manifest of the embedded checkpoints (or of a ``vitplast pretrain --out`` folder),
    checked (``checkpoints``, ``arch``, recipe...)."""
    path = MANIFEST if folder is None else Path(folder) / MANIFEST.name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m vitplast pretrain` "
                                "to make the embedded checkpoints")
    try:
        manifest = json.loads(path.read_text())
        checkpoints = manifest["checkpoints"]
        if not all({"file", "sha256"} <= set(e) for e in checkpoints.values()):
            raise KeyError("an entry lacks its 'file' or 'sha256'")
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path} is unreadable or truncated ({type(err).__name__}: {err}): "
                         "restore it from the checkout (`git checkout -- "
                         f"vitplast/checkpoints/{MANIFEST.name}`) or remake the checkpoints with "
                         "`python -m vitplast pretrain`") from err
    return manifest


def load_pretrained(folder: str | Path, checkpoint: str = "final", *,
                    num_classes: int | None = None,
                    device: str | torch.device | None = None) -> VisionTransformer:
    """A model that ``vitplast pretrain --out FOLDER`` wrote (another recipe than the shipped
    one, e.g. ``data/pretrain_no_weight_decay``), in eval mode: the checkpoint is checked
    against the folder's manifest (sha256) and built in the manifest's architecture.

    Raises:
        ValueError: unknown checkpoint (naming the valid ones), a checksum mismatch, an
            unreadable manifest. FileNotFoundError: no manifest or checkpoint file.
    """
    return _load_embedded(checkpoint, num_classes, Path(folder)).to(pick_device(device)).eval()


def _load_embedded(checkpoint: str, num_classes: int | None, folder: Path | None = None
                   ) -> VisionTransformer:
    from safetensors.torch import load_file

    manifest = _manifest(folder)
    checkpoints = manifest["checkpoints"]
    if checkpoint not in checkpoints:
        raise ValueError(f"unknown checkpoint {checkpoint!r} of {folder or EMBEDDED_NAME}; "
                         f"valid: {list(checkpoints)}")
    entry = checkpoints[checkpoint]
    path = (DATA_DIR if folder is None else folder) / entry["file"]
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (listed in {MANIFEST.name})")
    digest = sha256(path)
    if digest != entry["sha256"]:
        raise ValueError(f"{path} is corrupt or was changed: sha256 {digest} differs from "
                         f"the manifest's {entry['sha256']}. Restore it (`git checkout -- "
                         f"vitplast/checkpoints/{path.name}` in a checkout, or reinstall "
                         "vitplast) or remake it with `python -m vitplast pretrain`.")
    model = build_embedded(arch=manifest.get("arch"))  # as pretrained
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
    whatever else used the global random state.
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


#: timm name -> the local weights file ``load_model(name)`` reads when given no
#: ``weights_file`` (set by ``use_weights_file``).
WEIGHTS_FILES: dict[str, Path] = {}


def use_weights_file(name: str, weights_file: str | Path | None) -> None:
    """From now on, ``load_model(name)`` reads its weights from ``weights_file`` (an explicit
    ``weights_file=`` still wins, ``pretrained=False`` still gives a random init); an empty
    ``weights_file`` forgets it.

    The paper profile offline: notebooks 01-03 call it in their setup cell with their
    ``weights_file`` parameter, so that every model their functions load (e.g.
    ``empirical.measure_tasks``) comes from the local file, not the hub.

    Raises:
        ValueError: the embedded model (its weights ship with vitplast) or an invalid name.
        FileNotFoundError: ``weights_file`` does not exist.
    """
    if not weights_file:
        WEIGHTS_FILES.pop(name, None)
        return
    if name == EMBEDDED_NAME:
        raise ValueError(f"weights_file {weights_file} was given for {EMBEDDED_NAME!r}, whose "
                         "weights ship with vitplast; set model_name to the timm name the file "
                         "holds weights of, e.g. vit_base_patch16_224.orig_in21k")
    check_name(name)
    if not Path(weights_file).is_file():
        raise FileNotFoundError(f"weights_file {weights_file} does not exist")
    WEIGHTS_FILES[name] = Path(weights_file)


def check_name(name: str) -> None:
    """Check a model name with timm's own parser, before anything is built or downloaded.

    Valid: ``"vitplast_fmnist"``; a timm architecture with or without a pretrained tag
    (``"vit_base_patch16_224"``, ``"vit_base_patch16_224.orig_in21k"``); ``"hf-hub:ORG/REPO"``;
    ``"local-dir:PATH"`` (a folder holding ``config.json``).

    Raises:
        ValueError: an unknown architecture (with close matches), an unknown pretrained tag
            (with the architecture's valid tags), an unknown source prefix, or a path-like name
            without one (timm's message).
        FileNotFoundError: a ``local-dir:`` folder without ``config.json``.
    """
    from timm.models import (
        get_arch_pretrained_cfgs,
        get_pretrained_cfg,
        is_model,
        parse_model_name,
        split_model_name_tag,
    )

    if name == EMBEDDED_NAME:
        return
    try:
        source, model_id = parse_model_name(name)
    except ValueError as err:
        raise ValueError(f"invalid model name {name!r}: {err}") from None
    if source == "local-dir":
        if not (Path(model_id) / "config.json").is_file():
            raise FileNotFoundError(f"local-dir model {model_id} has no config.json; expected a "
                                    "folder in the Hugging Face layout (config.json and "
                                    "model.safetensors), as timm.models.save_for_hf writes it")
        return
    if source is not None:  # hf-hub: the hub holds the config; found out at load time
        return
    arch, tag = split_model_name_tag(model_id)
    if not is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models("*vit*"), n=5)
        raise ValueError(f"unknown model {name!r}. Valid: {EMBEDDED_NAME!r} or a timm ViT name "
                         f"(timm.list_models('*vit*')), 'hf-hub:ORG/REPO' or 'local-dir:PATH'; "
                         f"close matches: {close}")
    if tag:
        try:
            get_pretrained_cfg(model_id)
        except RuntimeError:
            tags = [n.split(".", 1)[1] for n in get_arch_pretrained_cfgs(arch)]
            raise ValueError(f"unknown pretrained tag {tag!r} of {arch}; valid tags: {tags}"
                             ) from None


def _hub_error(name: str, err: Exception | None) -> RuntimeError:
    """The error of hub weights that could not be had (``err`` None: the hub is unreachable
    and they are not cached), naming what to do instead."""
    why = ("the hub is unreachable from here and they are not in the Hugging Face cache"
           if err is None else f"{type(err).__name__}: {str(err)[:300]}")
    return RuntimeError(
        f"could not fetch {name!r} from the hub ({why}). Download the weights where the hub is "
        "reachable and pass weights_file=PATH (CLI: --weights-file; notebooks: -p weights_file "
        "PATH) with the timm name, or a local-dir:PATH folder; or pretrained=False for a random "
        f"init, or the embedded model {EMBEDDED_NAME!r}.")


def load_model(name: str = EMBEDDED_NAME, *, pretrained: bool = True, checkpoint: str = "final",
               weights_file: str | Path | None = None, num_classes: int | None = None,
               device: str | torch.device | None = None, **timm_kwargs) -> VisionTransformer:
    """Load a ViT by name, in eval mode.

    Args:
        name: ``"vitplast_fmnist"`` (the embedded model), any timm model name, e.g.
            ``"vit_base_patch16_224.orig_in21k"`` (the paper's ViT-B/16), or a timm source name
            ``"hf-hub:ORG/REPO"`` / ``"local-dir:PATH"`` (checked by ``check_name``).
        pretrained: load weights; ``False`` gives timm's random initialisation.
        checkpoint: for the embedded model, which checkpoint along pretraining
            (``"init"``, ``"epoch1"``, ..., ``"final"``; see ``embedded_checkpoints()``).
        weights_file: a local weights file for a timm name (safetensors or a torch file); an
            empty string means none (the notebooks' default). Default: the file
            ``use_weights_file`` set for ``name``, if any.
        num_classes: the classifier's size. For the embedded model the pretrained head is
            kept when it already has this size; finetuning always replaces it (``new_head``).
        device: where to put the model; ``None`` (the default) picks CUDA when available.
        **timm_kwargs: passed to ``timm.create_model``, e.g. the architecture of your own
            weights: ``load_model("vit_tiny_patch16_224", weights_file="tiny32.safetensors",
            img_size=32, patch_size=4, num_classes=10)``.

    Raises:
        ValueError: unknown name, pretrained tag or checkpoint, a checksum mismatch, or a
            weights file that is not one, belongs to another architecture (naming the keys that
            differ) or was saved for another patch or image size (naming the kwargs that fit).

    Warns:
        UserWarning: a weights file whose saved head has another class count than asked (the
            head is a new one).
        FileNotFoundError: a missing weights file or ``local-dir`` folder.
        RuntimeError: hub weights requested but unreachable (with what to do instead).
    """
    weights_file = weights_file or (WEIGHTS_FILES.get(name) if pretrained else None)
    check_name(name)
    if name == EMBEDDED_NAME:
        if timm_kwargs or weights_file is not None:
            raise ValueError(f"{EMBEDDED_NAME} takes no timm kwargs or weights_file")
        if pretrained:
            model = _load_embedded(checkpoint, num_classes)
        else:
            model = build_embedded(num_classes)
        return model.to(pick_device(device)).eval()
    if num_classes is not None:
        timm_kwargs["num_classes"] = num_classes
    if weights_file is not None:
        weights_file = Path(weights_file)
        if not weights_file.is_file():
            raise FileNotFoundError(f"weights_file {weights_file} does not exist")
        timm_kwargs["pretrained_cfg_overlay"] = dict(file=str(weights_file))
        pretrained = True
    source = name.split(":", 1)[0] if ":" in name else None  # hf-hub, local-dir (check_name)
    hub = weights_file is None and source != "local-dir" and (pretrained or source == "hf-hub")
    offline = hub and not hub_reachable()
    if offline and not maybe_cached(name):  # before timm builds (seconds for a ViT-B)
        raise _hub_error(name, None)
    try:
        with cache_only(offline):  # the cache only: no retries against an unreachable hub
            model = timm.create_model(name, pretrained=pretrained, **timm_kwargs)
    except Exception as err:
        if weights_file is not None:
            bare = {k: v for k, v in timm_kwargs.items() if k != "pretrained_cfg_overlay"}
            raise weights.load_error(weights_file, name, err, lambda: timm.create_model(
                name, pretrained=False, **bare)) from err
        if not hub:
            raise
        raise _hub_error(name, None if offline else err) from err
    if weights_file is not None:
        weights.check_fit(weights_file, model, name)  # no silent resampling, head kept or said
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{name!r} builds a {type(model).__name__}, not a timm VisionTransformer; "
                         "vitplast measures the five components of VisionTransformer blocks")
    return model.to(pick_device(device)).eval()
