"""The results store, a value: ``Store(root)``, the folder ``root`` holding one JSON file per run,
named by the hash of its defining keys (``vitplast.runs.run_hash``), and an account of every
file in it. ``Store(root).path(run)`` is where a run's record is; ``has``, ``record`` and
``save`` read and write one run, ``records`` every complete one (``record_files``: the files
that should be records), ``audit`` names every other file, ``clean_temp`` deletes the debris of
killed writes and ``clean_dead_claims`` the claims left beside finished runs, ``claim`` holds a
run while it trains, and ``companion`` / ``write_companion`` read and write the files kept
beside the records (``COMPANIONS``).

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
record of the older layout, its run under ``config``, names its fix: ``vitplast.migrate``); a
companion that fails is set aside (``files.set_aside``) and computed again by the call that
computes it, and a study log that fails is refused (``companion``), its fix keeping its
sessions (``provenance.restart_log``). A sweep asks ``Store.has`` before running, so it
resumes.

Claims (``Store.claim``, ``vitplast.experiments.claims``): a run is claimed by the process
that trains it, so two sweeps over one store never train the same run twice; a dead claim is
taken over by the next process that wants its run, or removed by the next sweep when its run
has a complete record (``clean_dead_claims``: its owner died between the two).

What does not depend on a store's folder stays a function: ``record_problems``,
``companion_problems``, ``companion_kind``. Load-or-compute caches (``load_or_compute``,
``config_hash``) are ``vitplast.cached``'s and the JSON helpers (and ``locked``)
``vitplast.files``'s, all re-exported here.

Used by ``vitplast.sweep``, ``search``, ``results``, ``provenance``, ``confounds``,
``confound_plasticity`` and ``decide``, ``python -m vitplast pretrain`` and notebooks 04-06.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from vitplast import schema
from vitplast.cached import config_hash, load_or_compute  # noqa: F401 (re-exported)
from vitplast.experiments import claims
from vitplast.experiments.runs import defining, run_hash
from vitplast.files import (  # noqa: F401 (re-exported)
    atomic_path,
    locked,
    read_json,
    set_aside,
    write_json,
    write_text,
)

#: The outcomes a complete record may have (``sweep.run_one``; the record schema's ``status``).
STATUSES = ("ok", "diverged", "failed")
#: JSON files a store holds beside its records: file-name pattern -> the schema it passes
#: (``vitplast.schema``; ``Store.companion``): the sweep's session log
#: (``provenance.log_session``), the confound study's measurements (``confounds``: scales,
#: per-block plasticity, plasticity after finetuning), the suite study's
#: (``task_measures.task_plasticity``, also of relative plasticity,
#: ``task_measures.task_probe``) and the advice rules' rankings (``advise.stored``). A new
#: kind: its schema document and one line here.
COMPANIONS = {"study.json": "study",
              "scales-*.json": "scales",
              "layers-*.json": "layers",
              "after-*.json": "after",
              "plasticity-*.json": "plasticity",
              "probe-*.json": "probe",
              "advise-*.json": "advise"}
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


def companion_problems(path: str | Path) -> list[str]:
    """Why the companion file at ``path`` does not pass the schema of its kind
    (``COMPANIONS``); empty if it does."""
    kind = companion_kind(Path(path).name)
    saved = read_json(path)
    if saved is None:
        return ["not JSON (unreadable or half-written)"]
    return schema.problems(kind, saved)


def companion_kind(name: str) -> str:
    """The schema of a companion file named ``name`` (``COMPANIONS``); ``ValueError`` naming
    the kinds when ``name`` is none of them (or not a bare file name)."""
    kind = next((k for pattern, k in COMPANIONS.items() if fnmatch.fnmatch(name, pattern)), None)
    if kind is None or Path(name).name != name:
        raise ValueError(f"{name!r} is not a companion file of a store; valid: "
                         f"{list(COMPANIONS)} (a file name, no folder)")
    return kind


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
            companion" for a companion that fails its schema (``companion`` never uses it),
            "orphan temp" for the temp file of a killed write older than ``TEMP_AGE_S``,
            "claim" for a run in flight, "dead claim"), ``problem`` (what is wrong: each key
            with the value found and what its schema expects; or the claim's owner and
            heartbeat age).
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
        for path, owner, age in claims.present(self.root):
            alive = claims.alive(owner, age, claims.CLAIM_TIMEOUT_S)
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

    def companion(self, name: str, compute=None) -> dict | None:
        """The companion file ``root/name`` (``COMPANIONS``); when there is none, ``None``, or
        with ``compute`` (a function of no argument returning its content) its content
        computed once and written (``write_companion``): a measurement kept beside the runs.
        A file there that fails its schema is never used: with ``compute`` it is set aside
        (``files.set_aside``, with a warning naming it and its problems) and computed again.

        Raises:
            ValueError: ``name`` is not a companion kind's (naming the kinds), or the file
                fails its schema and there is no ``compute`` (naming it, its problems and the
                fix; a study log's fix keeps its sessions: ``provenance.restart_log``).
        """
        kind = companion_kind(name)
        path = self.root / name
        problems = companion_problems(path) if path.exists() else []
        if problems and compute is None:
            fix = (f"refused, so that no session is lost: set it aside and start a new log "
                   f"that points to it with vitplast.experiments.provenance.restart_log"
                   f"({str(self.root)!r})" if kind == "study" else
                   "not used: the call that measures it (with compute) sets it aside and "
                   "measures it again")
            raise ValueError(f"{path} does not pass the {kind} schema ({schema.FOLDER.name}/"
                             f"{kind}.schema.json): {'; '.join(problems)}; {fix}")
        if problems:
            aside = set_aside(path)
            warnings.warn(f"{path} does not pass the {kind} schema: {'; '.join(problems)}; set "
                          f"aside as {aside.name} and computed again", stacklevel=2)
        if not path.exists():
            if compute is None:
                return None
            content = compute()
            self.write_companion(name, content)
            return json.loads(json.dumps(content, default=str))
        return read_json(path)

    def write_companion(self, name: str, content: dict) -> Path:
        """Store ``content`` as the companion file ``root/name``, atomically; return its path.

        Raises:
            ValueError: ``name`` is not a companion kind's (naming the kinds), or ``content``
                as stored (JSON) fails its schema (``companion`` would refuse it); nothing is
                written then.
        """
        kind = companion_kind(name)
        stored = json.loads(json.dumps(content, default=str))
        schema.check(kind, stored, f"{name}: not a complete {kind} file; not written")
        return write_json(self.root / name, stored)

    def clean_dead_claims(self) -> list[str]:
        """Remove the dead claims (``claims.alive``: owner gone, or heartbeat too old)
        whose runs have a complete record: their owner died after storing the record and
        before removing the claim. Return their names; a dead claim of a run without a
        record stays, for the sweep that runs it to take over."""
        def finished(claim: Path) -> bool:
            record = claim.with_suffix(".json")
            return record.exists() and not record_problems(read_json(record), record)

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
