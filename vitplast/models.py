"""Models: any timm ViT by name, and the embedded pretrained model shipped with the package.

``load_model`` takes weights from one of five places:

1. the embedded checkpoints in ``vitplast/checkpoints/`` (``name="vitplast_fmnist"``, package
   data: present in a checkout and in an installed wheel), verified by sha256 against the
   manifest ``checkpoints.json`` beside them; the same architecture pretrained by another
   recipe ships beside them (``load_pretrained("pretrain_no_weight_decay")``);
2. a local weights file for any timm name (``weights_file=...``), loaded by timm through
   ``pretrained_cfg_overlay=dict(file=...)`` and checked by ``vitplast.weights``: a file saved
   for another patch or image size is refused (no silent resampling; pass the timm kwargs it
   was saved with), a saved head of the size asked is kept, a replaced head is announced;
3. a local folder in the Hugging Face layout (``"local-dir:PATH"``: ``config.json`` and
   ``model.safetensors``, as ``timm.models.push_to_hf_hub`` writes them);
4. the Hugging Face hub for any timm name when online (``pretrained=True``, or an
   ``"hf-hub:ORG/REPO"`` name);
5. real weights the kit fetched and verified (``"dinov2-small"``: ``vitplast.fetched``).

Names are checked with timm's own parser before anything is built: unknown architectures
and pretrained tags fail at once with the valid ones.

Whether the hub is reachable, and reading its cache only when it is not, is
``vitplast.hub``'s.

The shipped study results are not package data (they are large): ``files.results_root`` finds
them in a checkout's ``data/``, or under ``$VITPLAST_DATA``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vitplast import fetched, files, weights
from vitplast.hub import cache_only, hub_reachable, maybe_cached

if TYPE_CHECKING:  # timm is imported where a model is built: a sweep submits its cluster
    from timm.models.vision_transformer import VisionTransformer  # jobs before paying for it

#: Folder holding the embedded checkpoints, their manifest and model card (package data).
DATA_DIR = Path(__file__).resolve().parent / "checkpoints"
MANIFEST = DATA_DIR / "checkpoints.json"
EMBEDDED_NAME = "vitplast_fmnist"
#: Fashion-MNIST train-set pixel statistics: the embedded model's input normalisation.
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
#: The embedded model's architecture: a small ViT for 28x28 grayscale, 1,199,882 parameters.
EMBEDDED_ARCH = dict(img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=128,
                     depth=6, num_heads=4, mlp_ratio=4.0)


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` if given, else CUDA when available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_embedded(num_classes: int | None = None, arch: dict | None = None
                   ) -> VisionTransformer:
    """The embedded architecture (``arch``: ``VisionTransformer`` keywords, default
    ``EMBEDDED_ARCH``) with random weights (timm's default init)."""
    from timm.models.vision_transformer import VisionTransformer

    arch = dict(arch or EMBEDDED_ARCH)
    if num_classes is not None:
        arch["num_classes"] = num_classes
    model = VisionTransformer(**arch)
    model.pretrained_cfg = dict(architecture=EMBEDDED_NAME,
                                input_size=(arch["in_chans"], arch["img_size"], arch["img_size"]),
                                mean=(FASHION_MNIST_MEAN,), std=(FASHION_MNIST_STD,),
                                num_classes=arch["num_classes"], classifier="head")
    return model


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


def shipped_pretrained() -> dict[str, Path]:
    """The models another pretraining recipe made that ship with vitplast (package data beside
    the embedded checkpoints, each a ``vitplast pretrain --out`` folder with its checkpoints,
    manifest, model card and sha256): name -> folder, e.g. ``pretrain_no_weight_decay``."""
    return {p.name: p for p in sorted(DATA_DIR.iterdir()) if (p / MANIFEST.name).is_file()}


def pretrained_folder(folder: str | Path) -> Path:
    """``folder`` if it is a folder, else the shipped model of that name
    (``shipped_pretrained``); else ``FileNotFoundError`` naming the shipped ones."""
    if Path(folder).is_dir():
        return Path(folder)
    shipped = shipped_pretrained()
    if str(folder) in shipped:
        return shipped[str(folder)]
    raise FileNotFoundError(f"no pretrained model folder {folder}: give a folder `vitplast "
                            f"pretrain --out` wrote, or one shipped with vitplast: {list(shipped)}")


def load_pretrained(folder: str | Path, checkpoint: str = "final", *,
                    num_classes: int | None = None,
                    device: str | torch.device | None = None) -> VisionTransformer:
    """A model that ``vitplast pretrain --out FOLDER`` wrote (another recipe than the shipped
    one), in eval mode: ``folder`` is such a folder or the name of one shipped with vitplast
    (``"pretrain_no_weight_decay"``: ``pretrained_folder``); the checkpoint is checked against
    the folder's manifest (sha256) and built in the manifest's architecture.

    Raises:
        ValueError: unknown checkpoint (naming the valid ones), a checksum mismatch, an
            unreadable manifest. FileNotFoundError: no such folder (naming the shipped ones),
            no manifest or checkpoint file.
    """
    folder = pretrained_folder(folder)
    return _load_embedded(checkpoint, num_classes, folder).to(pick_device(device)).eval()


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
        shipped = "" if folder is None else (
            "; an installed copy ships the final checkpoint of this folder only, the others are "
            "in a checkout's vitplast/checkpoints/")
        raise FileNotFoundError(f"{path} is missing (listed in {MANIFEST.name}){shipped}")
    digest = files.sha256(path)
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


def model_spec(name: str, weights_file: str | Path | None = "",
               model_args: dict | None = None) -> str | weights.ModelSpec:
    """``name`` with the weights file and architecture it loads with, checked: a
    ``weights.ModelSpec`` (one typed value), or ``name`` itself when both are empty (the name's
    own weights and architecture). ``load_model(spec)`` reads its weights from
    ``weights_file`` and builds the architecture with ``model_args`` (timm keyword arguments,
    e.g. ``img_size=32, patch_size=4``); an explicit argument still wins, ``pretrained=False``
    still gives a random init (in that architecture).

    The notebooks' ``weights_file`` and ``model_args`` parameters: their setup cell
    (``course.parameters.setup``) returns this value and passes it as the model to every
    function that loads the model (e.g. ``empirical.plasticity_study(spec, ...)``), so that
    each loads your model, not timm's default or the hub's.

    Raises:
        ValueError: a weights file or model_args for the embedded model (its weights and
            architecture ship with vitplast), model_args that is not a dict of names, or an
            invalid name.
        FileNotFoundError: ``weights_file`` does not exist.
    """
    model_args = weights.check_model_args(model_args)
    if name == EMBEDDED_NAME and (weights_file or model_args):
        what = "weights_file" if weights_file else "model_args"
        raise ValueError(f"{what} was given for {EMBEDDED_NAME!r}, whose weights and "
                         "architecture ship with vitplast; set model_name to the timm name the "
                         "weights are of, e.g. vit_base_patch16_224.orig_in21k or "
                         "vit_tiny_patch16_224 (with model_args for your own architecture)")
    if name != EMBEDDED_NAME:
        check_name(name)
    if weights_file and not Path(weights_file).is_file():
        raise FileNotFoundError(f"weights_file {weights_file} does not exist")
    if not weights_file and not model_args:
        return name
    return weights.ModelSpec(name, weights_file, model_args)


def check_name(name: str) -> None:
    """Check a model name with timm's own parser, before anything is built or downloaded:
    ``"vitplast_fmnist"`` or what ``weights.check_timm_name`` accepts (a timm architecture
    with or without a pretrained tag, ``"hf-hub:ORG/REPO"``, ``"local-dir:PATH"``).

    Raises:
        ValueError: an unknown architecture (with close matches), an unknown pretrained tag
            (with the architecture's valid tags), an unknown source prefix, or a path-like name
            without one (timm's message).
        FileNotFoundError: a ``local-dir:`` folder without ``config.json``.
    """
    if name != EMBEDDED_NAME and name not in fetched.FETCHED:
        weights.check_timm_name(name, EMBEDDED_NAME)


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


def load_model(name: str | weights.ModelSpec = EMBEDDED_NAME, *, pretrained: bool = True,
               checkpoint: str = "final", weights_file: str | Path | None = None,
               num_classes: int | None = None, device: str | torch.device | None = None,
               **timm_kwargs) -> VisionTransformer:
    """Load a ViT by name, in eval mode.

    Args:
        name: ``"vitplast_fmnist"`` (the embedded model), a fetched model (``"dinov2-small"``,
            ``fetched.model``: ``img_size`` resamples it), any timm model name, e.g.
            ``"vit_base_patch16_224.orig_in21k"`` (the paper's ViT-B/16), or a timm source name
            ``"hf-hub:ORG/REPO"`` / ``"local-dir:PATH"`` (checked by ``check_name``); or a
            ``weights.ModelSpec`` of one (``model_spec``), with its weights and architecture.
        pretrained: load weights; ``False`` gives timm's random initialisation.
        checkpoint: for the embedded model, which checkpoint along pretraining
            (``"init"``, ``"epoch1"``, ..., ``"final"``; see ``embedded_checkpoints()``).
        weights_file: a local weights file for a timm name (safetensors or a torch file); an
            empty string means none (the notebooks' default). Default: the file of ``name``
            when it is a ``weights.ModelSpec``, if any.
        num_classes: the classifier's size. For the embedded model the pretrained head is
            kept when it already has this size; finetuning always replaces it (``new_head``).
        device: where to put the model; ``None`` (the default) picks CUDA when available.
        **timm_kwargs: passed to ``timm.create_model``, e.g. the architecture of your own
            weights: ``load_model("vit_tiny_patch16_224", weights_file="tiny32.safetensors",
            img_size=32, patch_size=4, num_classes=10)``; default: the ``model_args`` of
            ``name`` when it is a ``weights.ModelSpec``.

    Raises:
        ValueError: unknown name, pretrained tag or checkpoint, a checksum mismatch, or a
            weights file that is not one, belongs to another architecture (naming the keys that
            differ) or was saved for another patch or image size (naming the kwargs that fit).
        FileNotFoundError: a missing weights file, ``local-dir`` folder or fetched model.
        RuntimeError: hub weights requested but unreachable (with what to do instead).
    Warns: a weights file whose saved head has another class count than asked (a new head).
    """
    own, name = weights.own(name), weights.name_of(name)
    weights_file = weights_file or (own["weights_file"] if pretrained else None)
    timm_kwargs = {**own["model_args"], **timm_kwargs}
    if name in fetched.FETCHED and pretrained and weights_file is None:  # `vitplast weights get`
        model = fetched.model(name, num_classes=num_classes, **timm_kwargs)
        return model.to(pick_device(device))
    check_name(name)
    if name == EMBEDDED_NAME:
        if timm_kwargs or weights_file is not None:
            raise ValueError(f"{EMBEDDED_NAME} takes no timm kwargs or weights_file")
        model = (_load_embedded(checkpoint, num_classes) if pretrained
                 else build_embedded(num_classes))
        return model.to(pick_device(device)).eval()
    if num_classes is not None:
        timm_kwargs["num_classes"] = num_classes
    if weights_file is not None:
        weights_file = Path(weights_file)
        if not weights_file.is_file():
            raise FileNotFoundError(f"weights_file {weights_file} does not exist")
        timm_kwargs["pretrained_cfg_overlay"] = dict(file=str(weights_file))
        pretrained = True
    import timm
    from timm.models.vision_transformer import VisionTransformer

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


def weights_id(model: str | weights.ModelSpec, checkpoints=("final",)) -> str:
    """What a measurement of ``model`` depends on of its weights, for the key of a table
    kept beside a study (``cached.kept_table``): the sha256 of each of the embedded model's
    ``checkpoints`` (its manifest's, which ``load_model`` verifies), else the name
    (a timm model's weights are its name's), with the ``weights_file`` and ``model_args`` it
    loads with when it is a ``weights.ModelSpec`` holding any (``model_spec``; issue 43: one's
    own model never reads the tables of another; a weights file changed in place under its
    name is not noticed).
    """
    own, model_name = weights.own(model), weights.name_of(model)
    if model_name in fetched.FETCHED:
        return fetched.manifest(model_name)["sha256"]
    if model_name != EMBEDDED_NAME:
        if not own["weights_file"] and not own["model_args"]:
            return model_name
        return json.dumps(dict(model_name=model_name, model_args=own["model_args"],
                               weights_file=str(own["weights_file"] or "")), sort_keys=True,
                          default=str)  # model_args may hold a class, e.g. act_layer
    known = embedded_checkpoints()
    return ",".join(known[c]["sha256"] for c in checkpoints)
