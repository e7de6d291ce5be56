"""The ``vitplast data`` and ``vitplast cache`` commands: the files vitplast keeps outside its
package.

- ``data pack DIR`` / ``data unpack ARCHIVE DEST``: the shipped study results as one archive,
  to install beside an installed copy and point ``VITPLAST_DATA`` at
  (``vitplast.experiments.archive``).
- ``cache info`` / ``cache clear [PART ...]``: where the cache is (``files.cache_dir``:
  ``$VITPLAST_CACHE``, a checkout's ``.cache/``, else ``$XDG_CACHE_HOME/vitplast`` or
  ``~/.cache/vitplast``), how large each of its parts is, and deleting it (or some parts).
  Everything in it is remade on demand: load-or-compute results, the unpacked Fashion-MNIST,
  the smoke studies' stores.

Building the parsers imports nothing heavy (``--help`` answers at once).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from vitplast import files


def command_group(sub, name: str, help: str, description: str):
    """A command with actions (``vitplast NAME ACTION ...``) on the CLI's subparsers ``sub``:
    its parser, and the subparsers its actions are added to (the action chosen is
    ``args.action``, required). Used by ``data`` and ``cache`` here, ``weights``
    (``cli_weights``) and ``notebooks`` (``cli_notebooks``)."""
    return sub.add_parser(name, help=help, description=description).add_subparsers(
        dest="action", required=True)


def add_parsers(sub) -> None:
    """The ``data`` and ``cache`` subcommands, on the CLI's subparsers ``sub``."""
    d_sub = command_group(sub, "data", "the shipped study results as one installable archive",
                          "The study results the notebooks read (data/<store>/ of a checkout: "
                          "every shipped study's store) are too large for the wheel. `data pack "
                          "DIR` writes them into DIR/vitplast-data-<version>.tar.gz; `data "
                          "unpack ARCHIVE DEST` checks and extracts one beside an installed "
                          "copy: then export VITPLAST_DATA=DEST.")
    p = d_sub.add_parser("pack", help="write the shipped stores into one archive",
                         description="Write every shipped study's store (read from the "
                         "checkout's data/, or $VITPLAST_DATA) into "
                         "DIR/vitplast-data-<version>.tar.gz, with a manifest of sha256s.")
    p.add_argument("dir", metavar="DIR", help="folder for the archive (created if missing)")
    u = d_sub.add_parser("unpack", help="check and extract an archive of `data pack`",
                         description="Extract an archive of `data pack` into DEST (one folder "
                         "per store), after checking every file against its manifest and every "
                         "store against its schema; then point VITPLAST_DATA at DEST.")
    u.add_argument("archive", metavar="ARCHIVE", help="vitplast-data-<version>.tar.gz")
    u.add_argument("dest", metavar="DEST", help="folder to hold the stores (created if missing)")
    c_sub = command_group(sub, "cache", "where the cache is, its size, and clearing it",
                          "The cache holds what vitplast remakes on demand (load-or-compute "
                          "results, the unpacked Fashion-MNIST, the smoke studies' stores). It "
                          "is $VITPLAST_CACHE if set, else a checkout's .cache/, else "
                          "$XDG_CACHE_HOME/vitplast or ~/.cache/vitplast.")
    c_sub.add_parser("info", help="print the cache's folder and the size of each part",
                     description="Print the cache's folder, why it is there, and the size of "
                     "each of its parts (its top-level folders and files).")
    k = c_sub.add_parser("clear", help="delete the cache, or some of its parts",
                         description="Delete everything in the cache folder, or only the "
                         "parts named (as `cache info` lists them); all is remade on demand.")
    k.add_argument("parts", nargs="*", metavar="PART", help="parts to delete (default: all)")


def command(args, parser, argv) -> int:
    """Do ``data`` or ``cache`` ``args.action``; bad input ends in ``parser.error``."""
    if args.command == "data":
        return _data(args, parser)
    return _cache_info() if args.action == "info" else _cache_clear(args.parts, parser)


def _data(args, parser) -> int:
    from vitplast.experiments import archive

    try:
        if args.action == "pack":
            path = archive.pack(args.dir)
            print(f"{path} ({_mb(path.stat().st_size)}; stores "
                  f"{', '.join(archive.shipped_stores())})\nbeside an installed copy: vitplast "
                  f"data unpack {path.name} DEST && export VITPLAST_DATA=DEST")
        else:
            dest = archive.unpack(args.archive, args.dest)
            print(f"unpacked and checked into {dest}; point vitplast at it:\n"
                  f"export {files.DATA_ENV}={dest.resolve()}")
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        parser.error(str(err))
    return 0


def cache_parts(folder: Path) -> dict[str, int]:
    """Each top-level entry of ``folder`` -> its size in bytes (files counted once; links not
    followed), largest first; empty when the folder is absent."""
    if not folder.is_dir():
        return {}
    sizes = {}
    for entry in folder.iterdir():
        paths = [entry] if not entry.is_dir() or entry.is_symlink() else [
            Path(d) / f for d, _, files in os.walk(entry) for f in files]
        sizes[entry.name] = sum(p.lstat().st_size for p in paths)
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def _where(folder: Path) -> str:
    """Why the cache is at ``folder`` (``files.cache_dir``'s rule that chose it)."""
    if "VITPLAST_CACHE" in os.environ:
        return "set by VITPLAST_CACHE"
    if folder.name == ".cache":
        return "a checkout's .cache/; VITPLAST_CACHE=FOLDER moves it"
    if os.environ.get("XDG_CACHE_HOME"):
        return "under XDG_CACHE_HOME; VITPLAST_CACHE=FOLDER moves it"
    return "under ~/.cache; XDG_CACHE_HOME or VITPLAST_CACHE=FOLDER moves it"


def _cache_info() -> int:
    folder = files.cache_dir()
    parts = cache_parts(folder)
    print(f"cache: {folder} ({_where(folder)})")
    for name, size in parts.items():
        print(f"  {name:<24} {_mb(size):>10}")
    print(f"  {'total':<24} {_mb(sum(parts.values())):>10}" if parts else "  (empty)")
    print("clear it: vitplast cache clear (all), or vitplast cache clear PART ...")
    return 0


def _cache_clear(parts: list[str], parser) -> int:
    folder = files.cache_dir()
    found = cache_parts(folder)
    unknown = sorted(set(parts) - set(found))
    if unknown:
        parser.error(f"no part {unknown} in the cache {folder}; valid: {sorted(found)}")
    if folder.resolve() in (Path.home().resolve(), Path(folder.anchor)) or any(
            (folder / marker).exists() for marker in ("pyproject.toml", ".git")):
        parser.error(f"{folder} looks like a home, root or project folder, not a cache: "
                     "check VITPLAST_CACHE; nothing deleted")
    chosen = parts or list(found)
    for name in chosen:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    print(f"deleted {', '.join(chosen) or 'nothing'} from {folder} "
          f"({_mb(sum(found[n] for n in chosen))} freed)")
    return 0


def _mb(size: int) -> str:
    """A size in MB (kB below 0.1 MB, so that a small part does not read as empty)."""
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"
