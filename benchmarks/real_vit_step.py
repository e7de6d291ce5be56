"""The training loop's cost per step on the real ViT against a bare PyTorch step (issue 56,
item 5).

The real weights (``vitplast weights get dinov2-small``; without them a random-init timm
``vit_small_patch14_dinov2`` of the same size, said in the output) as the ``real`` study trains
them (``study_specs.REAL_RUN``: 56 px, batches of 32, MHA alone with the new head; ``--size``
and ``--batch`` change them), on the study's first task fitted to the model
(``tasks.fitted``: Fashion-MNIST images resized to 3 x 56 x 56). Side by side in one run,
interleaved (the order alternates), from the same weights each time (restored before every
arm), over the same train split, batch size and trainable set: (a) ``bare``, a hand-written
loop: a shuffling DataLoader, forward, cross-entropy, backward, global clip 1.0, SGD with
momentum 0.9; (b) ``vitplast``, ``finetune.train`` (``config="MHA"``: schedule, divergence
check, logging of the global and per-component gradient norms every ``log_every`` steps; no
evaluation). Each arm is timed as one call, its set-up included (the bare optimizer and loader;
the kit's checks and trainee), over ``--steps`` steps: the cost of a step as a user pays it.
Target: (b) / (a) <= 1.1, the median of the per-repetition ratios of process CPU time with one
intra-op thread (``--threads``; on a machine shared with other work a second thread measures
the load), the wall-time ratio printed beside it.

``--quick``: 3 steps of batch 8, 2 repetitions (seconds): the same path and target, at a size
where timing noise decides.

Run: ``python benchmarks/real_vit_step.py [--steps 10] [--batch 32] [--size 56] [--reps 6]
[--threads 1] [--random] [--quick]``.
Last line: ``RESULT real_vit_step_overhead_ratio <ratio> target <= 1.1``; exits 1 on a miss.
"""

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from plasticity_overhead import spread, timed  # the same measurement
from real_vit_sizing import real_model
from torch.utils.data import DataLoader

from vitplast.datasets import tasks
from vitplast.experiments import runs, study_specs
from vitplast.train import configurations, finetune

TARGET = 1.1
CONFIG = "MHA"
QUICK = dict(steps=3, batch=8, reps=2)


def bare(model, dataset, steps: int, batch: int) -> None:
    """A hand-written SGD loop over ``CONFIG``'s trainable set (the kit's, head included)."""
    configurations.set_trainable(model, configurations.trainable_names(model, CONFIG))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    loader = iter(DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True,
                             generator=torch.Generator().manual_seed(0)))
    model.train()
    for _ in range(steps):
        x, y = next(loader)
        F.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)


def loop(model, dataset, steps: int, batch: int) -> None:
    """``finetune.train`` of ``CONFIG`` over the same split and batch size."""
    r = finetune.train(model, dataset, config=CONFIG, steps=steps, batch_size=batch, lr=1e-3,
                       warmup_steps=max(1, steps // 10), device="cpu", workers=0,
                       progress=False)
    if r.diverged or r.history[-1]["step"] != steps - 1:  # cut short: fewer steps timed
        raise SystemExit(f"the kit's run diverged or stopped early: {r.history[-1:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=study_specs.REAL_RUN["batch_size"])
    ap.add_argument("--size", type=int, default=study_specs.REAL_RUN["model_kwargs"]["img_size"],
                    help="input size in px")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (0: torch's)")
    ap.add_argument("--random", action="store_true",
                    help="a random-init model even where the real weights are")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK} (seconds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.batch, args.reps = QUICK["steps"], QUICK["batch"], QUICK["reps"]
    if min(args.steps, args.batch, args.reps) < 1:
        ap.error("--steps, --batch and --reps: at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    task = study_specs.REAL.tasks[0]
    run = runs.make_run(task, CONFIG, lr=0.01, seed=0, **study_specs.REAL_RUN)
    model, label = real_model(args.size, runs.task_of(run).num_classes, random=args.random)
    train = tasks.fitted(runs.task_of(run), model).train
    if args.steps * args.batch > len(train):
        ap.error(f"--steps x --batch over the {len(train)} training images: an epoch would end")
    start = {k: v.clone() for k, v in model.state_dict().items()}
    fns = {"bare": bare, "vitplast": loop}
    for fn in fns.values():  # warm-up
        model.load_state_dict(start)
        fn(model, train, min(2, args.steps), args.batch)
    times = {name: [] for name in fns}
    for rep in range(args.reps):  # interleaved, the order alternating
        for name in list(fns)[::1 if rep % 2 == 0 else -1]:
            model.load_state_dict(start)
            times[name].append(timed(lambda: fns[name](model, train, args.steps, args.batch)))
    print(f"model: {label}, {args.size} px, {CONFIG} with the new head; task {task!r} fitted "
          f"({len(train)} training images); batch {args.batch}, {args.steps} steps x "
          f"{args.reps} interleaved reps, {torch.get_num_threads()} thread(s)")
    for name, v in times.items():
        wall, cpu = (statistics.median(t[i] / args.steps for t in v) for i in range(2))
        print(f"  {name:>8} step: wall {1000 * wall:.1f} ms, process CPU {1000 * cpu:.1f} ms "
              "(medians, set-up included)")
    ratios = {}
    for i, kind in enumerate(("wall", "CPU")):
        r = [a[i] / b[i] for a, b in zip(times["vitplast"], times["bare"])]
        ratios[kind] = statistics.median(r)
        print(f"  {kind:>4} vitplast / bare: median {ratios[kind]:.3f}"
              + (f" ({spread(r)})" if len(r) > 1 else ""))
    print(f"RESULT real_vit_step_overhead_ratio {ratios['CPU']:.3f} target <= {TARGET}")
    return 0 if ratios["CPU"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
