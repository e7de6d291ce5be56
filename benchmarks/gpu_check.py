"""The device check: one command that proves the CUDA path of the kit, in under 8 minutes on
an H200, and ends with one RESULT line per target.

Side by side in one run on one GPU:

1. the estimator: a plain ``forward_features`` pass over the pairs ([x; y] batches) against
   ``plasticity.measure`` over the same pairs (``hidden``; ``embedding`` reported), a random
   ViT-B/16 (timm's init; no weights needed) on synthetic 224 px images read by ``--workers``
   DataLoader processes into pinned memory;
2. the training loop: a bare SGD step (forward, backward, clip, step, the same autocast)
   against ``finetune.train`` steps of the same model and batch (full finetuning; MHA alone
   reported);
3. runs per device-minute: ``--procs`` processes sharing the device, each training runs of
   the embedded study's recipe (fp32) one by one, against the same processes each training
   groups of ``--k`` LRs batched (``vitplast.train.batched``, ``vitplast sweep --batch-lrs``); each
   process warms up, then all start at one moment;
4. the notebooks: every one in the ``default`` profile (``vitplast.course.notebooks.run``), each in
   a papermill kernel that loads its models on the GPU.

Last lines, one per target (``RESULT <name> <value> target <op> <value>``; the values below are
placeholders, not measurements)::

    RESULT gpu_plasticity_overhead_ratio <value> target <= 1.2
    RESULT gpu_finetune_step_overhead_ratio <value> target <= 1.1
    RESULT gpu_batched_runs_per_minute_ratio <value> target >= 8.0
    RESULT notebooks_ok <ok> target == 7
    RESULT gpu_check_seconds <value> target <= 480

exit 1 when a target is missed.

Without CUDA it prints a SKIP line and exits 0, unless ``--dry``: the same code path on the
CPU at toy sizes (the embedded model, 256 pairs, 5 steps, the notebooks in the ``smoke``
profile), its RESULT lines marked ``(dry: not enforced)`` and exit 0, so that the check itself
is tested where no GPU is (tests/test_gpu_check.py).

Run: ``python benchmarks/gpu_check.py [--pairs 6400] [--batch 64] [--steps 30] [--workers 8]
[--only 01 02] [--dry]``.
"""

import argparse
import operator
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from vitplast import models
from vitplast.course import notebooks
from vitplast.measure import plasticity
from vitplast.measure.pairs import make_pairs
from vitplast.train import finetune, keys, passes

VIT_B = "vit_base_patch16_224.orig_in21k"
#: name -> (operator, target); ``notebooks_ok`` is set to the number of notebooks run.
TARGETS = {"gpu_plasticity_overhead_ratio": ("<=", 1.2),
           "gpu_finetune_step_overhead_ratio": ("<=", 1.1),
           "gpu_batched_runs_per_minute_ratio": (">=", 8.0),
           "notebooks_ok": ("==", len(notebooks.NOTEBOOKS)),
           "gpu_check_seconds": ("<=", 480.0)}
OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def estimator(model, pairs, *, batch: int, workers: int, device: torch.device) -> dict:
    """Seconds of a plain forward pass over ``pairs`` and of ``measure`` under each protocol."""
    @torch.no_grad()
    def plain(limit=None):
        loader = DataLoader(pairs, batch_size=batch, num_workers=workers,
                            pin_memory=device.type == "cuda")
        for i, (xb, yb) in enumerate(loader):
            if i == limit:
                break
            model.forward_features(torch.cat([xb, yb]).to(device, non_blocking=True))

    plain(limit=4)  # warm-up (cuDNN autotuning, the allocator)
    times = {"plain": _timed(plain, device)}
    for protocol in ("hidden", "embedding"):
        times[protocol] = _timed(lambda: plasticity.measure(
            model, pairs, protocol=protocol, batch_size=batch, workers=workers,
            progress=False), device)
    return times


def training_loop(name: str, *, batch: int, steps: int, device: torch.device, shape) -> dict:
    """Seconds per step of a bare SGD step and of ``finetune.train`` (full, MHA)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch * 4, *shape, generator=g)
    y = torch.randint(0, 10, (len(x),), generator=g)
    bare_model = models.load_model(name, pretrained=False, num_classes=10, device=device)
    bare_model.train()
    opt = torch.optim.SGD(bare_model.parameters(), lr=1e-3, momentum=0.9)
    xb, yb = x[:batch].to(device), y[:batch].to(device)

    def bare():
        for _ in range(steps):
            with passes.autocast(device):
                loss = torch.nn.functional.cross_entropy(bare_model(xb).float(), yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(bare_model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

    bare()
    out = {"bare": _timed(bare, device) / steps}
    model = models.load_model(name, pretrained=False, num_classes=10, device=device)
    for config in ("full", "MHA"):
        def loop():
            finetune.train(model, TensorDataset(x, y), config=config, steps=steps,
                           batch_size=batch, lr=1e-3, eval_every=10**9, device=device,
                           progress=False)
        loop()
        out[config] = _timed(loop, device) / steps
    return out


def runs_per_minute(mode: str, *, procs: int, k: int, steps: int, reps: int,
                    device: torch.device, dry: bool) -> float:
    """Runs per minute of ``procs`` processes on ``device``, each training ``reps`` units:
    one run (``mode="separate"``) or ``k`` LRs batched (``"batched"``), after a warm-up unit,
    all starting at one moment (when the last one is ready)."""
    import subprocess

    cmd = [sys.executable, __file__, "--worker", mode, "--k", str(k), "--steps", str(steps),
           "--reps", str(reps), "--device", str(device), *(["--dry"] if dry else [])]
    # each process computes its host-side work on its share of the cores: 15 processes on
    # torch's default (every core each) oversubscribe them
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // procs))}
    workers = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=env) for _ in range(procs)]
    try:
        for w in workers:  # each has loaded its task and trained its warm-up unit
            if not any(line.strip() == "ready" for line in iter(w.stdout.readline, "")):
                raise RuntimeError(f"a {mode} worker failed before its warm-up ended")
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        spans = []
        for w in workers:
            out, _ = w.communicate()
            if w.returncode:
                raise RuntimeError(f"a {mode} worker failed (exit {w.returncode})")
            spans.append([float(v) for v in out.split()[-2:]])
    finally:  # no worker outlives a failed measurement
        for w in workers:
            w.kill()
    wall = max(end for _, end in spans) - min(begin for begin, _ in spans)
    runs = procs * reps * (k if mode == "batched" else 1)
    return 60 * runs / wall


def _worker(mode: str, k: int, steps: int, reps: int, device: str, dry: bool) -> None:
    """One process of ``runs_per_minute``: warm up, say ``ready``, wait for ``go`` on stdin,
    train; print the (begin, end) wall-clock times of the timed part. Each unit follows the
    embedded study's recipe on digits (dry: on the smoke studies' task and splits, 160 images).
    """
    from vitplast.experiments import runs
    from vitplast.experiments.study_specs import SMOKE_RUN, SMOKE_TASKS
    from vitplast.train import batched

    task = runs.task_of(runs.make_run(SMOKE_TASKS[0], lr=0.01, **SMOKE_RUN) if dry else
                        runs.make_run("digits", lr=0.01))
    device = torch.device(device)
    recipe = {**keys.RECIPES["embedded"], "steps": steps, "warmup_steps": 1,
              "precision": "fp32", "device": device, "progress": False}
    lrs = [0.01 * 1.5 ** i for i in range(k)]

    def unit():
        model = models.load_model(models.EMBEDDED_NAME, num_classes=task.num_classes,
                                  device=device)
        models.new_head(model, task.num_classes, seed=0)
        if mode == "batched":
            batched.train_lrs(model, task.train, task.val, task.test, lrs=lrs, **recipe)
        else:
            finetune.train(model, task.train, task.val, task.test, lr=lrs[0], **recipe)

    unit()
    print("ready", flush=True)
    sys.stdin.readline()
    begin = time.time()
    for _ in range(reps):
        unit()
    _sync(device)
    print(begin, time.time())


def result_lines(values: dict, dry: bool = False,
                 notebooks_run: int = len(notebooks.NOTEBOOKS)) -> tuple[list[str], int]:
    """The RESULT line of each measured target, and the exit code: 1 when one is missed
    (never in a dry run). Every one of the ``notebooks_run`` notebooks must end ok."""
    targets = {**TARGETS, "notebooks_ok": ("==", notebooks_run)}
    lines, missed = [], []
    for name, value in values.items():
        op, target = targets[name]
        ok = OPS[op](value, target)
        missed += [] if ok else [name]
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        lines.append(f"RESULT {name} {shown} target {op} {target}"
                     + (" (dry: not enforced)" if dry else ""))
    return lines, int(bool(missed) and not dry)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6_400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=8, help="DataLoader workers reading pairs")
    ap.add_argument("--only", nargs="*", default=None, help="notebook prefixes (default: all)")
    ap.add_argument("--out", default=None, help="folder of the executed notebooks")
    ap.add_argument("--procs", type=int, default=15, help="processes sharing the device")
    ap.add_argument("--k", type=int, default=8, help="LRs per batched group")
    ap.add_argument("--reps", type=int, default=10, help="units per process (runs per minute)")
    ap.add_argument("--dry", action="store_true", help="rehearse on the CPU at toy sizes")
    ap.add_argument("--worker", choices=("separate", "batched"), help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.k, args.steps, args.reps, args.device, args.dry)
        return 0
    start = time.perf_counter()
    if args.dry:
        device, name, shape, profile = torch.device("cpu"), models.EMBEDDED_NAME, (1, 28, 28), \
            "smoke"
        args.pairs, args.steps, args.workers = min(args.pairs, 256), min(args.steps, 5), 0
        args.procs, args.k, args.reps = 2, 2, 1
        print("dry run on the CPU: toy sizes, targets not enforced")
    elif not torch.cuda.is_available():
        print("SKIP gpu_check: no CUDA device (python benchmarks/gpu_check.py --dry rehearses "
              "it on the CPU)")
        return 0
    else:
        device, name, shape, profile = torch.device("cuda"), VIT_B, (3, 224, 224), "default"
        print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    values = {}

    model = models.load_model(name, pretrained=False, num_classes=10, device=device)
    pool = torch.randn(512, *shape, generator=torch.Generator().manual_seed(0))
    pairs = make_pairs(pool, n_pairs=args.pairs)  # content does not change the cost
    t = estimator(model, pairs, batch=args.batch, workers=args.workers, device=device)
    for k, v in t.items():
        print(f"plasticity {k:>9}: {args.pairs / v:8.0f} pairs/s ({v:.1f} s, "
              f"{v / t['plain']:.3f}x plain)")
    values["gpu_plasticity_overhead_ratio"] = t["hidden"] / t["plain"]
    del model

    s = training_loop(name, batch=args.batch, steps=args.steps, device=device, shape=shape)
    for k, v in s.items():
        print(f"step {k:>5}: {1000 * v:.1f} ms (batch {args.batch})")
    values["gpu_finetune_step_overhead_ratio"] = s["full"] / s["bare"]

    per_minute = {}
    for mode in ("separate", "batched"):  # each printed as it ends
        began = time.perf_counter()
        per_minute[mode] = v = runs_per_minute(mode, procs=args.procs, k=args.k,
                                               steps=120 if not args.dry else args.steps,
                                               reps=args.reps, device=device, dry=args.dry)
        print(f"{mode:>8}: {v:8.0f} runs per minute ({args.procs} processes"
              + (f", {args.k} LRs per group" if mode == "batched" else "")
              + f"; {time.perf_counter() - began:.0f} s with the warm-up)", flush=True)
    values["gpu_batched_runs_per_minute_ratio"] = per_minute["batched"] / per_minute["separate"]

    summary = notebooks.run(profile, args.only, out_dir=args.out, progress=False)
    print(summary.to_string(index=False))
    values["notebooks_ok"] = int((summary["status"] == "ok").sum())
    values["gpu_check_seconds"] = time.perf_counter() - start
    lines, code = result_lines(values, dry=args.dry, notebooks_run=len(summary))
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main())
