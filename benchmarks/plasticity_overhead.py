"""Cost of measuring every component of every block, relative to a plain forward pass.

Side by side in one run, interleaved: (a) a plain ``forward_features`` loop over batches of
[x; y] images, (b) ``plasticity.measure`` over the same pairs and batches (hooks on all
components, one rate per pair, the tidy table at the end), in alternating order; the ratio of
their median wall times. Target: (b) / (a) <= 1.05 (issue 26). The process's CPU time is
printed beside (informative, on a CPU: on a loaded machine it leaves out the time spent waiting
for a core).

Also measured, without a target:
- the floor: (a) with hooks that read every tensor the estimator reads once (a sum per image,
  no pair difference): what any one-pass estimator that looks at each activation costs at
  least. On a narrow model the forward does little arithmetic per activation byte, so this
  floor is a larger share of it; ``--width`` shows the same at another width.
- the ``embedding`` protocol, which applies each component to the embedding (a different
  computation, not an overhead).

On a glibc machine much of the spread between runs comes from page faults: fresh activations
are mapped and zeroed by the kernel at every batch (a quarter of the CPU time here, counted on
both sides, so the ratio shrinks as the faults grow). ``MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=4294967296`` in the environment keeps that memory in the heap: no
faults, both sides faster, and the ratio of the arithmetic alone.

Run: ``python benchmarks/plasticity_overhead.py [--pairs 2048] [--batch 64] [--reps 5]
[--width D]`` (``--width``: a random timm ViT of width D, 2 blocks, 64-dim heads, on the
embedded model's 28 x 28 images, in place of the embedded model; 768 is ViT-B's width).
"""

import argparse
import statistics
import sys
import time
import weakref

import timm
import torch
from torch.utils.data import DataLoader

from vitplast import models
from vitplast.measure import plasticity, rates
from vitplast.measure.pairs import make_pairs

TARGET = 1.05


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--width", type=int, default=None, help="a random ViT of this width")
    args = ap.parse_args()
    device = models.pick_device(args.device)
    if args.width is None:
        label, model = "the embedded model", models.load_model("vitplast_fmnist", device=device)
    else:
        label = f"a random ViT of width {args.width}, 2 blocks"
        model = timm.models.vision_transformer.VisionTransformer(
            img_size=28, patch_size=4, in_chans=1, embed_dim=args.width, depth=2,
            num_heads=max(1, args.width // 64), num_classes=10).to(device).eval()
    g = torch.Generator().manual_seed(0)
    images = torch.randn(4096, 1, 28, 28, generator=g)
    pairs = make_pairs(images, n_pairs=args.pairs)

    @torch.no_grad()
    def plain():
        for xb, yb in DataLoader(pairs, batch_size=args.batch):
            model.forward_features(torch.cat([xb, yb]).to(device))
        if device.type == "cuda":
            torch.cuda.synchronize()

    @torch.no_grad()
    def floor():
        last = []  # weak references to the last input and output, as the estimator reuses them

        def read(key, module, inp, out):
            for t in (inp, out):
                if not any(t is r() for r in last):
                    t.flatten(1).sum(1)
            last[:] = [weakref.ref(inp), weakref.ref(out)]

        with rates.hooks(model, read):
            plain()

    def timed(fn):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - start, time.process_time() - cpu

    def hidden():
        plasticity.measure(model, pairs, batch_size=args.batch, progress=False)

    def embedding():
        plasticity.measure(model, pairs, batch_size=args.batch, protocol="embedding",
                           progress=False)

    runs = [("plain", plain), ("floor", floor), ("hidden", hidden), ("embedding", embedding)]
    for _, fn in runs:  # warm-up
        fn()
    times = {name: [] for name, _ in runs}
    for rep in range(args.reps):  # the order reversed every other rep: no side always first
        for name, fn in runs if rep % 2 == 0 else runs[::-1]:
            times[name].append(timed(fn))
    med = {k: statistics.median(t for t, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    print(f"{label} on {device}, {args.pairs} pairs, batch {args.batch}, {args.reps} interleaved "
          "reps")
    for k, v in med.items():
        print(f"  {k:>9}: {v:.3f} s  ({v / med['plain']:.3f}x plain forward; process CPU time "
              f"{cpu[k]:.3f} s, {cpu[k] / cpu['plain']:.3f}x)")
    print(f"the estimator above the floor: {(med['hidden'] - med['floor']) / med['plain']:.3f}x "
          "plain forward")
    ratio = med["hidden"] / med["plain"]
    ok = ratio <= TARGET
    print(f"RESULT plasticity_overhead_ratio {ratio:.3f} target <= {TARGET}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
