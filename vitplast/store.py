"""The results store: one JSON file per run, named by the hash of its defining keys
(``vitplast.runs.run_hash``).

Files are written atomically (a temp file in the same folder, then ``os.replace``), so a run
killed mid-write leaves either the old file or none, never a half-written one; readers skip
anything that does not parse. A sweep asks ``exists`` before running, so it resumes.

Used by ``vitplast.sweep``, ``python -m vitplast pretrain`` and notebooks 04-06.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from vitplast.runs import defining, run_hash


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-serialisable config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0o600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def locked(path: str | Path):
    """Hold an exclusive lock on ``<path>.lock`` (``fcntl.flock``, released when the block
    ends or the process dies): read-modify-write of ``path`` by concurrent processes."""
    import fcntl

    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_json(path: str | Path, obj) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=1, default=str))


def read_json(path: str | Path):
    """The parsed JSON at ``path``, or ``None`` if it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def run_path(root: str | Path, config: dict) -> Path:
    """Where the run of ``config`` is stored under ``root``."""
    return Path(root) / f"{run_hash(config)}.json"


def exists(root: str | Path, config: dict) -> bool:
    """Whether a complete record of ``config``'s run is stored: one whose defining keys are
    ``config``'s (its runtime keys may differ)."""
    record = read_json(run_path(root, config))
    as_stored = json.loads(json.dumps(defining(config), default=str))
    return (isinstance(record, dict) and isinstance(record.get("config"), dict)
            and defining(record["config"]) == as_stored and "status" in record)


def save_run(root: str | Path, config: dict, record: dict) -> Path:
    """Store ``record`` (with ``config`` inside) for ``config``, atomically."""
    return write_json(run_path(root, config), {"config": config, **record})


def load_runs(root: str | Path) -> list[dict]:
    """Every complete run record under ``root`` (half-written or foreign files skipped)."""
    runs = []
    for path in sorted(Path(root).glob("*.json")):
        record = read_json(path)
        if isinstance(record, dict) and "config" in record:
            runs.append(record)
    return runs


def load_or_compute(name: str, params: dict, compute, folder: str | Path | None = None):
    """Return the cached result of ``compute()`` for ``params``, computing it once.

    The result (any picklable object, typically a DataFrame) is stored atomically as
    ``<folder>/<name>-<hash of params>.pkl`` with the params beside it in a ``.json``.
    """
    import pickle

    from vitplast.data import cache_dir

    folder = Path(folder) if folder is not None else cache_dir() / "results"
    path = folder / f"{name}-{config_hash(params)}.pkl"
    if path.exists():
        try:
            return pickle.loads(path.read_bytes())
        except Exception:  # unreadable cache: recompute
            pass
    result = compute()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(result, f)
    os.replace(tmp, path)
    write_json(path.with_suffix(".json"), params)
    return result
