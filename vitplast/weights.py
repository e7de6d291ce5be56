"""Weights files: whether a local weights file fits the model it is loaded into.

timm adapts a file to the model asked for without a word: it resamples position embeddings
and patch-embedding kernels to another image or patch size, and drops a saved head whenever
the class count asked differs from the pretrained config's (even when it equals the saved
head's). ``models.load_model`` checks the result here instead: a file saved for another patch
size or image size is refused (naming the arguments that would fit), a saved head of the size
asked is loaded, and a head replaced by a new one is announced (classes saved vs asked). A file
that does not load at all is explained by the keys whose shapes differ.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch

#: The tensors whose shapes fix the input a ViT takes: (key, what a mismatch means).
_INPUT_KEYS = (("patch_embed.proj.weight", "patch size or input channels"),
               ("pos_embed", "image size (number of patch tokens)"))
_HEAD = "head.weight"


def state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file (safetensors, or a torch file holding a state dict,
    possibly under ``state_dict`` / ``model``), as timm reads them."""
    from timm.models import load_state_dict

    return load_state_dict(str(path), weights_only=True)


def _shape(t) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _input_advice(saved: dict, model) -> str:
    """The timm arguments that would build the model the file was saved from."""
    kw = {}
    if "patch_embed.proj.weight" in saved:
        _, chans, ph, _ = _shape(saved["patch_embed.proj.weight"])
        kw.update(patch_size=ph, in_chans=chans)
        if "pos_embed" in saved:
            tokens = _shape(saved["pos_embed"])[1] - getattr(model, "num_prefix_tokens", 1)
            side = math.isqrt(max(tokens, 0))
            if side * side == tokens:
                kw["img_size"] = side * ph
    return ", ".join(f"{k}={v}" for k, v in kw.items())


def check_fit(path: str | Path, model, name: str) -> None:
    """Check that ``model`` (built by timm from the file at ``path``) holds the file's weights
    unresampled, and mend the head timm dropped.

    Raises:
        ValueError: the file was saved for another patch size, input channels or image size
            (timm resampled it into another model), naming the keys and the arguments that fit.
    Warns:
        UserWarning: the saved head has another class count than asked: the model has a new
            random head (classes saved vs asked).
    """
    saved = state_dict(path)
    own = model.state_dict()
    for key, what in _INPUT_KEYS:
        if key in saved and key in own and _shape(saved[key]) != _shape(own[key]):
            raise ValueError(
                f"weights_file {path} was saved for another {what} than {name!r}: {key} is "
                f"{_shape(saved[key])} in the file, {_shape(own[key])} in the model; timm would "
                "resample it into another model. Pass the arguments the weights were saved with: "
                f"{_input_advice(saved, model)} (Python: load_model(name, weights_file=..., "
                "**kwargs); notebooks: -p model_args '{...}')")
    if _HEAD not in saved or _HEAD not in own:
        return
    asked, have = _shape(own[_HEAD]), _shape(saved[_HEAD])
    if asked == have:  # the saved head fits: keep it (timm drops it when the config differs)
        with torch.no_grad():
            for key in (_HEAD, "head.bias"):
                if key in saved:
                    own[key].copy_(saved[key])
        return
    warnings.warn(f"weights_file {path} holds a head of {have[0]} classes; {name!r} asks for "
                  f"{asked[0]}: the head is a new random one of {asked[0]} outputs (every other "
                  "weight loaded)", stacklevel=3)


def differing_keys(saved: dict, own: dict, limit: int = 5) -> list[str]:
    """The keys whose shapes differ between a file and a model, then those only one has,
    ``limit`` at most, each with both shapes."""
    out = [f"{k}: file {_shape(saved[k])}, model {_shape(own[k])}" for k in own
           if k in saved and _shape(saved[k]) != _shape(own[k])]
    out += [f"{k}: only in the model" for k in own if k not in saved]
    out += [f"{k}: only in the file" for k in saved if k not in own]
    return out[:limit]


def load_error(path: Path, name: str, err: Exception, build) -> ValueError:
    """A clear error for a weights file timm could not load: not a weights file at all, or
    the weights of another architecture (with the keys that differ from ``build()``, the model
    asked for, built without weights)."""
    try:
        saved = state_dict(path)
    except Exception:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        first = " ".join(lines[:2])[:300] or type(err).__name__
        return ValueError(f"weights_file {path} is not a safetensors file (*.safetensors) or a "
                          f"torch state dict (*.pth, *.bin): it cannot be read ({first})")
    try:
        keys = differing_keys(saved, build().state_dict())
    except Exception:  # the architecture itself cannot be built with these arguments
        keys = []
    head = [k for k in keys if k.startswith(_HEAD + ":") and "file (" in k]
    hint = (f" (num_classes={_shape(saved[_HEAD])[0]} for the saved head)" if head else "")
    return ValueError(f"weights_file {path} does not fit {name!r}: its tensors belong to another "
                      f"architecture; keys that differ in size: {'; '.join(keys) or 'none found'} "
                      f"({type(err).__name__}). Pass the timm name and arguments the weights were "
                      f"saved with{hint}.")
