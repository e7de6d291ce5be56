"""Runs per minute on a Slurm cluster: a study's runs through ``vitplast sweep --executor
submitit --cluster slurm`` (runs packed per job, ``vitplast.experiments.jobs``) against a
serial sweep of the same runs in one process, side by side in one run, on the same cores.

Each arm is the command a user types, timed from its start to its end in a fresh store
(Python, torch and timm imported in each, the Slurm arm's jobs importing them again): the
smoke study (``main-smoke``: 14 runs of under a second), then the main study's runs on one
task (``--main-runs N``: the first N runs a sweep takes, all on its first task up to 66, that
task's runs of its first seed; default 12, about 15 s each here, so that a job's start-up is
the small share of it that it is in the whole study; 66 take about 17 minutes an arm). The ratio
is Slurm's runs per minute over the serial sweep's; the target (>= 0.8) says a job's
start-up no longer eats the cluster's throughput. The Slurm jobs take one CPU each
(``--cpus-per-task 1``), the serial sweep every core.

Slurm: the one ``SLURM_CONF`` names when ``sinfo`` answers, else a one-node cluster started
here for the run (``vitplast.experiments.local_slurm``: root, slurm-wlm and munge).

Run: ``python benchmarks/slurm_throughput.py [--quick]`` (``--quick``: the smoke study
alone, its first 6 runs: the same code path in a minute).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.8
#: The smoke arm's runs (study, --limit) in the quick mode.
QUICK = {"smoke": ("main-smoke", 6)}


def sweep_seconds(study: str, limit: int | None, root: Path, *flags: str) -> tuple[float, int]:
    """Wall seconds of ``vitplast sweep`` of ``study`` into the fresh store ``root``, and the
    runs it stored (every one of them must be ok or diverged)."""
    from vitplast.experiments import results

    command = [sys.executable, "-m", "vitplast", "sweep", "--study", study, "--root",
               str(root), *flags, *(["--limit", str(limit)] if limit else [])]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    table = results.records_table(root)
    bad = table[~table["status"].isin(["ok", "diverged"])]
    if len(bad):
        raise RuntimeError(f"{len(bad)} run(s) of {study} failed under {root}")
    return seconds, len(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smoke study's first 6 runs")
    ap.add_argument("--main-runs", type=int, default=12, help="the main study's first N runs "
                    "(its first task's, up to 66)")
    args = ap.parse_args(argv)
    arms = QUICK if args.quick else {"smoke": ("main-smoke", None),
                                     "main": ("main", args.main_runs)}
    from vitplast.experiments import local_slurm

    folder = None
    if not local_slurm.answers():
        why = local_slurm.missing()
        if why:
            print(f"no Slurm to measure: {why}", file=sys.stderr)
            return 2
        folder = tempfile.mkdtemp(prefix="vitplast-slurm-")
        os.environ["SLURM_CONF"] = str(local_slurm.up(folder))
    print(f"{os.cpu_count()} cores; Slurm jobs of 1 CPU; times from each command's start")
    ratios = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, (study, limit) in arms.items():
                serial, n = sweep_seconds(study, limit, Path(tmp) / f"{name}-serial")
                slurm, m = sweep_seconds(study, limit, Path(tmp) / f"{name}-slurm",
                                         "--executor", "submitit", "--cluster", "slurm",
                                         "--cpus-per-task", "1")
                assert n == m, (n, m)
                ratios[name] = (m / slurm) / (n / serial)
                print(f"{name}: {n} runs; serial {serial:.1f} s ({60 * n / serial:.1f} runs/min), "
                      f"slurm {slurm:.1f} s ({60 * m / slurm:.1f} runs/min)")
    finally:
        if folder:
            local_slurm.down(folder)
    for name, ratio in ratios.items():
        print(f"RESULT slurm_throughput_ratio_{name} {ratio:.2f} target >= {TARGET}")
    return 0 if all(r >= TARGET for r in ratios.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
