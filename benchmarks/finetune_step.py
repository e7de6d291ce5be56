"""The training loop's cost per step against a bare hand-written PyTorch step, and each
configuration's step time relative to full finetuning.

Side by side in one run, interleaved: for the same model, batch, trainable set and data
loader, (a) a bare loop: forward, cross-entropy, backward, clip, SGD step; (b)
``vitplast.train.finetune.train`` (schedule, logging of global and per-component gradient norms,
no evaluation). Target: (b) / (a) <= 1.05 per step, for full finetuning. Then ``train``'s
step time per configuration relative to full (frozen weights skip their weight gradients:
below 1 is expected, no target). ``--quick``: 3 steps of batch 16, one repetition (seconds):
the same path and target, at a size where timing noise decides.

Run: ``python benchmarks/finetune_step.py [--steps 40] [--batch 64] [--reps 3] [--quick]``.
Last line: ``RESULT finetune_step_overhead_ratio <ratio> target <= 1.05``; exits 1 on a miss.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from vitplast import models
from vitplast.datasets import tasks
from vitplast.train import configurations, finetune

TARGET = 1.05


def bare(model, dataset, config, steps, batch, device):
    """A hand-written SGD loop over the same trainable set; seconds per step."""
    configurations.set_trainable(model, configurations.trainable_names(model, config))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    loader = iter(DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True))
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        x, y = next(loader)
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def loop(model, dataset, config, steps, batch, device):
    """``finetune.train`` on the same trainable set; seconds per step."""
    r = finetune.train(model, dataset, config=config, steps=steps, batch_size=batch, lr=0.01,
                       warmup_steps=steps // 10, device=device, progress=False)
    return r.seconds / steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default=None)
    ap.add_argument("--quick", action="store_true", help="3 steps of batch 16, once (seconds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.batch, args.reps = 3, 16, 1
    device = models.pick_device(args.device)
    task = tasks.load("fmnist")  # 4,000 training images: no epoch ends mid-measurement
    model = models.load_model(models.EMBEDDED_NAME, num_classes=task.num_classes, device=device)
    run = dict(dataset=task.train, steps=args.steps, batch=args.batch, device=device)
    for fn in (bare, loop):  # warm-up
        fn(model, config="full", **{**run, "steps": min(5, args.steps)})
    times = {"bare": [], **{config: [] for config in configurations.CONFIGS}}
    for _ in range(args.reps):  # interleaved, so that drift hits every measurement alike
        times["bare"].append(bare(model, config="full", **run))
        for config in configurations.CONFIGS:
            times[config].append(loop(model, config=config, **run))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"device {device}, batch {args.batch}, {args.steps} steps x {args.reps} interleaved reps")
    print(f"  bare PyTorch step: {1000 * med['bare']:.1f} ms;  vitplast loop: "
          f"{1000 * med['full']:.1f} ms (full finetuning)")
    print("  step time relative to full finetuning (vitplast loop):")
    for config in configurations.CONFIGS:
        print(f"    {config:>9}: {med[config] / med['full']:.2f}x  ({1000 * med[config]:.1f} ms)")
    ratio = med["full"] / med["bare"]
    print(f"RESULT finetune_step_overhead_ratio {ratio:.3f} target <= {TARGET}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
