"""The hub seen from here (``vitplast.hub``): reachable only when something answers at its
endpoint and never in offline mode; weights counted as cached only when their file is in the
Hugging Face cache; the cache-only scope restores the client's flag, also after an error."""

import socket

import pytest
from huggingface_hub import constants

from vitplast import hub

PAPER_MODEL = "vit_base_patch16_224.orig_in21k"


@pytest.fixture
def online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def test_reachable_when_something_answers_and_never_offline(online, monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub.hub_reachable()
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        assert not hub.hub_reachable()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert not hub.hub_reachable(timeout=0.5)
    assert hub.hub_reachable is hub.hub_reachable


def test_weights_count_as_cached_only_when_their_file_is_there(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # an empty cache
    assert not hub.maybe_cached(PAPER_MODEL)
    assert hub.maybe_cached("hf-hub:timm/anything")  # its config lives on the hub: can't tell
    repo = tmp_path / f"models--timm--{PAPER_MODEL}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "model.safetensors").write_bytes(b"")
    assert hub.maybe_cached(PAPER_MODEL)


def test_the_cache_only_scope_restores_the_flag(online):
    with hub.cache_only(False):
        assert constants.HF_HUB_OFFLINE is False
    with hub.cache_only(True):
        assert constants.HF_HUB_OFFLINE is True
    assert constants.HF_HUB_OFFLINE is False
    with pytest.raises(RuntimeError), hub.cache_only(True):
        raise RuntimeError("boom")
    assert constants.HF_HUB_OFFLINE is False
