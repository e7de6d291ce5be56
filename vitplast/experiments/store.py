"""The results store, a value: ``Store(root)``, the folder ``root`` holding one JSON file per run,
named by the hash of its defining keys (``vitplast.runs.run_hash``), and an account of every
file in it. ``Store(root).path(run)`` is where a run's record is; ``has``, ``record`` and
``save`` read and write one run, ``records`` every complete one (``record_files``: the files
that should be records), ``audit`` names every other file, ``clean_temp`` deletes the debris of
killed writes, ``claim`` holds a run while it trains, and ``companion`` / ``write_companion``
read and write the files kept beside the records (``COMPANIONS``).

Files are written atomically (``files.atomic_path``: a temp file in the same folder, then
``os.replace``), so a run killed mid-write leaves either the old file or none, never a
half-written one (its orphan temp file, ``.<name>.json.<random>.tmp``, is deleted by the next
sweep: ``Store.clean_temp``).

A record is complete (``record_problems`` finds nothing) when it is a JSON object with a
``run`` that ``runs.check_run`` accepts, named by that run's hash, with a ``status``
of ``STATUSES`` and numeric (or null) ``test_acc`` and ``best_val_acc``; an ``ok`` one also
holds its results (both numbers, and a non-empty ``history``). Anything else in a store is
reported by name: ``Store.audit`` lists every file that is not a complete record (invalid,
foreign, invalid companion, orphan temp, claims), ``Store.records`` warns about those it
skips, and a sweep re-runs a run whose file is not complete (a record of the older layout,
its run under ``config``, names its fix: ``vitplast.migrate``). A sweep asks ``Store.has``
before running, so it resumes.

Claims (``Store.claim``): before a run trains, its ``<hash>.claim`` file is created atomically
(``O_CREAT | O_EXCL``) holding the owner's host and pid; the owner touches it every
``HEARTBEAT_S`` seconds while the run trains (its modification time is the heartbeat) and
removes it when the record is written or the run fails. Two sweeps over one store thus never
train the same run twice. A claim is dead when its heartbeat is older than ``CLAIM_TIMEOUT_S``
or its owner pid is gone on this host; the next sweep takes it over.

What does not depend on a store's folder stays a function: ``record_problems``,
``companion_problems``, ``locked``. Load-or-compute caches (``load_or_compute``, ``config_hash``)
are ``vitplast.cached``'s and the JSON helpers ``vitplast.files``'s, both re-exported here.

Used by ``vitplast.sweep``, ``search``, ``results``, ``provenance``, ``confounds``,
``confound_plasticity`` and ``decide``, ``python -m vitplast pretrain`` and notebooks 04-06.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import numbers
import os
import re
import socket
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from vitplast.cached import config_hash, load_or_compute  # noqa: F401 (re-exported)
from vitplast.experiments.runs import check_run, defining, run_hash
from vitplast.files import atomic_path, read_json, write_json, write_text  # noqa: F401 (re-exported)

#: The outcomes a complete record may have (``sweep.run_one``).
STATUSES = ("ok", "diverged", "failed")
#: JSON files a store holds beside its records, each with the keys it must hold
#: (``Store.companion``): the sweep's session log (``provenance.log_session``), the confound
#: study's measurements (``confounds``: scales, per-block plasticity, plasticity after
#: finetuning), the suite study's (``decide.task_plasticity``, ``task_probe``), ``advise.stored``'s.
COMPANIONS = {"study.json": ("sessions",),
              "scales-*.json": ("tasks", "target", "n_pairs", "plasticity", "scales"),
              "layers-*.json": ("tasks", "n_pairs", "protocol", "rows"),
              "after-*.json": ("run", "n_pairs", "before", "after"),
              "plasticity-*.json": ("task", "n_pairs", "protocol", "rows"),
              "probe-*.json": ("task", "model", "probe", "test_acc", "val_acc", "train_acc"),
              "advise-*.json": ("task", "model", "weights", "c", "rows", "provenance")}
#: An orphan temp file older than this (seconds) is debris of a killed write.
TEMP_AGE_S = 300.0
#: A claim whose heartbeat is older than this (seconds) is dead.
CLAIM_TIMEOUT_S = 300.0
#: How often (seconds) the owner of a claim touches it.
HEARTBEAT_S = 30.0
_HASH_NAME = re.compile(r"[0-9a-f]{16}")


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


def record_problems(record, path: str | Path | None = None) -> list[str]:
    """Why ``record`` (read from ``path``) is not a complete run record; empty if it is.

    Complete: a JSON object whose ``run`` passes ``runs.check_run``, whose file is named
    by that run's hash, with a ``status`` of ``STATUSES`` and ``test_acc`` and
    ``best_val_acc`` numbers or null; numbers, with a non-empty ``history``, when ``ok``.
    """
    if not isinstance(record, dict):
        return ["not a JSON object (unreadable, half-written, or not a run record)"]
    run = record.get("run")
    if not isinstance(run, dict):
        if isinstance(record.get("config"), dict):
            return ["an older record layout (its run under `config`); migrate it: python -m "
                    f"vitplast.experiments.migrate {Path(path).parent if path else 'ROOT'}"]
        return ["no `run` object: not a run record"]
    problems = []
    try:
        check_run(run)
    except ValueError as err:
        problems.append(f"run: {str(err)[:200]}")
    if record.get("status") not in STATUSES:
        problems.append(f"status {record.get('status')!r} is not one of {list(STATUSES)}")
    for key in ("test_acc", "best_val_acc"):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            problems.append(f"{key} {value!r} is not a number or null")
    if record.get("status") == "ok":
        missing = [k for k in ("test_acc", "best_val_acc") if record.get(k) is None]
        missing += [] if isinstance(record.get("history"), list) and record["history"] else [
            "history"]
        if missing:
            problems.append(f"status 'ok' without its results ({', '.join(missing)} missing)")
    if path is not None and not problems and Path(path).stem != run_hash(run):
        problems.append(f"named {Path(path).stem} but its run hashes to {run_hash(run)} "
                        "(an older hash, or a moved file)")
    return problems


def companion_problems(path: str | Path) -> list[str]:
    """Why the companion file at ``path`` is not what its kind (``COMPANIONS``) holds; empty
    if it is."""
    keys = _companion_keys(Path(path).name)
    saved = read_json(path)
    if not isinstance(saved, dict):
        return ["not a JSON object (unreadable or half-written)"]
    missing = [k for k in keys if k not in saved]
    return [f"missing {missing}"] if missing else []


def _companion_keys(name: str) -> tuple[str, ...]:
    """The keys a companion file named ``name`` holds (``COMPANIONS``); ``ValueError`` naming
    the kinds when ``name`` is none of them (or not a bare file name)."""
    keys = next((k for pattern, k in COMPANIONS.items() if fnmatch.fnmatch(name, pattern)), None)
    if keys is None or Path(name).name != name:
        raise ValueError(f"{name!r} is not a companion file of a store; valid: "
                         f"{list(COMPANIONS)} (a file name, no folder)")
    return keys


@dataclass(frozen=True)
class Store:
    """The results store in the folder ``root`` (module docstring): its run records, their
    claims and its companion files. A value: it holds only its folder (a ``str`` is made a
    ``Path``), so stores compare by folder and pickle to other processes; every method reads
    the files anew. Used by ``vitplast.sweep``, ``search``, ``results``, ``provenance`` and
    the studies that keep companions (``confounds``, ``confound_plasticity``, ``decide``).

    Example::

        runs = Store("data/finetune")
        with runs.claim(run) as mine:
            if mine and not runs.has(run):
                runs.save(run, sweep.run_one(run))
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
        path = self.path(run)
        record = read_json(path)
        if record_problems(record, path):
            return None
        as_stored = json.loads(json.dumps(defining(run), default=str))
        return record if defining(record["run"]) == as_stored else None

    def has(self, run: dict) -> bool:
        """Whether a complete record of ``run`` is stored (``record``): a sweep asks before
        running, so it resumes."""
        return self.record(run) is not None

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
            record = read_json(path)
            if record_problems(record, path):
                skipped.append(path.name)
            else:
                runs.append(record)
        if skipped:
            warnings.warn(f"{len(skipped)} file(s) under {self.root} are not complete run "
                          f"records and were skipped: {skipped[:5]}"
                          f"{' ...' if len(skipped) > 5 else ''}; vitplast.store.Store(root)"
                          ".audit() says why (a sweep re-runs those at a run's path)",
                          stacklevel=2)
        return runs

    def audit(self):
        """Every file in the store that is not a complete run record, and why.

        Returns:
            A DataFrame, one row per file: ``file`` (name), ``kind`` ("invalid" for a file
            named like a record, "foreign" for any other JSON but ``COMPANIONS``, "invalid
            companion" for a companion without its keys (``companion`` refuses it), "orphan
            temp" for the temp file of a killed write older than ``TEMP_AGE_S``, "claim" for
            a run in flight, "dead claim"), ``problem`` (what is wrong, or the claim's owner
            and heartbeat age).
        """
        import pandas as pd

        rows = []
        for path in self.record_files():
            problems = record_problems(read_json(path), path)
            if problems:
                kind = "invalid" if _HASH_NAME.fullmatch(path.stem) else "foreign"
                rows.append(dict(file=path.name, kind=kind, problem="; ".join(problems)))
        for path in self._companion_files():
            problems = companion_problems(path)
            if problems:
                rows.append(dict(file=path.name, kind="invalid companion",
                                 problem="; ".join(problems)))
        now = time.time()
        for path in self._orphan_temps(TEMP_AGE_S):
            rows.append(dict(file=path.name, kind="orphan temp", problem=(
                f"temp file of a killed write, {(now - path.stat().st_mtime) / 60:.0f} min old")))
        for path in sorted(self.root.glob("*.claim")):
            owner, age = read_json(path) or {}, now - path.stat().st_mtime
            alive = _alive(owner, age, CLAIM_TIMEOUT_S)
            rows.append(dict(file=path.name, kind="claim" if alive else "dead claim", problem=(
                f"owner {owner.get('host')} pid {owner.get('pid')}, heartbeat {age:.0f} s ago")))
        return pd.DataFrame(rows, columns=["file", "kind", "problem"])

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
    def claim(self, run: dict, *, timeout: float = CLAIM_TIMEOUT_S,
              heartbeat: float = HEARTBEAT_S):
        """Hold the claim on ``run``, ``root/<run_hash(run)>.claim``, for the block (module
        docstring).

        Yields ``True`` when this process holds it: a daemon thread touches it every
        ``heartbeat`` seconds, and it is removed when the block ends, also after an error.
        Yields ``False`` when a live owner holds it; a dead one (heartbeat older than
        ``timeout``, or owner pid gone on this host) is taken over.
        """
        path = self.root / f"{run_hash(run)}.claim"
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
            with locked(self.root / "claims"):
                if (read_json(path) or {}).get("token") == token:
                    path.unlink(missing_ok=True)

    def companion(self, name: str, compute=None) -> dict | None:
        """The companion file ``root/name`` (``COMPANIONS``); when there is none, ``None``, or
        with ``compute`` (a function of no argument returning its content) its content
        computed once and written (``write_companion``): a measurement kept beside the runs.

        Raises:
            ValueError: ``name`` is not a companion kind's (naming the kinds), or the file is
                there but not complete (naming it, what it lacks and the fix).
        """
        _companion_keys(name)
        path = self.root / name
        if not path.exists():
            if compute is None:
                return None
            content = compute()
            self.write_companion(name, content)
            return content
        problems = companion_problems(path)
        if problems:
            raise ValueError(f"{path}: {'; '.join(problems)}: not a complete "
                             f"{name.split('-')[0].removesuffix('.json')} file; delete "
                             "it to measure again (or restore it from version control)")
        return read_json(path)

    def write_companion(self, name: str, content: dict) -> Path:
        """Store ``content`` as the companion file ``root/name``, atomically; return its path.

        Raises:
            ValueError: ``name`` is not a companion kind's (naming the kinds), or ``content``
                lacks a key of its kind (``companion`` would refuse it); nothing is written.
        """
        missing = [k for k in _companion_keys(name) if k not in content]
        if missing:
            raise ValueError(f"{name}: missing {missing}: not a complete "
                             f"{name.split('-')[0].removesuffix('.json')} file; not written")
        return write_json(self.root / name, content)

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
            if _alive(read_json(path) or {}, age, timeout):
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


def _alive(owner: dict, age: float, timeout: float) -> bool:
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


def _beat(path: Path, token: str, period: float, stop: threading.Event) -> None:
    """Touch the claim every ``period`` seconds while it is ours, until ``stop``."""
    while not stop.wait(period):
        try:
            if (read_json(path) or {}).get("token") == token:
                os.utime(path)
        except OSError:
            pass
