"""The Hugging Face hub, seen from here: is it reachable, are a model's weights in its cache,
and a scope in which its client reads the cache only.

``models.load_model`` asks before a hub download, so that offline it reads the cache only and
fails in seconds (naming what to do instead), not after the hub client's retries.
"""

from __future__ import annotations

from contextlib import contextmanager

#: Seconds ``hub_reachable`` waits for the hub to answer.
HUB_TIMEOUT = 2.0


def hub_reachable(timeout: float = HUB_TIMEOUT) -> bool:
    """Whether the Hugging Face hub (``HF_ENDPOINT``) accepts a connection within
    ``timeout`` seconds; False at once under ``HF_HUB_OFFLINE=1``. ``load_model`` asks before
    a hub download, so that offline it reads the cache only and fails in seconds, not after
    the hub client's retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.is_offline_mode():
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout).close()
    except OSError:
        return False
    return True


def maybe_cached(name: str) -> bool:
    """False when ``name``'s weights are on the Hugging Face hub and surely not in its local
    cache; True when they are there or cannot be told without timm (an ``hf-hub:`` name,
    whose config timm reads in a fraction of a second, or weights hosted elsewhere)."""
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg, parse_model_name

    source, model_id = parse_model_name(name)
    cfg = get_pretrained_cfg(model_id) if source is None else None
    if cfg is None or not cfg.hf_hub_id:
        return True
    files = [cfg.hf_hub_filename] if cfg.hf_hub_filename else [
        "model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"]
    return any(isinstance(try_to_load_from_cache(cfg.hf_hub_id, f), str) for f in files)


@contextmanager
def cache_only(offline: bool):
    """Inside, the Hugging Face client reads its cache only (as under ``HF_HUB_OFFLINE=1``)."""
    if not offline:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before

