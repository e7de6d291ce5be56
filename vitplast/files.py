"""Files: the kit's one way to write a file, atomically, and to read JSON back.

A file is written to a temp file beside it (``.<name>.<random>.tmp``) then moved over it
(``os.replace``), so readers, and a process killed mid-write, see the old file or the new
one, never half of one. Used for run records and their companions (``vitplast.experiments.store``),
the load-or-compute cache, checkpoints (``pretrain``) and the unpacked Fashion-MNIST (``data``).
``locked`` makes concurrent read-modify-writes of one file take turns (a study log, claims);
``set_aside`` moves a damaged file out of the way without deleting it. ``read_checked`` reads
JSON and checks it once per version of the file within a process (a store read again is not
validated again).

Where the kit's files live: ``cache_dir`` (caches, the fetched weights) and ``results_root``
(the shipped results stores, ``data/`` or ``$VITPLAST_DATA``), found without loading torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yields a temp path beside ``path`` to write; when the block ends it replaces ``path``,
    and after an error it is removed (module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0o600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (``atomic_path``), synced to disk."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)


def write_json(path: str | Path, obj) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=1, default=str))


def read_json(path: str | Path):
    """The parsed JSON at ``path``, or ``None`` if it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


#: ``read_checked``'s memory: (kind, path, inode, size, mtime_ns) -> the problems found.
_CHECKED: dict[tuple, list[str]] = {}


def read_checked(path: str | Path, kind: str, check) -> tuple:
    """``(read_json(path), check(content))``, ``check`` (a function of the content returning a
    list of problems, named ``kind``) run once per version of the file within this process:
    remembered by its path, inode, size and modification time (an atomic write changes them),
    so that a store read again by the same process is not validated again. A file that cannot
    be stat'ed is read as ``None`` and checked (not remembered)."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return None, check(None)
    content = read_json(path)
    key = (kind, str(path.absolute()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _CHECKED:
        _CHECKED[key] = check(content)
    return content, list(_CHECKED[key])


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


def set_aside(path: str | Path) -> Path:
    """Move ``path`` to ``<name>.invalid-<UTC time>`` beside it (``-2``, ``-3``... when that
    is taken) and return the new path: a damaged file kept for inspection, out of the way of
    whatever reads ``path`` (it no longer ends in ``.json``)."""
    path = Path(path)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside, n = path.with_name(f"{path.name}.invalid-{stamp}"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.invalid-{stamp}-{n}")
    os.replace(path, aside)
    return aside


__all__ = ["atomic_path", "locked", "read_json", "set_aside", "write_json", "write_text"]


def sha256(path: str | Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_dir() -> Path:
    """The folder for caches (load-or-compute results, unpacked data): ``$VITPLAST_CACHE``,
    else ``.cache/`` in a repo checkout, else ``$XDG_CACHE_HOME/vitplast`` (default
    ``~/.cache/vitplast``)."""
    if "VITPLAST_CACHE" in os.environ:
        return Path(os.environ["VITPLAST_CACHE"])
    repo = Path(__file__).resolve().parents[1]  # a checkout: this file is vitplast/files.py
    if (repo / "pyproject.toml").exists():
        return repo / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vitplast"


#: Environment variable naming the folder that holds the shipped results stores (``finetune/``,
#: ``confounds/``) when vitplast is installed rather than run from a checkout.
DATA_ENV = "VITPLAST_DATA"


def results_root(name: str) -> Path:
    """Where the shipped results store ``name`` (``"finetune"``, ``"confounds"``) lives:
    ``$VITPLAST_DATA/name`` when that variable is set, else the checkout's ``data/name``.

    The path is returned whether or not it exists (a sweep may be about to fill it); readers
    call ``require_results`` to fail clearly on an absent store instead of reading it as empty.
    """
    base = os.environ.get(DATA_ENV)
    return Path(base) / name if base else Path(__file__).resolve().parents[1] / "data" / name


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
