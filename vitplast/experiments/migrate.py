"""Bring results stores written in an older record layout to the current one.

One change so far: a record held its run under the key ``config`` (so the trained selection
read ``record["config"]["config"]``); it now holds it under ``run`` (``record["run"]["config"]``).
Nothing else moves: no value, no file name (a run's hash is of the run itself, not of the key
that holds it). The store refuses an old record and names this module as the fix
(``store.record_problems``).

Each file is rewritten atomically (``files.write_json``), so a migration killed midway resumes
where it stopped; a migrated store migrates to itself. Files that are no old records
(companions, current records, foreign files) are left as they are.

Usage::

    python -m vitplast.experiments.migrate data/finetune data/suite ...
"""

from __future__ import annotations

import sys
from pathlib import Path

from vitplast.experiments.store import Store, record_problems
from vitplast.files import read_json, write_json


def migrated(record) -> dict | None:
    """``record`` in the current layout (``run`` first, every other key in its order), or
    ``None`` when it is no record of the older layout (no ``config`` object, or a ``run``)."""
    if not isinstance(record, dict) or "run" in record or not isinstance(
            record.get("config"), dict):
        return None
    return {"run": record["config"], **{k: v for k, v in record.items() if k != "config"}}


def migrate(root: str | Path) -> dict[str, int]:
    """Rewrite every record of the older layout in the store at ``root``; return how many
    files were ``migrated`` and how many were ``left`` as they are.

    Raises:
        ValueError: a migrated record is still not complete (``store.record_problems``,
            named with its file); it is not written, and the files before it stay migrated.
    """
    counts = dict(migrated=0, left=0)
    for path in Store(root).record_files():
        new = migrated(read_json(path))
        if new is None:
            counts["left"] += 1
            continue
        problems = record_problems(new, path)
        if problems:
            raise ValueError(f"{path}: not a complete record once migrated: {'; '.join(problems)}")
        write_json(path, new)
        counts["migrated"] += 1
    return counts


USAGE = "usage: python -m vitplast.experiments.migrate FOLDER [FOLDER ...]"


def main(argv: list[str] | None = None) -> int:
    """The command: migrate each results folder named; 2 (with the reason) if one is not a
    folder or none is named."""
    roots = sys.argv[1:] if argv is None else argv
    if not roots:
        print(USAGE, file=sys.stderr)
        return 2
    for root in roots:
        if not Path(root).is_dir():
            print(f"{root}: no such folder (a results store is a folder of run records)",
                  file=sys.stderr)
            return 2
        counts = migrate(root)
        print(f"{root}: {counts['migrated']} record(s) migrated, {counts['left']} file(s) left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
