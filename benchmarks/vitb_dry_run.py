"""The paper's GPU path, dry-run on a CPU: ViT-B/16 at full size, end to end, on fake data.

What a GPU run of the paper's protocol does, through the same entry points, offline:

- weights: a random ViT-B/16 (``vit_base_patch16_224.orig_in21k``'s architecture, timm's init)
  saved to a local safetensors file and loaded back through ``weights_file``
  (``models.load_model``; no hub access);
- data: fake files in every paper-dataset layout (``vitplast.datasets.fake_datasets``), read by
  ``vitplast.datasets.paper_datasets`` with the model's timm transforms (224 px, bicubic);
- plasticity: ``empirical.task_pairs`` and ``plasticity.measure`` (both protocols) on a few
  pairs (a CIFAR-10 image, an image of the dataset) of every dataset, as notebook 02;
- finetuning: ``runner.run_one`` of paper-recipe run configs (``data_root``, ``weights_file``)
  for a few steps on every dataset, cycling through the paper's configurations.

Prints the time per pair and per step, the CPU's throughput (FLOPs counted by
``torch.utils.flop_counter``), a projection of the paper protocol's GPU time at an assumed
effective throughput (``--gpu-tflops``; ``benchmarks/gpu_check.py`` measures the real one on a
GPU), and as its last line ``RESULT vitb_dry_run_seconds <s> target <= <n>``; exits 1 when a
run fails or the target is missed.

Run: ``python benchmarks/vitb_dry_run.py [--datasets all] [--pairs 2] [--steps 2]
[--batch-size 4] [--quick]`` (about 5 minutes on 2 CPU cores with the defaults). ``--quick``
takes two dataset layouts, 2 pairs, 1 step of batch 2 (``QUICK``; about a minute: ViT-B at full
size all the same), the settings tests/datasets/test_paper_datasets.py runs.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from vitplast import models
from vitplast.datasets import fake_datasets, paper_datasets
from vitplast.experiments import runner, runs, studies
from vitplast.measure import empirical, plasticity
from vitplast.measure.pairs import PROTOCOLS

VIT_B = "vit_base_patch16_224.orig_in21k"
TARGET = 900  # seconds, default settings on 2 CPU cores
CONFIGS = ["full", "head", "LN1", "MHA", "LN2", "FC1", "FC2"]  # the paper's, cycled over datasets
PAPER_PAIRS, PAPER_BATCH = 12_800, 512
PAPER_GRID = studies.get("paper").spec
PAPER_RUNS_PER_DATASET = len(CONFIGS) * len(PAPER_GRID.lrs) * len(PAPER_GRID.seeds)
#: ``--quick``: two dataset layouts (folders of images and a split file), 2 pairs, 1 step.
QUICK = dict(datasets="cifar10c_snow,domainnet_sketch", pairs=2, steps=1, batch_size=2)


def forward_flops(model: torch.nn.Module, img_size: int = 224) -> int:
    """FLOPs of one image's forward pass, counted by torch."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, 3, img_size, img_size))
    return counter.get_total_flops()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="all", help="comma-separated paper datasets, or all")
    ap.add_argument("--pairs", type=int, default=2, help="plasticity pairs per dataset")
    ap.add_argument("--steps", type=int, default=2, help="finetuning steps per dataset")
    ap.add_argument("--batch-size", type=int, default=4, help="finetuning batch")
    ap.add_argument("--device", default="cpu", help="where to run (default cpu)")
    ap.add_argument("--gpu-tflops", type=float, default=150.0, help="assumed effective GPU "
                    "throughput for the projection (bf16; measure it with gpu_check.py)")
    ap.add_argument("--target", type=float, default=TARGET, help="seconds allowed")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK} (about a minute)")
    args = ap.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    names = list(paper_datasets.PAPER_DATASETS) if args.datasets == "all" else \
        args.datasets.split(",")
    torch.set_num_threads(torch.get_num_threads())
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, fake_datasets.accept_fake_checksums():
        root = fake_datasets.write_all(Path(tmp) / "paper")
        start = time.perf_counter()
        random_init = models.load_model(VIT_B, pretrained=False, device="cpu")
        weights = Path(tmp) / "vit_b16_in21k_random.safetensors"
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in random_init.state_dict().items()}, str(weights))
        flops = forward_flops(random_init)
        n_params = sum(p.numel() for p in random_init.parameters())
        del random_init
        print(f"ViT-B/16 ({VIT_B}): {n_params:,} parameters, {flops / 1e9:.1f} GFLOP per 224 px "
              f"image (forward); random weights saved ({weights.stat().st_size / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - start:.1f} s; torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads, device {args.device}")

        start = time.perf_counter()
        model = models.load_model(VIT_B, weights_file=weights, device=args.device)
        print(f"load through weights_file: {time.perf_counter() - start:.1f} s")
        with torch.no_grad():  # a plain forward: what a validation pass costs per image
            model(torch.zeros(2, 3, 224, 224, device=args.device))  # warm-up
            start = time.perf_counter()
            model(torch.zeros(4, 3, 224, 224, device=args.device))
            per_image = (time.perf_counter() - start) / 4
        print(f"plain forward: {per_image:.2f} s/image")
        per_pair = {}
        for protocol in PROTOCOLS:
            seconds, n = 0.0, 0
            for name in names:
                # x from CIFAR-10 (the pretraining domain's stand-in), y from the dataset; pairs
                # within CIFAR-10 itself (the fake CIFAR-10-C images of a severity are all alike)
                pairs = empirical.task_pairs(name, "cifar10", n_pairs=args.pairs, model=model,
                                             data_root=str(root))
                start = time.perf_counter()
                rates = plasticity.measure(model, pairs, protocol=protocol, batch_size=8,
                                           device=args.device, progress=False)
                seconds += time.perf_counter() - start
                n += rates["pair"].nunique()
            per_pair[protocol] = seconds / n
            print(f"plasticity ({protocol}): {n} pairs over {len(names)} datasets, "
                  f"{per_pair[protocol]:.2f} s/pair")
        del model

        per_step, failed = [], []
        for i, name in enumerate(names):
            run = runs.make_run(
                name, CONFIGS[i % len(CONFIGS)], lr=0.01, seed=0, recipe="paper", model=VIT_B,
                data_root=str(root), weights_file=str(weights), steps=args.steps,
                warmup_steps=1, batch_size=args.batch_size, eval_every=10**6, log_every=1)
            record = runner.run_one(run, device=args.device)
            if record["status"] != "ok":
                failed.append(f"{name}: {record['status']} {record['error']}")
                print(f"finetune {name}: {record['status']}: {record['error']}")
                continue
            # train_seconds includes the validation pass after the last step: take it out
            n_val = fake_datasets.SIZES[name][1]
            step = max(record["train_seconds"] - n_val * per_image, 0.0) / args.steps
            if run["config"] == "full":
                per_step.append(step)
            print(f"finetune {name} ({run['config']}, {run['steps']} steps of batch "
                  f"{run['batch_size']}): {step:.2f} s/step (its {n_val}-image validation "
                  f"pass taken out), run {record['seconds']:.1f} s, trainable "
                  f"{record['trainable']:,}")
    total = time.perf_counter() - begin

    pair_s = sum(per_pair.values()) / len(per_pair)
    print(f"per pair: {pair_s:.2f} s on this machine (mean of the protocols)")
    if per_step:
        step_s = statistics.median(per_step)
        cpu = 3 * flops * args.batch_size / step_s  # forward + backward ~ 3 forwards
        print(f"per step (full, batch {args.batch_size}): {step_s:.2f} s, about "
              f"{cpu / 1e9:.0f} GFLOP/s; one paper step (batch {PAPER_BATCH}) here: "
              f"{step_s * PAPER_BATCH / args.batch_size / 60:.1f} min")
    gpu = args.gpu_tflops * 1e12
    plast = len(paper_datasets.PAPER_DATASETS) * len(PROTOCOLS) * PAPER_PAIRS \
        * 2 * flops / gpu
    tune = sum(paper_datasets.PAPER_STEPS.values()) * PAPER_RUNS_PER_DATASET * PAPER_BATCH \
        * 3 * flops / gpu
    print(f"projection at {args.gpu_tflops:.0f} TFLOP/s effective (an assumption: "
          f"benchmarks/gpu_check.py measures it): plasticity of the 11 datasets, both protocols, "
          f"{PAPER_PAIRS:,} pairs: {plast / 3600:.2f} GPU-h; finetuning grid (11 datasets x "
          f"{len(CONFIGS)} configs x {len(PAPER_GRID.lrs)} LRs x "
          f"{len(PAPER_GRID.seeds)} "
          f"seeds, paper steps, batch {PAPER_BATCH}, full-finetuning cost): "
          f"{tune / 3600:.0f} GPU-h")
    for line in failed:
        print(f"FAILED {line}")
    print(f"RESULT vitb_dry_run_seconds {total:.1f} target <= {args.target:.0f}")
    return 0 if not failed and total <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
