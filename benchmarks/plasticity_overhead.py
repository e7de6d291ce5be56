"""Cost of measuring every component of every block, relative to a plain forward pass.

Side by side in one run, interleaved: (a) a plain ``forward_features`` loop over batches of
[x; y] images, (b) ``plasticity.measure`` over the same pairs and batches (hooks on all
components, one rate per pair, the tidy table at the end), in alternating order; the ratio of
their median wall times. Target: (b) / (a) <= 1.05 (issue 26). The process's CPU time is
printed beside (informative, on a CPU: on a loaded machine it leaves out the time spent waiting
for a core).
Also reported, without a target: the ``embedding`` protocol, which applies each component to
the embedding (a different computation, not an overhead).

Run: ``python benchmarks/plasticity_overhead.py [--pairs 2048] [--batch 64] [--reps 5]``.
"""

import argparse
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader

from vitplast import models, plasticity

TARGET = 1.05


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    device = models.pick_device(args.device)
    model = models.load_model("vitplast_fmnist", device=device)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(4096, 1, 28, 28, generator=g)
    pairs = plasticity.make_pairs(images, n_pairs=args.pairs)

    @torch.no_grad()
    def plain():
        for xb, yb in DataLoader(pairs, batch_size=args.batch):
            model.forward_features(torch.cat([xb, yb]).to(device))
        if device.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - start, time.process_time() - cpu

    def hidden():
        plasticity.measure(model, pairs, batch_size=args.batch, progress=False)

    def embedding():
        plasticity.measure(model, pairs, batch_size=args.batch, protocol="embedding",
                           progress=False)

    for fn in (plain, hidden, embedding):  # warm-up
        fn()
    times = {"plain": [], "hidden": [], "embedding": []}
    runs = [("plain", plain), ("hidden", hidden), ("embedding", embedding)]
    for rep in range(args.reps):  # the order reversed every other rep: no side always first
        for name, fn in runs if rep % 2 == 0 else runs[::-1]:
            times[name].append(timed(fn))
    med = {k: statistics.median(t for t, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    print(f"device {device}, {args.pairs} pairs, batch {args.batch}, {args.reps} interleaved reps")
    for k, v in med.items():
        print(f"  {k:>9}: {v:.3f} s  ({v / med['plain']:.3f}x plain forward; process CPU time "
              f"{cpu[k]:.3f} s, {cpu[k] / cpu['plain']:.3f}x)")
    ratio = med["hidden"] / med["plain"]
    ok = ratio <= TARGET
    print(f"RESULT plasticity_overhead_ratio {ratio:.3f} target <= {TARGET}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
