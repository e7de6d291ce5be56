"""Runs per minute: K runs of one setting at K learning rates, batched (``vitplast.train.batched``)
against one by one (``finetune.train``), on the embedded model and a real task.

Side by side in one process, for each full-count configuration of the suite study (head,
MHA, FC1, FC2, LN1, LN2) at the embedded recipe's batch and evaluation period, shortened to
``--steps`` steps: the wall time of the K separate runs and of the K batched ones. The ratio
(separate / batched time, = batched runs per minute over separate runs per minute) is
printed per configuration and over the whole mix. On a GPU the batched path turns K small
kernels into one large one; on a CPU core it runs head-only settings once through the frozen
backbone and otherwise does the same arithmetic, so the mix's target here is no regression
beyond timing noise (>= 0.9); ``benchmarks/gpu_check.py`` holds the GPU's target.
``--quick``: 2 LRs x 2 steps of batch 16 on the smoke studies' task (160 training images;
seconds): the same path and target, at a size where timing noise decides.

Run: ``python benchmarks/batched_runs.py [--lrs 0.01 0.03 0.1 0.3] [--steps 30] [--quick]``.
Last line: ``RESULT batched_runs_ratio_cpu_mix <ratio> target >= 0.9``; exits 1 on a miss.
"""

import argparse
import sys
import time

import torch

from vitplast import models
from vitplast.datasets import tasks
from vitplast.experiments import runs
from vitplast.experiments.study_specs import SMOKE_RUN, SMOKE_TASKS
from vitplast.train import batched, finetune, keys

CONFIGS = ("head", "MHA", "FC1", "FC2", "LN1", "LN2")
TARGET = 0.9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.01, 0.03, 0.1, 0.3])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--task", default="digits")
    ap.add_argument("--device", default=None)
    ap.add_argument("--quick", action="store_true",
                    help="2 LRs x 2 steps on the smoke studies' task (seconds)")
    args = ap.parse_args(argv)
    device = models.pick_device(args.device)
    recipe = {**keys.RECIPES["embedded"], "steps": args.steps, "warmup_steps": 3,
              "eval_every": 10, "device": device, "progress": False}
    if args.quick:
        args.lrs, args.steps, args.task = args.lrs[:2], 2, SMOKE_TASKS[0]
        recipe.update(steps=2, warmup_steps=1, batch_size=SMOKE_RUN["batch_size"])
        task = runs.task_of(runs.make_run(args.task, lr=0.01, **SMOKE_RUN))
    else:
        task = tasks.load(args.task)

    def model():
        m = models.load_model(models.EMBEDDED_NAME, num_classes=task.num_classes, device=device)
        models.new_head(m, task.num_classes, seed=0)
        return m

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    print(f"{len(args.lrs)} LRs x {args.steps} steps on {args.task}, {device}; "
          f"{torch.get_num_threads()} threads")
    total = {"separate": 0.0, "batched": 0.0}
    for config in CONFIGS:
        t_sep = timed(lambda: [finetune.train(model(), task.train, task.val, task.test, lr=lr,
                                              config=config, **recipe) for lr in args.lrs])
        t_bat = timed(lambda: batched.train_lrs(model(), task.train, task.val, task.test,
                                                lrs=args.lrs, config=config, **recipe))
        total["separate"] += t_sep
        total["batched"] += t_bat
        print(f"{config:>5}: separate {t_sep:6.1f} s, batched {t_bat:6.1f} s, "
              f"ratio {t_sep / t_bat:.2f}")
    ratio = total["separate"] / total["batched"]
    print(f"RESULT batched_runs_ratio_cpu_mix {ratio:.3f} target >= {TARGET}")
    return int(ratio < TARGET)


if __name__ == "__main__":
    sys.exit(main())
