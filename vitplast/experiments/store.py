"""The results store, a value: ``Store(root)``, the folder ``root`` holding one JSON file per run,
named by the hash of its defining keys (``vitplast.experiments.runs.run_hash``), and an account of
every file in it. ``Store(root).path(run)`` is where a run's record is; ``has``, ``record`` and
``save`` read and write one run, ``records`` every complete one (``record_files``: the files
that should be records), ``audit`` names every other file, ``clean_temp`` deletes the debris of
killed writes and ``clean_dead_claims`` the claims left beside finished runs (``tidy``: all of
it, before a sweep), ``plan`` says which of a sweep's runs to train (copying the records of
those another store holds), ``claim`` holds a run while it trains, and ``companion`` /
``write_companion`` read and write the files kept beside the records (``COMPANIONS``).

Files are written atomically (``files.atomic_path``: a temp file in the same folder, then
``os.replace``), so a run killed mid-write leaves either the old file or none, never a
half-written one (its orphan temp file, ``.<name>.json.<random>.tmp``, is deleted by the next
sweep: ``Store.clean_temp``).

Every file kind is read through its published schema (``vitplast.schema``; the documents are
``vitplast/schemas/<kind>.schema.json``): a record (``record_problems``) passes ``record`` (its
``run`` passes ``run``: keys, types, ranges), is named by its run's hash, and when ``ok`` holds
its results; a companion passes the schema its name maps to (``COMPANIONS``). A file that fails
is never used: ``Store.audit`` names it with the key, the value found and what is expected;
``Store.records`` warns about those it skips; a sweep re-runs a run whose record fails (a
record of the older layout, its run under ``config``, names its fix:
``vitplast.experiments.migrate``); a companion that fails is set aside (``files.set_aside``) and
computed again by the call that computes it, and a study log that fails is refused (``companion``),
its fix keeping its sessions (``study_log.restart_log``). A sweep asks ``Store.has`` before running,
so it resumes.

Claims (``Store.claim``, ``vitplast.experiments.claims``): a run is claimed by the process
that trains it, so two sweeps over one store never train the same run twice; a dead claim is
taken over by the next process that wants its run, or removed by the next sweep when its run
has a complete record (``clean_dead_claims``: its owner died between the two).

What does not depend on a store's folder stays a function: ``record_problems`` here, and the
companion files' kinds and checks in ``vitplast.cached`` (``COMPANIONS``, ``companion``), which
measurements below the experiments use without a store.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import re
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from vitplast import schema
from vitplast.cached import COMPANIONS, companion, companion_problems, write_companion
from vitplast.experiments import claims
from vitplast.experiments.runs import defining, run_hash, setting
from vitplast.experiments.runtime import FLAG, parse_shard
from vitplast.files import atomic_path, read_checked, write_json
from vitplast.measure.components import names

#: The outcomes a complete record may have (``runner.run_one``; the record schema's ``status``).
STATUSES = ("ok", "diverged", "failed")
#: An orphan temp file older than this (seconds) is debris of a killed write.
TEMP_AGE_S = 300.0
_HASH_NAME = re.compile(r"[0-9a-f]{16}")


def record_problems(record, path: str | Path | None = None) -> list[str]:
    """Why ``record`` (read from ``path``) is not a complete run record; empty if it is.

    Complete: it passes the ``record`` schema (``vitplast.schema``: a ``run`` that passes
    ``run``, a ``status`` of ``STATUSES``, accuracies in [0, 1] or null, and when ``ok`` both
    accuracies and a non-empty ``history``), and its file is named by its run's hash.
    """
    if not isinstance(record, dict):
        return ["not a JSON object (unreadable, half-written, or not a run record)"]
    if not isinstance(record.get("run"), dict):
        if isinstance(record.get("config"), dict):
            return ["an older record layout (its run under `config`); migrate it: python -m "
                    f"vitplast.experiments.migrate {Path(path).parent if path else 'ROOT'}"]
        return ["no `run` object: not a run record"]
    problems = schema.problems("record", record)
    run = record["run"]
    if path is not None and not problems and Path(path).stem != run_hash(run):
        problems.append(f"named {Path(path).stem} but its run hashes to {run_hash(run)} "
                        "(an older hash, or a moved file)")
    return problems


def _read_record(path: Path) -> tuple:
    """The record at ``path`` and its ``record_problems``, checked once per version of the
    file within this process (``files.read_checked``)."""
    return read_checked(path, "record", lambda record: record_problems(record, path))


@dataclass(frozen=True)
class Store:
    """The results store in the folder ``root`` (module docstring): its run records, their
    claims and its companion files. A value: it holds only its folder (a ``str`` is made a
    ``Path``), so stores compare by folder and pickle to other processes; every method reads
    the files anew.

    Example::

        runs = Store("data/finetune")
        with runs.claim(run) as mine:
            if mine and not runs.has(run):
                runs.save(run, runner.run_one(run))
    """

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))  # frozen: set once, here

    def path(self, run: dict) -> Path:
        """Where the record of ``run`` is: ``root/<run_hash(run)>.json`` (there or not)."""
        return self.root / f"{run_hash(run)}.json"

    def record(self, run: dict) -> dict | None:
        """The complete record of ``run``, or ``None``: no file at its ``path``, or one that
        is not complete (``record_problems``; ``audit`` says why), or the record of a run
        whose defining keys differ from ``run``'s (its runtime keys may differ)."""
        return self._record_at(self.path(run), run)

    def _record_at(self, path: Path, run: dict) -> dict | None:
        """``record`` of ``run``, whose ``path`` is known."""
        record, problems = _read_record(path)
        if problems:
            return None
        as_stored = json.loads(json.dumps(defining(run), default=str))
        return record if defining(record["run"]) == as_stored else None

    def plan(self, runs: list[dict], retry_failed: bool = False, sources=()
             ) -> list[tuple[dict, int | None]]:
        """What a sweep of ``runs`` trains, each run once (by hash, in order of first
        appearance): (run, stale) pairs for ``needs``, where ``stale`` is the modification time
        (ns) of the failed record a retry replaces (``retry_failed``: a stored run whose
        status is "failed" is planned again), else ``None`` (no complete record).

        ``sources``: other stores' folders. A run without a record here whose identical run
        (same hash) one of them holds is not trained: its record is copied here (atomically),
        whatever study made it.
        """
        todo = {}
        for run in runs:
            path = self.path(run)
            record = self._record_at(path, run) or self._copy(path, run, sources)
            if record is None:
                todo[path.stem] = (run, None)
            elif retry_failed and record["status"] == "failed":
                todo[path.stem] = (run, path.stat().st_mtime_ns)
        return list(todo.values())

    def _copy(self, path: Path, run: dict, sources) -> dict | None:
        """The record of ``run`` from the first store of ``sources`` that holds it, copied to
        ``path`` (its file here); ``None`` if none holds it."""
        for source in map(Store, sources):
            record = source._record_at(source.root / path.name, run)
            if record is not None:
                with atomic_path(path) as tmp:
                    shutil.copyfile(source.root / path.name, tmp)
                return record
        return None

    def has(self, run: dict) -> bool:
        """Whether a complete record of ``run`` is stored (``record``): a sweep asks before
        running, so it resumes."""
        return self.record(run) is not None

    def needs(self, run: dict, stale: int | None = None) -> bool:
        """Whether ``run`` still needs training: no complete record (``record``), or
        (``stale``: the modification time, in ns, of the failed record a retry replaces)
        that failed record is still there, unchanged (no other sweep re-ran it)."""
        if stale is None and not self.path(run).exists():
            return True
        record = self.record(run)
        if record is None:
            return True
        return (stale is not None and record["status"] == "failed"
                and self.path(run).stat().st_mtime_ns == stale)

    def save(self, run: dict, record: dict) -> Path:
        """Store ``record`` with ``run`` inside (a ``run`` key of ``record`` wins) at
        ``path(run)``, atomically; return that path. Not validated: a record that is not
        complete is written, and reads as absent (``has``)."""
        return write_json(self.path(run), {"run": run, **record})

    def records(self) -> list[dict]:
        """Every complete run record in the store; the files skipped (half-written, invalid
        or foreign) are named in one warning (``audit`` says why). Companions are no records."""
        runs, skipped = [], []
        for path in self.record_files():
            record, problems = _read_record(path)
            if problems:
                skipped.append(path.name)
            else:
                runs.append(record)
        if skipped:
            warnings.warn(f"{len(skipped)} file(s) under {self.root} are not complete run "
                          f"records and were skipped: {skipped[:5]}"
                          f"{' ...' if len(skipped) > 5 else ''}; "
                          "vitplast.experiments.store.Store(root).audit() says why (a sweep "
                          "re-runs those at a run's path)",
                          stacklevel=2)
        return runs

    def audit(self):
        """Every file in the store that is not a complete run record, and why.

        Returns:
            A DataFrame, one row per file: ``file`` (name), ``kind`` ("invalid" for a file
            named like a record, "foreign" for any other JSON but ``COMPANIONS``, "invalid
            companion" for a companion that fails its schema (``companion`` never uses it),
            "orphan temp" for the temp file of a killed write older than ``TEMP_AGE_S``,
            "claim" for a run in flight, "dead claim"), ``problem`` (what is wrong: each key
            with the value found and what its schema expects; or the claim's owner and
            heartbeat age).
        """
        import pandas as pd

        rows = []
        for path in self.record_files():
            problems = _read_record(path)[1]
            if problems:
                kind = "invalid" if _HASH_NAME.fullmatch(path.stem) else "foreign"
                rows.append(dict(file=path.name, kind=kind, problem="; ".join(problems)))
        for path in self._companion_files():
            problems = companion_problems(path, names())
            if problems:
                rows.append(dict(file=path.name, kind="invalid companion",
                                 problem="; ".join(problems)))
        now = time.time()
        for path in self._orphan_temps(TEMP_AGE_S):
            rows.append(dict(file=path.name, kind="orphan temp", problem=(
                f"temp file of a killed write, {(now - path.stat().st_mtime) / 60:.0f} min old")))
        for path, owner, age in claims.present(self.root):
            alive = claims.alive(owner, age, claims.CLAIM_TIMEOUT_S)
            rows.append(dict(file=path.name, kind="claim" if alive else "dead claim", problem=(
                f"owner {owner.get('host')} pid {owner.get('pid')}, heartbeat {age:.0f} s ago")))
        return pd.DataFrame(rows, columns=["file", "kind", "problem"])

    def tidy(self) -> None:
        """Make the store ready for a sweep (``sweep.run_sweep``): its study log checked
        (``companion``: a damaged one is refused before any work), orphan temp files
        (``clean_temp``) and dead claims of finished runs (``clean_dead_claims``) removed, the
        latter named in a warning, and every file that fails its schema or is debris named
        in another (``audit``; a record that fails is re-run). The warnings name the line
        that called the sweep (``stacklevel=3``)."""
        self.companion("study.json")
        self.clean_temp()
        dead = self.clean_dead_claims()
        if dead:
            warnings.warn(f"removed {len(dead)} dead claim(s) under {self.root} whose runs have "
                          f"complete records (their owners died after storing them): {dead[:5]}"
                          f"{' ...' if len(dead) > 5 else ''}", stacklevel=3)
        problems = self.audit()
        problems = problems[problems["kind"] != "claim"]
        if len(problems):
            warnings.warn(f"{len(problems)} file(s) under {self.root} fail their schema or are "
                          f"debris: {problems['file'].tolist()[:5]}; "
                          "vitplast.experiments.store.Store(root).audit() says why (a record that "
                          "fails is re-run)", stacklevel=3)

    def clean_temp(self, older_than: float = TEMP_AGE_S) -> list[str]:
        """Delete the orphan temp files (``.<name>.json.<random>.tmp``, left by a write killed
        before its ``os.replace``) older than ``older_than`` seconds; return their names.
        Younger ones may belong to a write in progress and are kept."""
        removed = []
        for path in self._orphan_temps(older_than):
            path.unlink(missing_ok=True)
            removed.append(path.name)
        return removed

    @contextlib.contextmanager
    def claim(self, run: dict, *, timeout: float = claims.CLAIM_TIMEOUT_S,
              heartbeat: float = claims.HEARTBEAT_S):
        """Hold the claim on ``run``, ``root/<run_hash(run)>.claim``, for the block
        (``claims.hold``): yields ``True`` when this process holds it (a thread beats it
        every ``heartbeat`` seconds; removed when the block ends, also after an error),
        ``False`` when a live owner does; a dead one (heartbeat older than ``timeout``, or
        owner pid gone on this host) is taken over."""
        with claims.hold(self.root / f"{run_hash(run)}.claim", timeout=timeout,
                         heartbeat=heartbeat) as mine:
            yield mine

    def wait_for(self, runs: list[dict], poll: float = 0.5) -> None:
        """Return once no live process (``claims.alive``) holds the claim on any of ``runs``:
        each is then stored, or its owner died. A reader that needs them all (a study loaded
        with ``recompute`` beside another process sweeping the same runs, as notebooks 04
        and 05 side by side) reads them whole, not whatever was stored when it looked."""
        wanted = {run_hash(run) for run in runs}
        while wanted & self.claimed():
            time.sleep(poll)

    def claimed(self) -> set[str]:
        """The hashes of the runs a live process holds the claim on (``claims.alive``): in
        flight now."""
        return {path.stem for path, owner, age in claims.present(self.root)
                if claims.alive(owner, age, claims.CLAIM_TIMEOUT_S)}

    def companion(self, name: str, compute=None) -> dict | None:
        """``cached.companion`` of this store's folder: the file ``root/name`` kept beside the
        records, read (``None`` when absent) or with ``compute`` measured once and written; its
        component names checked against the component table's (``components.names``)."""
        return companion(self.root, name, compute, components=names())

    def write_companion(self, name: str, content: dict) -> Path:
        """``cached.write_companion`` of this store's folder (component names checked as
        ``companion``)."""
        return write_companion(self.root, name, content, components=names())

    def clean_dead_claims(self) -> list[str]:
        """Remove the dead claims (``claims.alive``: owner gone, or heartbeat too old)
        whose runs have a complete record: their owner died after storing the record and
        before removing the claim. Return their names; a dead claim of a run without a
        record stays, for the sweep that runs it to take over."""
        def finished(claim: Path) -> bool:
            record = claim.with_suffix(".json")
            return record.exists() and not _read_record(record)[1]

        return claims.remove_dead(self.root, finished)

    def _companion_files(self) -> list[Path]:
        return [p for p in sorted(self.root.glob("*.json"))
                if any(fnmatch.fnmatch(p.name, c) for c in COMPANIONS)]

    def record_files(self) -> list[Path]:
        """The JSON files in the store that should be run records (companions left out)."""
        return [p for p in sorted(self.root.glob("*.json"))
                if not any(fnmatch.fnmatch(p.name, c) for c in COMPANIONS)]

    def _orphan_temps(self, older_than: float) -> list[Path]:
        now = time.time()
        out = []
        for path in sorted(self.root.glob(".*.json.*.tmp")):
            try:
                if now - path.stat().st_mtime > older_than:
                    out.append(path)
            except FileNotFoundError:  # its writer just finished
                pass
        return out


def select(runs: list[dict], root: str | Path | None = None, *, order: str | None = None,
           shard: str | tuple[int, int] | None = None, limit: int | None = None) -> list[dict]:
    """The runs a sweep should take, in its order: ``order`` (``ORDERS``, default seed-first;
    seed-first keeps each seed's runs in their given order, seeds in order of first
    appearance), then every ``n``-th setting (``runs.setting``: a run without its LR, in order
    of first appearance) from the ``i``-th of ``shard`` = ``(i, n)`` or ``"i/n"``
    (``runtime.parse_shard``; a setting's LRs stay in one process), then at most ``limit``
    runs the store under ``root`` lacks.

    Raises:
        ValueError: unknown order, a shard not ``"i/n"`` or ``(i, n)`` with ``0 <= i < n``,
            a limit below 1 or without ``root``.
    """
    order = FLAG["order"].check(order) or "seed-first"
    FLAG["limit"].check(limit)
    if limit is not None and root is None:
        raise ValueError("limit needs root: the store whose missing runs it counts")
    runs = list(runs)
    if order == "seed-first":
        seeds = list(dict.fromkeys(r["seed"] for r in runs))
        runs.sort(key=lambda r: seeds.index(r["seed"]))
    if shard is not None:
        i, n = parse_shard(shard)
        mine = set(list(dict.fromkeys(map(setting, runs)))[i::n])
        runs = [r for r in runs if setting(r) in mine]
    if limit is not None:
        runs = [r for r in runs if not Store(root).has(r)][:limit]
    return runs
