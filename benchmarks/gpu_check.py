"""The CUDA path at the paper's scale: ViT-B/16 plasticity on 12,800 pairs and finetuning steps.

Side by side in one run on one GPU, with a random ViT-B/16 (timm's init; no weights needed)
on synthetic 224 px images:

- plasticity: a plain ``forward_features`` pass over the 12,800 pairs ([x; y] batches), then
  ``plasticity.measure`` over the same pairs under the ``hidden`` and ``embedding``
  protocols; reported: pairs per second and the hooked pass's cost relative to the plain one.
- finetuning: a bare SGD step (forward, backward, clip, step, bf16 autocast) against
  ``finetune.train`` steps of the same model and batch (full finetuning, and MHA alone).

Prints the figures, a projection of the paper's protocol's GPU time, and as its last line
``RESULT gpu_plasticity_overhead_ratio <hidden / plain> target <= 1.5``; exits 1 when the
target is missed, 0 with a SKIP line when no GPU is present.

Pairs are read by ``--workers`` DataLoader processes into pinned memory: with one process,
stacking 224 px images on the CPU takes longer than the GPU's forward passes.

Run: ``python benchmarks/gpu_check.py [--pairs 12800] [--batch 64] [--steps 30] [--workers 8]``.
"""

import argparse
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from vitplast import finetune, models, plasticity

TARGET = 1.5
VIT_B = "vit_base_patch16_224.orig_in21k"


def _timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12_800)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=8, help="DataLoader workers reading pairs")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP gpu_check: no CUDA device")
        return 0
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    model = models.load_model(VIT_B, pretrained=False, num_classes=10, device=device)
    g = torch.Generator().manual_seed(0)
    # a pool of 512 images, paired at random: the pairs' content does not change the cost
    pool = torch.randn(512, 3, 224, 224, generator=g)
    pairs = plasticity.make_pairs(pool, n_pairs=args.pairs)

    @torch.no_grad()
    def plain(limit=None):
        loader = DataLoader(pairs, batch_size=args.batch, num_workers=args.workers,
                            pin_memory=True)
        for i, (xb, yb) in enumerate(loader):
            if i == limit:
                break
            model.forward_features(torch.cat([xb, yb]).to(device, non_blocking=True))

    plain(limit=4)  # warm-up (cuDNN autotuning, allocator)
    t_plain = _timed(plain)
    t_proto = {}
    for protocol in ("hidden", "embedding"):
        rates = None

        def hooked():
            nonlocal rates
            rates = plasticity.measure(model, pairs, protocol=protocol, batch_size=args.batch,
                                       workers=args.workers, progress=False)
        t_proto[protocol] = _timed(hooked)
        ranked = plasticity.ranking(rates)
        print(f"plasticity ({protocol}): {args.pairs / t_proto[protocol]:.0f} pairs/s "
              f"({t_proto[protocol]:.1f} s); order {plasticity.order(ranked)}")
    print(f"plain forward over the same pairs: {args.pairs / t_plain:.0f} pairs/s "
          f"({t_plain:.1f} s)")

    # finetuning: a bare step vs the vitplast loop, same model, batch and recipe
    x = torch.randn(args.batch * 4, 3, 224, 224, generator=g)
    y = torch.randint(0, 10, (len(x),), generator=g)
    data = TensorDataset(x, y)
    bare_model = models.load_model(VIT_B, pretrained=False, num_classes=10, device=device)
    opt = torch.optim.SGD(bare_model.parameters(), lr=1e-3, momentum=0.9)
    xb, yb = x[:args.batch].to(device), y[:args.batch].to(device)

    def bare():
        for _ in range(args.steps):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(bare_model(xb).float(), yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(bare_model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

    bare()
    t_bare = _timed(bare) / args.steps
    t_loop = {}
    for config in ("full", "MHA"):
        def loop():
            finetune.train(model, data, config=config, steps=args.steps, batch_size=args.batch,
                           lr=1e-3, eval_every=10**9, device=device, progress=False)
        loop()
        t_loop[config] = _timed(loop) / args.steps
        print(f"finetune.train {config}: {1000 * t_loop[config]:.1f} ms/step "
              f"(batch {args.batch}, bf16 autocast)")
    print(f"bare step (full): {1000 * t_bare:.1f} ms/step")
    print(f"RESULT gpu_finetune_step_overhead_ratio {t_loop['full'] / t_bare:.3f} (no target)")

    # the paper's protocol on one such GPU: 11 datasets x 2 protocols x 12,800 pairs, and
    # ~800 runs of ~10k steps at batch 512 (PAPER.md section 2)
    plast_h = 11 * (t_proto["hidden"] + t_proto["embedding"]) * 12_800 / args.pairs / 3600
    step_512 = t_loop["full"] * 512 / args.batch
    print(f"projection: plasticity of the 11 datasets, both protocols: {plast_h:.2f} GPU-h; "
          f"one 10k-step run at batch 512: {10_000 * step_512 / 3600:.2f} GPU-h; 800 runs: "
          f"{800 * 10_000 * step_512 / 3600:.0f} GPU-h")
    ratio = t_proto["hidden"] / t_plain
    print(f"RESULT gpu_plasticity_overhead_ratio {ratio:.3f} target <= {TARGET}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
