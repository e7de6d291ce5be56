"""Weights files and model names: whether a local weights file fits the model it is loaded
into, which file and timm arguments a name loads with, and whether a name is one timm knows.

timm adapts a file to the model asked for without a word: it resamples position embeddings
and patch-embedding kernels to another image or patch size, and drops a saved head whenever
the class count asked differs from the pretrained config's (even when it equals the saved
head's). ``models.load_model`` checks the result here instead: a file saved for another patch
size or image size is refused (naming the arguments that would fit), a saved head of the size
asked is loaded, and a head replaced by a new one is announced (classes saved vs asked). A file
that does not load at all is explained by the keys whose shapes differ.

A ``ModelSpec`` is a model name with the weights file and timm keyword arguments
(``model_args``) it loads with, one typed value: what a notebook's setup returns for one's own
weights (``models.model_spec``) and passes wherever a model is loaded (``name_of`` and ``own``
read it); ``check_model_args`` checks such a dict; ``check_timm_name`` checks a name with
timm's own parser before anything is built.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch


def check_model_args(model_args) -> dict:
    """``model_args`` (timm keyword arguments: a dict, or any mapping, with str keys; ``None``
    or empty: none) as a new plain dict, else ``ValueError`` naming what it takes."""
    if model_args is None:
        return {}
    if not isinstance(model_args, Mapping) or not all(isinstance(k, str) for k in model_args):
        raise ValueError(f"model_args takes a dict of timm keyword arguments, e.g. "
                         f"{{'img_size': 32, 'patch_size': 4, 'num_classes': 10}}; got "
                         f"{model_args!r} ({type(model_args).__name__})")
    return dict(model_args)


class _Args:
    """A ``ModelSpec``'s ``model_args`` field: checked when set (``check_model_args``), kept as
    a sorted tuple of items (immutable and picklable, so ``asdict``, ``replace``, ``copy`` and
    ``pickle`` all work) and read as a new dict (a deep copy: the spec shares no list). A data
    descriptor as a dataclass field's default: the dataclass calls ``__set__`` in ``__init__``
    and takes ``__get__(None, cls)`` (None: no arguments) as the default."""

    def __set_name__(self, owner, name):
        self._name = "_" + name

    def __get__(self, spec, owner=None):
        return None if spec is None else copy.deepcopy(dict(getattr(spec, self._name)))

    def __set__(self, spec, value):
        args = copy.deepcopy(check_model_args(value))
        object.__setattr__(spec, self._name, tuple(sorted(args.items())))


@dataclass(frozen=True, eq=True)
class ModelSpec:
    """A model name with the ``weights_file`` (a path or None) and ``model_args`` (timm keyword
    arguments; each read gives a new dict) it loads with, as one value: what a notebook's setup
    returns for one's own weights (``models.model_spec`` checks it) and passes wherever its
    model is loaded, e.g. ``models.load_model(spec)``, ``models.weights_id(spec)`` or the model
    of ``measure.empirical.plasticity_study``. A function that takes one takes ``str | ModelSpec``
    (``name_of`` gives the name, ``own`` the rest).

    It is no string: ``spec == "vit_tiny_patch16_224"`` is False. ``str(spec)`` is its name,
    which is what a table's ``model`` column and the JSON of a cache key write
    (``models.weights_id`` tells the weights of two specs of one name apart). Immutable, and a
    dataclass like any other: ``dataclasses.replace``, ``asdict`` and ``ModelSpec(s.name,
    s.weights_file, s.model_args)`` work.
    """

    name: str
    weights_file: Path | None = None
    model_args: Mapping = _Args()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a ModelSpec's name takes a model name (a non-empty string), got "
                             f"{self.name!r}")
        object.__setattr__(self, "weights_file",
                           Path(self.weights_file) if self.weights_file else None)

    def __str__(self) -> str:
        return self.name

    def __hash__(self) -> int:  # model_args may hold unhashable values (lists)
        return hash((self.name, self.weights_file))


def name_of(model: str | ModelSpec) -> str:
    """The name of ``model``, a name or a ``ModelSpec``."""
    return model.name if isinstance(model, ModelSpec) else model


def own(model: str | ModelSpec) -> dict:
    """What ``model`` loads with when given nothing else: a ``ModelSpec``'s ``weights_file``
    (a path or None) and ``model_args`` (a new dict, maybe empty); a plain name's are none."""
    if isinstance(model, ModelSpec):
        return dict(weights_file=model.weights_file, model_args=model.model_args)
    return dict(weights_file=None, model_args={})


def check_timm_name(name: str, embedded: str) -> None:
    """Check a timm model name with timm's own parser, before anything is built or
    downloaded (``models.check_name``; ``embedded``: the embedded model's name, offered as
    the alternative).

    Valid: a timm architecture with or without a pretrained tag (``"vit_base_patch16_224"``,
    ``"vit_base_patch16_224.orig_in21k"``); ``"hf-hub:ORG/REPO"``; ``"local-dir:PATH"`` (a
    folder holding ``config.json``).
    """
    import timm
    from timm.models import (
        get_arch_pretrained_cfgs,
        get_pretrained_cfg,
        is_model,
        parse_model_name,
        split_model_name_tag,
    )

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
        raise ValueError(f"unknown model {name!r}. Valid: {embedded!r} or a timm ViT name "
                         f"(timm.list_models('*vit*')), 'hf-hub:ORG/REPO' or 'local-dir:PATH'; "
                         f"close matches: {close}")
    if tag:
        try:
            get_pretrained_cfg(model_id)
        except RuntimeError:
            tags = [n.split(".", 1)[1] for n in get_arch_pretrained_cfgs(arch)]
            raise ValueError(f"unknown pretrained tag {tag!r} of {arch}; valid tags: {tags}"
                             ) from None

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


def _input_advice(saved: dict, model) -> dict:
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
    return kw


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
            fit = _input_advice(saved, model)
            raise ValueError(
                f"weights_file {path} was saved for another {what} than {name!r}: {key} is "
                f"{_shape(saved[key])} in the file, {_shape(own[key])} in the model; timm would "
                "resample it into another model. Pass the arguments the weights were saved with: "
                f"{', '.join(f'{k}={v}' for k, v in fit.items())} (Python: load_model(name, "
                f"weights_file=..., **kwargs); notebooks: -p model_args '{json.dumps(fit)}')")
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
