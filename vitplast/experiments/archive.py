"""The shipped results, installable: every shipped study's store in one archive.

An installed vitplast holds the embedded model and the notebooks, not the study results the
notebooks read (too large for a wheel; ``data/README.md``). ``pack`` writes them into one
``vitplast-data-<version>.tar.gz``: a folder ``vitplast-data-<version>/`` holding the store of
every shipped study (``shipped_stores``: computed from ``studies.STUDIES``, never a list of
its own) and a ``MANIFEST.json`` (each file's size and sha256). ``unpack`` extracts it into a
folder, refusing links and paths outside it, checks every file against the manifest and every
store against its own schema (``Store.audit``: complete records, companions with their keys),
and only then moves the stores into place; point ``VITPLAST_DATA`` at that folder::

    vitplast data pack dist/                                # in a checkout
    vitplast data unpack dist/vitplast-data-0.1.0.tar.gz ~/vitplast-data   # beside an install
    export VITPLAST_DATA=~/vitplast-data

(``tar -xzf`` works too, without the checks: ``VITPLAST_DATA`` is then the extracted
``vitplast-data-<version>/``.) Which files of a store travel: every plain file in it, but
what a running sweep leaves (``SKIPPED``, as in ``.gitignore``: locks, claims, temp files).
"""

from __future__ import annotations

import fnmatch
import io
import json
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from vitplast import __version__
from vitplast.experiments import studies
from vitplast.experiments.store import Store
from vitplast.files import atomic_path, require_results, results_root, sha256

#: Files of a store that never travel: the lock, claims of runs in flight, temp files.
SKIPPED = ("*.lock", "*.claim", ".*")
MANIFEST = "MANIFEST.json"


def shipped_stores() -> dict[str, list[str]]:
    """Every shipped store (``Study.shipped``: under a checkout's ``data/``) -> the studies
    stored in it, in registry order."""
    out: dict[str, list[str]] = {}
    for study in studies.STUDIES.values():
        if study.shipped:
            out.setdefault(study.folder, []).append(study.name)
    return out


def archive_name() -> str:
    """``vitplast-data-<version>``: the archive's top folder (and its file, ``.tar.gz``)."""
    return f"vitplast-data-{__version__}"


def _files(root: Path) -> dict[str, Path]:
    """The files of a store that travel (module docstring), by their path in the store (a
    folder's files too: the real-model store's ``measurements/``)."""
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()
            and not any(fnmatch.fnmatch(p.name, pattern) for pattern in SKIPPED)}


def _check_store(root: Path) -> None:
    """``ValueError`` naming the files of the store at ``root`` that are not what its schema
    says (``Store.audit``), or a run in flight."""
    problems = Store(root).audit()
    if len(problems):
        listed = "; ".join(f"{r.file} ({r.kind}: {r.problem})"
                           for r in problems.head(5).itertuples())
        raise ValueError(f"the store {root} holds {len(problems)} file(s) that are not complete "
                         f"records or companions: {listed}; "
                         f"vitplast.experiments.store.Store({str(root)!r}).audit() lists them all")


def pack(dest: str | Path) -> Path:
    """Write every shipped store (``shipped_stores``, read where ``files.results_root`` finds
    them: a checkout's ``data/``, or ``$VITPLAST_DATA``) into ``dest/vitplast-data-<version>
    .tar.gz``, atomically; return its path.

    Raises:
        FileNotFoundError: a shipped store is absent (``files.require_results``'s message).
        ValueError: a store holds files its schema refuses (``Store.audit``), e.g. during a
            sweep.
    """
    roots = {store: require_results(results_root(store))
             for store in shipped_stores()}
    for root in roots.values():
        _check_store(root)
    top = archive_name()
    manifest = dict(archive=top, stores={
        store: dict(studies=names, files={name: dict(bytes=p.stat().st_size,
                                                     sha256=sha256(p))
                                          for name, p in _files(roots[store]).items()})
        for store, names in shipped_stores().items()})
    target = Path(dest) / f"{top}.tar.gz"
    text = json.dumps(manifest, indent=1).encode()
    info = tarfile.TarInfo(f"{top}/{MANIFEST}")
    info.size, info.mode, info.mtime = len(text), 0o644, time.time()
    with atomic_path(target) as tmp, tarfile.open(tmp, "w:gz") as tar:
        tar.addfile(info, io.BytesIO(text))
        for store, root in roots.items():
            for name, path in _files(root).items():
                tar.add(path, f"{top}/{store}/{name}", recursive=False)
    return target


def unpack(archive: str | Path, dest: str | Path) -> Path:
    """Extract an archive of ``pack`` into ``dest`` (made if missing) so that ``dest`` holds
    one folder per store; return ``dest``, the folder for ``VITPLAST_DATA``.

    Everything is checked in a temporary folder inside ``dest`` first (paths, the manifest's
    sizes and sha256, each store's schema); a store moves into place only when all pass.

    Raises:
        FileExistsError: ``dest`` already holds one of the stores (naming it).
        ValueError: not an archive of ``pack``, a file that differs from its manifest, a
            store its schema refuses, or a member outside its folder or a link (tarfile's
            ``data`` filter).
    """
    dest = Path(dest)
    _extract(archive, None)  # an unreadable file is refused before ``dest`` is made
    dest.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=dest, prefix=".unpack-"))
    try:
        _extract(archive, scratch)
        tops = list(scratch.iterdir())
        if len(tops) != 1 or not (tops[0] / MANIFEST).is_file():
            raise ValueError(f"{archive} is not an archive of `vitplast data pack`: it should "
                             f"hold one folder with a {MANIFEST}")
        manifest = json.loads((tops[0] / MANIFEST).read_text())
        clash = [s for s in manifest["stores"] if (dest / s).exists()]
        if clash:
            raise FileExistsError(f"{dest} already holds {clash}: unpack into another folder, "
                                  "or delete them first")
        for store, entry in manifest["stores"].items():
            _check_unpacked(tops[0] / store, entry["files"])
        for store in manifest["stores"]:
            (tops[0] / store).rename(dest / store)  # a folder, within one file system
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return dest


def _extract(archive: str | Path, folder: Path | None) -> None:
    """Extract ``archive`` into ``folder`` (``None``: only open it) under tarfile's ``data``
    filter; ``ValueError`` with the reason's first line when it cannot."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            if folder is not None:
                tar.extractall(folder, filter="data")
    except (tarfile.TarError, OSError) as err:
        first = str(err).splitlines()[0].rstrip(":") if str(err) else type(err).__name__
        raise ValueError(f"{archive} is not a readable archive of `vitplast data pack` "
                         f"({first})") from None


def _check_unpacked(root: Path, files: dict[str, dict]) -> None:
    """The extracted store at ``root`` holds exactly the manifest's ``files``, each of its
    size and sha256, and passes its schema (``_check_store``)."""
    found = set(_files(root)) if root.is_dir() else set()
    if found != set(files):
        raise ValueError(f"{root.name}/ differs from the archive's manifest: missing "
                         f"{sorted(set(files) - found)[:5]}, extra "
                         f"{sorted(found - set(files))[:5]}")
    for name, entry in files.items():
        path = root / name
        if path.stat().st_size != entry["bytes"] or sha256(path) != entry["sha256"]:
            raise ValueError(f"{root.name}/{name} differs from the archive's manifest (size or "
                             "sha256): the archive is damaged; pack it again")
    _check_store(root)


__all__ = ["MANIFEST", "SKIPPED", "archive_name", "pack", "shipped_stores", "unpack"]
