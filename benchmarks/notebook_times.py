"""Wall time of the notebook sequence from an empty cache: ``make run`` (default profile) and the
smoke profile, measured side by side in one run.

Each profile runs ``python -m vitplast notebooks run --profile P`` in a fresh process with
``VITPLAST_CACHE`` pointing to its own new, empty folder, so nothing measured or trained by an
earlier run is reused (the shipped checkpoints and finetuning results are package data and are
read as ``make run`` reads them). Fashion-MNIST comes from the Debian package as in a fresh
checkout (``vitplast.datasets.data`` unpacks it into the cache; that unpacking is timed too);
without that package, its raw files are copied from the current cache before the clock starts.

What does not change between users is shipped beside the studies in ``data/`` (measured tables
``table-*.json``, probes, plasticity and advice companions: ``cached.kept_table``,
``cached.companion``) and read, not measured; everything else is computed.

Targets (issue 42): the default profile <= 120 s, the smoke profile <= 60 s, both on 2 cores:
on a larger machine the notebooks' process (and its kernels) is pinned to the first two cores,
so a pass means the same everywhere. Wall seconds depend on what else the machine runs, so the
CPU seconds of each profile (user + sys of the process and its kernels) are printed beside them.
Prints a table of seconds per notebook and, as its last lines,
``RESULT default_run_seconds <v> target <= 120`` and ``RESULT smoke_run_seconds <v> target <= 60``
(after ``RESULT <profile>_cpu_seconds <v>``); exits 1 on a miss or a failed notebook.

``--only 01 02`` runs those notebooks alone (a part of the sequence: the targets, stated for
the whole of it, are then loose); ``--quick`` is ``--profiles smoke --only 01`` (seconds to a
minute): the same path and lines.

Run: ``python benchmarks/notebook_times.py [--profiles smoke default] [--only 01 ...]
[--keep DIR] [--quick]`` (``make notebook-times``).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"default": 120.0, "smoke": 60.0}
RAW = Path("data") / "FashionMNIST" / "raw"
#: The cores the targets are stated for (``os.sched_setaffinity`` pins the runs to them).
CORES = 2


def _seed_fashion_mnist(cache: Path) -> None:
    """Without the Debian package, copy the raw Fashion-MNIST files of the current cache into
    ``cache`` (offline machines); with it, leave ``cache`` empty as a fresh checkout is."""
    from vitplast import files
    from vitplast.datasets import data

    if data.DEBIAN_FASHION_MNIST.is_dir():
        return
    source = files.cache_dir() / RAW
    if not source.is_dir():
        raise SystemExit(f"Fashion-MNIST not found in {data.DEBIAN_FASHION_MNIST} nor {source}: "
                         "run `make data` first")
    shutil.copytree(source, cache / RAW)


def _pin() -> None:
    """In the child, before it starts: keep it (and the kernels it starts) on ``CORES`` cores."""
    if hasattr(os, "sched_setaffinity") and os.cpu_count() > CORES:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:CORES]))


def _children_cpu() -> float:
    """User + sys CPU seconds of this process's finished children (and theirs)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_profile(profile: str, work: Path, only: list[str] | None = None
                ) -> tuple[float, float, pd.DataFrame]:
    """(wall seconds, CPU seconds, summary table) of one profile run from an empty cache
    under ``work`` (of the notebooks ``only`` names by number, when given)."""
    cache, out = work / f"cache-{profile}", work / f"runs-{profile}"
    cache.mkdir(parents=True)
    _seed_fashion_mnist(cache)
    env = dict(os.environ, VITPLAST_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "vitplast", "notebooks", "run", "--profile", profile,
           "--out", str(out), *(["--only", *only] if only else [])]
    start, cpu = time.perf_counter(), _children_cpu()
    with open(work / f"{profile}.log", "w") as log:
        rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=_pin)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    summary_csv = out / "summary.csv"
    summary = (pd.read_csv(summary_csv) if summary_csv.exists() else
               pd.DataFrame(dict(notebook=["(none)"], status=[f"exit {rc}"], seconds=[0.0])))
    return seconds, cpu, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["smoke", "default"], choices=list(TARGETS))
    ap.add_argument("--only", nargs="+", default=None, help="notebook numbers (default: all)")
    ap.add_argument("--keep", default="", help="folder to keep caches, runs and logs in")
    ap.add_argument("--quick", action="store_true", help="--profiles smoke --only 01")
    args = ap.parse_args(argv)
    if args.quick:
        args.profiles, args.only = ["smoke"], ["01"]
    work = Path(args.keep or tempfile.mkdtemp(prefix="vitplast-times-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"cores: {os.cpu_count()} on this machine; the notebooks run on "
          f"{min(CORES, os.cpu_count())}", flush=True)
    totals, cpus, summaries = {}, {}, {}
    for profile in args.profiles:
        totals[profile], cpus[profile], summaries[profile] = run_profile(profile, work, args.only)
        print(f"{profile}: {totals[profile]:.0f} s wall, {cpus[profile]:.0f} s CPU", flush=True)
    print(pd.concat([t.set_index("notebook")[["seconds", "status"]].add_prefix(f"{p} ")
                     for p, t in summaries.items()], axis=1).to_string())
    failed = [f"{p} {r.notebook} ({r.status})" for p, t in summaries.items()
              for r in t.itertuples() if r.status != "ok"]
    if args.keep:
        print(f"caches, executed notebooks and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print("not ok:", ", ".join(failed))
    missed = [p for p, v in totals.items() if v > TARGETS[p]]
    for profile in sorted(totals, key=list(TARGETS).index):  # default, then smoke
        print(f"RESULT {profile}_cpu_seconds {cpus[profile]:.1f}")
        print(f"RESULT {profile}_run_seconds {totals[profile]:.1f} target <= "
              f"{TARGETS[profile]:.0f}")
    return 1 if missed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
