"""Sizing the real-model study to this machine (issue 56, item 3): images/s of the real ViT at
three input sizes, and the expected time of the ``real`` study and of its GPU version.

Measured here, on the real weights (``vitplast weights get dinov2-small``; without them a
random-init timm ``vit_small_patch14_dinov2`` of the same size, said in the output: the same
arithmetic, so the same times), batch 32:

- the MHA-only SGD step (forward, cross-entropy, backward, gradient clip 1.0, SGD with momentum
  0.9: the recipe's step), and a forward pass (eval mode, no gradients), at 56, 112 and 224 px
  (``--sizes``), each on two clocks: ``core``, the process CPU time with one intra-op thread
  (the arithmetic, whatever else runs: a core's worth of work), and ``wall``, the wall time
  with torch's default threads as the machine is loaded while it runs (its load average is
  printed). On a 2-core machine shared with other jobs the second is the slower by far: a
  thread that waits for a busy core holds up every operation;
- at the ``real`` study's size, the step of each of its configurations relative to MHA's (one
  core; head-only backpropagates through the head alone, full finetuning computes every
  weight gradient), interleaved; the same ratios are applied at the other sizes (an
  approximation: the attention's share of the work grows with the tokens);
- the setup of a run: building the model at the study's size (loading, resampling).

The expected time of a study (``vitplast.experiments.study_specs``: ``REAL`` at 56 px, and
``REAL_PAPER`` at the weights' own 224 px) is the sum over its runs: tasks x configurations x
seeds x the LRs its search runs per setting (``--lrs``; default: the mean over the shipped
suite study's searches, the same search rule, else 3.5), each run ``steps`` x ``batch_size``
training images at its configuration's step rate, ``1 + steps / eval_every`` passes over the
task's validation split and one over its test split at the forward rate (split sizes: the
tasks loaded with the study's options), and one setup; plus per task the plasticity before
finetuning (``n_pairs`` pairs, two protocols, absolute and relative: four passes of
2 x ``n_pairs`` images at the forward rate). Batched LRs (``--batch-lrs``) share set-ups, not
arithmetic: not counted. Where the study's store (``--records``, default ``data/real_vit``)
already holds runs, their recorded seconds are printed beside what this model expects of them,
per configuration. The target is read on the ``core`` clock (``--clock``): the study on
one core to itself; a second core shortens it, other jobs lengthen it (the ``wall`` estimate
beside it says by how much as loaded now). The GPU study is given as its time here and as that
divided by an assumed speed-up over one core (``--gpu-speedup``; an assumption, not a
measurement: this machine has no GPU), its set-ups not divided.

``--quick``: batch 4, 2 timed reps, 56 and 224 px only: the same path and target, at a size
where per-step overheads inflate the estimate.

Run: ``python benchmarks/real_vit_sizing.py [--sizes 56 112 224] [--batch 32] [--reps 3]
[--wall-reps 1] [--lrs 3.7] [--gpu-speedup 1000] [--clock core] [--random] [--quick]``.
Last lines: ``RESULT real_paper_study_cpu_seconds <s>``, ``RESULT real_paper_study_gpu_seconds
<s>`` (no target) and ``RESULT real_study_seconds <s> target <= 10800``; exits 1 on a miss.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from plasticity_overhead import timed  # wall, process CPU, page faults of one call

from vitplast import fetched, models
from vitplast.experiments import runs, study_specs
from vitplast.train import configurations

TARGET = 3 * 3600.0  # the real study: at most 3 hours on this machine (issue 56, item 3)
REAL, NATIVE = study_specs.REAL_MODEL, 224
ARCHITECTURE = fetched.FETCHED[REAL].architecture  # the timm architecture the weights convert to
#: Passes of plasticity before finetuning per task: two protocols, absolute and relative.
PLASTICITY_PASSES = 4
#: The shipped suite study, whose searches follow the real study's rule (LRs per setting).
SUITE_RUNS = Path(__file__).resolve().parents[1] / "data" / "suite" / "runs.csv"
#: The real study's shipped store: its recorded runs are set beside their expected time.
RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_vit"
STUDIES = {"real": study_specs.REAL, "real-paper": study_specs.REAL_PAPER}
#: The clocks of an estimate (module docstring).
CLOCKS = {"core": "one core (1 thread, process CPU time)",
          "wall": "torch's default threads, wall time as loaded"}
PARTS = ("train", "evaluation", "setup", "plasticity")
QUICK = dict(sizes=[56, NATIVE], batch=4, reps=2)


def real_model(img_size: int, num_classes: int | None = None, *, random: bool = False):
    """(model, what it is): the real weights built for ``img_size`` px (``vitplast.fetched``),
    else (not fetched, or ``random``) timm's random init of the same architecture at that size;
    on the CPU, in eval mode, with a new head of ``num_classes`` (none: features only). Shared
    by ``real_vit_plasticity.py`` and ``real_vit_step.py``."""
    why = "asked for (--random)"
    if not random:
        try:
            model = models.load_model(REAL, img_size=img_size, num_classes=num_classes,
                                      device="cpu")
            return model, f"the real weights {REAL!r} ({fetched.FETCHED[REAL].architecture})"
        except FileNotFoundError as err:
            why = str(err)
    model = timm.create_model(ARCHITECTURE, pretrained=False, img_size=img_size,
                              num_classes=num_classes or 0)
    return model.eval(), f"a RANDOM-INIT timm {ARCHITECTURE} of the same size ({why})"


def stepper(model, config: str, x, y):
    """One SGD step of ``config`` on the batch (x, y), as a function (the recipe's: momentum
    0.9, global clip 1.0); its trainable set and optimizer made now."""
    configurations.set_trainable(model, configurations.trainable_names(model, config))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)

    def step():
        F.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def timings(model, size: int, batch: int, reps: int, threads: int) -> dict:
    """At ``size`` px with ``threads`` intra-op threads: the MHA step and the forward pass on a
    batch, each (wall, CPU) seconds, the median of ``reps`` after a warm-up."""
    default = torch.get_num_threads()
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    step = stepper(model.train(), "MHA", x, y)

    @torch.no_grad()
    def forward():
        model(x)

    out = {}
    try:
        for name, fn, mode in (("step", step, model.train), ("forward", forward, model.eval)):
            mode()
            fn()  # warm-up
            times = [timed(fn) for _ in range(reps)]
            out[name] = tuple(statistics.median(t[i] for t in times) for i in range(2))
    finally:
        torch.set_num_threads(default)
    return out


def config_ratios(model, size: int, batch: int, reps: int, configs) -> dict:
    """Each configuration's step over MHA's at ``size`` px, on one thread's process CPU time:
    interleaved, each repetition in a rotated order, one warm-up step per configuration and
    repetition (a new optimizer: its momentum buffers), medians of the per-repetition ratios."""
    default = torch.get_num_threads()
    torch.set_num_threads(1)
    model.train()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    order, times = list(configs), {c: [] for c in configs}
    try:
        for rep in range(reps):
            for config in order[rep % len(order):] + order[:rep % len(order)]:
                step = stepper(model, config, x, y)
                step()  # warm-up
                times[config].append(timed(step)[1])
    finally:
        torch.set_num_threads(default)
    return {c: statistics.median(a / m for a, m in zip(times[c], times["MHA"]))
            for c in configs}


def mean_lrs() -> tuple[float, str]:
    """LRs a setting's search runs on average: the shipped suite study's (same search rule),
    else 3.5 (the issue's figure)."""
    try:
        import pandas as pd

        d = pd.read_csv(SUITE_RUNS, usecols=["task", "config", "ablation.variant", "seed", "lr"])
    except (OSError, ValueError):
        return 3.5, "assumed (no shipped suite study to read)"
    n = d.fillna({"ablation.variant": "-"}).groupby(
        ["task", "config", "ablation.variant", "seed"]).lr.nunique()
    return float(n.mean()), (f"the shipped suite study's searches: {int(n.sum()):,} runs over "
                             f"{len(n)} settings")


def evaluations(steps: int, eval_every: int) -> int:
    """Passes over validation of one run: one before the first step, then as
    ``finetune._loop`` evaluates (every ``eval_every`` steps and after the last)."""
    return 1 + sum((at + 1) % eval_every == 0 or at == steps - 1 for at in range(steps))


def study_size(spec) -> int:
    return (spec.fixed.get("model_kwargs") or {}).get("img_size", NATIVE)


def splits(spec) -> dict:
    """Task -> (validation, test) images, the tasks loaded with the study's options."""
    out = {}
    for task in spec.tasks:
        t = runs.task_of(runs.make_run(task, "head", lr=0.01, seed=0, **spec.fixed))
        out[task] = (len(t.val), len(t.test))
    return out


def run_seconds(spec, val: int, test: int, config: str, per_image: dict, ratios: dict,
                setup: float) -> dict:
    """One run's expected seconds by part (train, evaluation, setup). ``per_image``: size ->
    (MHA step, forward) seconds per image on one clock; ``ratios``: configuration -> step over
    MHA's; ``setup``: seconds to build a run's model."""
    f, size = spec.fixed, study_size(spec)
    if size not in per_image:
        raise SystemExit(f"{size} px was not measured (--sizes): the study needs it")
    step, forward = per_image[size]
    n_eval = evaluations(f["steps"], f["eval_every"])
    return dict(train=f["steps"] * f["batch_size"] * step * ratios[config],
                evaluation=(n_eval * val + test) * forward, setup=setup)


def study_seconds(spec, sizes: dict, per_image: dict, ratios: dict, setup: float,
                  lrs: float) -> dict:
    """Expected seconds of a study spec by part (module docstring), given its ``splits``."""
    parts = dict.fromkeys(PARTS, 0.0)
    per_setting = len(spec.seeds) * lrs
    for task, (val, test) in sizes.items():
        for config in spec.configs:
            one = run_seconds(spec, val, test, config, per_image, ratios, setup)
            for k, v in one.items():
                parts[k] += per_setting * v
        parts["plasticity"] += (PLASTICITY_PASSES * 2 * (spec.n_pairs or 0)
                                * per_image[study_size(spec)][1])
    return dict(parts, runs=len(spec.tasks) * len(spec.configs) * per_setting)


def recorded(folder: Path, spec, sizes: dict, per_image: dict, ratios: dict, setup: dict
             ) -> list[str]:
    """Lines comparing the runs already recorded in ``folder`` (the study's store: each
    record's ``seconds``, its share of a batched group's) with their expected seconds on each
    clock, per configuration: medians over its recorded runs. None when nothing is recorded."""
    import json

    rows = {}
    for file in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        r = json.loads(file.read_text())
        run = r.get("run") or {}
        if r.get("status") == "ok" and run.get("task") in sizes and r.get("seconds"):
            expected = {c: sum(run_seconds(spec, *sizes[run["task"]], run["config"],
                                           per_image[c], ratios, setup[c]).values())
                        for c in CLOCKS}
            rows.setdefault(run["config"], []).append((r["seconds"], expected))
    return [f"  {config:>5}: {statistics.median(s for s, _ in v):6.1f} s recorded over {len(v)}"
            " run(s); expected " + ", ".join(
                f"{c} {statistics.median(e[c] for _, e in v):.1f} s" for c in CLOCKS)
            for config, v in rows.items()]


def describe(name: str, spec, sizes: dict, est: dict, lrs: float) -> str:
    f = spec.fixed
    val, test = (sorted({s[i] for s in sizes.values()}) for i in range(2))
    return (f"study {name!r} at {study_size(spec)} px: {len(spec.tasks)} tasks x "
            f"{len(spec.configs)} configurations x {len(spec.seeds)} seed(s) x {lrs:.2f} LRs = "
            f"{est['runs']:.0f} runs; a run: {f['steps']} steps of {f['batch_size']}, "
            f"{evaluations(f['steps'], f['eval_every'])} passes "
            f"over validation ({'/'.join(map(str, val))} images) and one over test "
            f"({'/'.join(map(str, test))})")


def hours(s: float) -> str:
    return f"{s / 3600:.2f} h"


def total(est: dict) -> float:
    return sum(est[k] for k in PARTS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[56, 112, 224])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3, help="timed steps and passes per figure")
    ap.add_argument("--wall-reps", type=int, default=1,
                    help="the same with torch's default threads (slow on a loaded machine)")
    ap.add_argument("--lrs", type=float, default=None,
                    help="LRs per setting (default: the shipped suite study's mean)")
    ap.add_argument("--gpu-speedup", type=float, default=1000.0,
                    help="ASSUMED speed-up of a GPU over one core here, for real-paper")
    ap.add_argument("--clock", choices=CLOCKS, default="core",
                    help="the clock of the target (both are printed)")
    ap.add_argument("--random", action="store_true",
                    help="a random-init model even where the real weights are")
    ap.add_argument("--records", type=Path, default=RECORDS,
                    help="the real study's store, whose recorded runs are compared")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK} (seconds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.reps = QUICK["sizes"], QUICK["batch"], QUICK["reps"]
    if min(args.reps, args.wall_reps, args.batch) < 1:
        ap.error("--reps, --wall-reps and --batch: at least 1")
    study = study_specs.REAL.fixed["model_kwargs"]["img_size"]
    if study not in args.sizes:
        ap.error(f"--sizes must include the real study's {study} px")
    lrs, lrs_from = (args.lrs, "--lrs") if args.lrs else mean_lrs()
    threads = torch.get_num_threads()
    print(f"torch's default: {threads} intra-op thread(s) (OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}); load average at start "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} (1, 5, 15 min) on "
          f"{os.cpu_count()} CPUs; batch {args.batch}, {args.reps} timed rep(s) on one core, "
          f"{args.wall_reps} with {threads} thread(s)")
    measured, ratios = {}, None
    for size in args.sizes:
        torch.set_num_threads(1)
        start, cpu = time.perf_counter(), time.process_time()
        model, label = real_model(size, 10, random=args.random)
        build = (time.perf_counter() - start, time.process_time() - cpu)
        torch.set_num_threads(threads)
        one = timings(model, size, args.batch, args.reps, 1)
        many = one if threads == 1 else timings(model, size, args.batch, args.wall_reps,
                                                threads)
        measured[size] = dict(build=build, one=one, many=many)
        if size == study:
            ratios = config_ratios(model, size, args.batch, args.reps, study_specs.REAL.configs)
        del model
    print(f"model: {label}")
    # seconds per image: core, one thread's process CPU time; wall, torch's default threads
    per_image = {"core": {s: tuple(m["one"][k][1] / args.batch for k in ("step", "forward"))
                          for s, m in measured.items()},
                 "wall": {s: tuple(m["many"][k][0] / args.batch for k in ("step", "forward"))
                          for s, m in measured.items()}}
    print(f"images/s: one core (1 thread, process CPU time) and torch's default {threads} "
          "thread(s) (wall time, as loaded now)")
    print(f"  {'size':>6} {'MHA step: core':>15} {'wall':>6} {'forward: core':>14} {'wall':>6}"
          f" {'build s: core':>14} {'wall':>6}")
    for s, m in measured.items():
        (sc, fc), (sw, fw) = per_image["core"][s], per_image["wall"][s]
        print(f"  {s:>4}px {1 / sc:>15.1f} {1 / sw:>6.1f} {1 / fc:>14.1f} {1 / fw:>6.1f} "
              f"{m['build'][1]:>14.2f} {m['build'][0]:>6.2f}")
    print(f"  step over MHA's at {study} px (one core): "
          + ", ".join(f"{c} {r:.2f}x" for c, r in ratios.items()))
    print(f"LRs per setting: {lrs:.2f} ({lrs_from})")
    results, setup = {}, {c: measured[study]["build"][i] for c, i in zip(CLOCKS, (1, 0))}
    sizes = {name: splits(spec) for name, spec in STUDIES.items()}
    for name, spec in STUDIES.items():
        for clock in CLOCKS:
            results[clock, name] = study_seconds(spec, sizes[name], per_image[clock], ratios,
                                                 setup[clock], lrs)
        print(describe(name, spec, sizes[name], results[args.clock, name], lrs))
        for clock in CLOCKS:
            est = results[clock, name]
            print(f"  {CLOCKS[clock]}: " + ", ".join(f"{k} {hours(est[k])}" for k in PARTS)
                  + f": {hours(total(est))}")
    lines = recorded(args.records, study_specs.REAL, sizes["real"], per_image, ratios, setup)
    if lines:
        print(f"the real study's runs recorded in {args.records} (wall time, as they ran; "
              "batched runs: their share), against their expected time:", *lines, sep="\n")
    paper, real = results[args.clock, "real-paper"], total(results[args.clock, "real"])
    paper_gpu = (total(paper) - paper["setup"]) / args.gpu_speedup + paper["setup"]
    print(f"real-paper on a GPU at an ASSUMED {args.gpu_speedup:g}x {CLOCKS[args.clock]} "
          f"(set-ups not sped up): {hours(paper_gpu)}; here: {hours(total(paper))}")
    print(f"real here ({CLOCKS[args.clock]}): {hours(real)} (target {hours(TARGET)})")
    print(f"RESULT real_paper_study_cpu_seconds {total(paper):.0f}")
    print(f"RESULT real_paper_study_gpu_seconds {paper_gpu:.0f}")
    print(f"RESULT real_study_seconds {real:.0f} target <= {TARGET:.0f}")
    return 0 if real <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
