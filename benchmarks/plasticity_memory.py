"""Peak memory of the plasticity estimator does not grow with the number of pairs.

Side by side in one run: two fresh child processes (this script with ``--child N``, which runs
``peak_memory(N)``) measure 1,000 and 20,000 pairs (streamed from a fixed pool of images, batch
64) and report their peak resident memory. The tidy output table is O(pairs) by nature (one row
per pair x layer x component) and its size is printed; everything else must stay flat. Target:
peak(20k) / peak(1k) <= 1.10. ``--quick`` measures 50 and 1,000 pairs (the same ratio of 20,
seconds): the same code path and target, at sizes where the model and torch dominate the peak.

Run: ``python benchmarks/plasticity_memory.py [--quick]``.
Last line: ``RESULT plasticity_peak_memory_ratio_20k_vs_1k <ratio> target <= 1.1``; exits 1 when
the ratio misses the target.
"""

import argparse
import json
import subprocess
import sys

TARGET = 1.10
PAIRS, QUICK_PAIRS = (1_000, 20_000), (50, 1_000)


def peak_memory(n: int) -> dict:
    """Measure ``n`` pairs with the embedded model in this process: the pairs, the output
    table's rows and MiB, and the process's peak resident MiB (run it in a fresh process)."""
    import resource

    import torch

    from vitplast import models
    from vitplast.measure import plasticity
    from vitplast.measure.pairs import make_pairs

    model = models.load_model(models.EMBEDDED_NAME, device=torch.device("cpu"))
    pool = torch.randn(4096, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    df = plasticity.measure(model, make_pairs(pool, n_pairs=n), progress=False)
    return dict(pairs=n, rows=len(df), table_mb=df.memory_usage(deep=True).sum() / 2**20,
                peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def child(n: int) -> dict:
    """``peak_memory(n)`` in a fresh process (this script with ``--child n``)."""
    out = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True,
                         text=True)
    if out.returncode:
        raise RuntimeError(f"the child measuring {n} pairs failed (exit {out.returncode}):\n"
                           f"{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_PAIRS[0]} and {QUICK_PAIRS[1]} pairs (seconds)")
    ap.add_argument("--child", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(peak_memory(args.child)))
        return 0
    small, large = (child(n) for n in (QUICK_PAIRS if args.quick else PAIRS))
    for r in (small, large):
        print(f"  {r['pairs']:>6} pairs: peak {r['peak_mb']:.0f} MiB, "
              f"output table {r['table_mb']:.1f} MiB ({r['rows']} rows)")
    ratio = large["peak_mb"] / small["peak_mb"]
    print(f"RESULT plasticity_peak_memory_ratio_20k_vs_1k {ratio:.3f} target <= {TARGET}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
