"""Claims: a run held by one process while it trains, so that concurrent sweeps over one store
never train it twice.

Before a run trains, its claim ``<store>/<run hash>.claim`` is created atomically
(``O_CREAT | O_EXCL``) holding the owner's host, pid and a token (``hold``); the owner touches
it every ``HEARTBEAT_S`` seconds while the run trains (its modification time is the
heartbeat) and removes it when the block ends, after the record is written or the run failed.
A claim is dead (``alive``) when its heartbeat is older than ``CLAIM_TIMEOUT_S`` or its owner
pid is gone on this host: the next process that wants the run takes it over, and a dead claim
whose run is finished is removed by the next sweep (``remove_dead``). One store-wide lock
(``files.locked`` on ``<store>/claims``) orders every check and take-over.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from vitplast.files import locked, read_json

#: A claim whose heartbeat is older than this (seconds) is dead.
CLAIM_TIMEOUT_S = 300.0
#: How often (seconds) the owner of a claim touches it.
HEARTBEAT_S = 30.0


@contextlib.contextmanager
def hold(path: Path, *, timeout: float = CLAIM_TIMEOUT_S, heartbeat: float = HEARTBEAT_S):
    """Hold the claim at ``path`` for the block (module docstring).

    Yields ``True`` when this process holds it: a daemon thread touches it every
    ``heartbeat`` seconds, and it is removed when the block ends, also after an error.
    Yields ``False`` when a live owner holds it; a dead one (heartbeat older than
    ``timeout``, or owner pid gone on this host) is taken over.
    """
    token = _take(path, timeout, heartbeat)
    if token is None:
        yield False
        return
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(path, token, heartbeat, stop), daemon=True)
    beat.start()
    try:
        yield True
    finally:
        stop.set()
        beat.join()
        with locked(path.parent / "claims"):
            if (read_json(path) or {}).get("token") == token:
                path.unlink(missing_ok=True)


def present(folder: Path) -> list[tuple[Path, dict, float]]:
    """Every claim in ``folder``: (path, owner as stored, seconds since its heartbeat)."""
    out = []
    for path in sorted(Path(folder).glob("*.claim")):
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:  # released meanwhile
            continue
        out.append((path, read_json(path) or {}, age))
    return out


def remove_dead(folder: Path, finished: Callable[[Path], bool]) -> list[str]:
    """Remove each dead claim in ``folder`` (``alive`` is False at ``CLAIM_TIMEOUT_S``)
    whose run is ``finished`` (a function of the claim's path); return their names. The
    others stay: a dead claim of a run still to do is taken over by the process that runs
    it."""
    removed = []
    if not any(Path(folder).glob("*.claim")):  # nothing to order: no lock file made
        return removed
    with locked(Path(folder) / "claims"):
        for path, owner, age in present(folder):
            if not alive(owner, age, CLAIM_TIMEOUT_S) and finished(path):
                path.unlink(missing_ok=True)
                removed.append(path.name)
    return removed


def alive(owner: dict, age: float, timeout: float) -> bool:
    """Whether a claim of ``owner`` (host, pid) touched ``age`` seconds ago is held."""
    if age > timeout:
        return False
    pid = owner.get("pid")
    if owner.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, another user's
            return True
    return True


def _take(path: Path, timeout: float, heartbeat: float) -> str | None:
    """Create the claim at ``path`` (taking over a dead one); its token, or None if a live
    owner holds it. One store-wide lock orders the check and the take-over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent / "claims"):
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            age = None
        if age is not None:
            if alive(read_json(path) or {}, age, timeout):
                return None
            path.unlink(missing_ok=True)  # dead: taken over
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # created by a writer that does not take the lock
            return None
        token = uuid.uuid4().hex
        with os.fdopen(fd, "w") as f:
            json.dump(dict(host=socket.gethostname(), pid=os.getpid(), token=token,
                           claimed=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           heartbeat_s=heartbeat), f)
        return token


def _beat(path: Path, token: str, period: float, stop: threading.Event) -> None:
    """Touch the claim every ``period`` seconds while it is ours, until ``stop``."""
    while not stop.wait(period):
        try:
            if (read_json(path) or {}).get("token") == token:
                os.utime(path)
        except OSError:
            pass


__all__ = ["CLAIM_TIMEOUT_S", "HEARTBEAT_S", "alive", "hold", "present", "remove_dead"]
