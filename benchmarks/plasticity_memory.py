"""Peak memory of the plasticity estimator does not grow with the number of pairs.

Side by side in one run: two fresh child processes measure 1,000 and 20,000 pairs (streamed
from a fixed pool of images, batch 64) and report their peak resident memory. The tidy output
table is O(pairs) by nature (one row per pair x layer x component) and its size is printed;
everything else must stay flat. Target: peak(20k) / peak(1k) <= 1.10.

Run: ``python benchmarks/plasticity_memory.py``.
"""

import json
import subprocess
import sys

TARGET = 1.10
CHILD = """
import json, resource, sys, torch
from vitplast import models, plasticity
n = int(sys.argv[1])
model = models.load_model("vitplast_fmnist")
pool = torch.randn(4096, 1, 28, 28, generator=torch.Generator().manual_seed(0))
df = plasticity.measure(model, plasticity.make_pairs(pool, n_pairs=n), progress=False)
print(json.dumps(dict(pairs=n, rows=len(df), table_mb=df.memory_usage(deep=True).sum() / 2**20,
                      peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def child(n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    small, large = child(1_000), child(20_000)
    for r in (small, large):
        print(f"  {r['pairs']:>6} pairs: peak {r['peak_mb']:.0f} MiB, "
              f"output table {r['table_mb']:.1f} MiB ({r['rows']} rows)")
    ratio = large["peak_mb"] / small["peak_mb"]
    print(f"RESULT plasticity_peak_memory_ratio_20k_vs_1k {ratio:.3f} target <= {TARGET}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
