"""Pretraining of the embedded model on Fashion-MNIST (``python -m vitplast pretrain``).

The embedded default stands in for the paper's ImageNet-21k pretraining: a small timm
VisionTransformer (``vitplast.models.EMBEDDED_ARCH``) trained from timm's random init with
the one training loop of ``vitplast.train.finetune``. The whole recipe is ``RECIPE`` below.

Writes to ``vitplast/checkpoints/`` (``models.DATA_DIR``, package data; or ``out_dir``): one
safetensors file per checkpoint (``init`` before training, then after the epochs in
``CHECKPOINT_EPOCHS``, ``final`` at the end), the model card ``README.md`` and the manifest
``checkpoints.json`` (file, sha256, epoch, step, accuracies), rewritten atomically
after each checkpoint so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from vitplast import files, inputs, models, provenance
from vitplast.datasets import data, tasks
from vitplast.train import finetune, passes

#: The pretraining recipe (keyword arguments of ``vitplast.train.finetune.train``).
RECIPE = dict(config="full", optimizer="adamw", weight_decay=0.05, betas=(0.9, 0.999),
              clip_grad_norm=1.0, batch_size=128, label_smoothing=0.1)
#: Cosine schedule with one warm restart: (epochs, peak lr, seed) per stage. Each stage warms
#: up linearly for one epoch, decays to 0, and starts a fresh AdamW state from the previous
#: stage's weights. The model card shows what each stage reached (epoch12 ends the first).
STAGES = ((12, 1e-3, 0), (8, 5e-4, 1))
VAL_FRACTION = 0.1  # of the 60,000 train images, held out to watch (it chooses nothing)
CHECKPOINT_EPOCHS = (1, 3, 6, 12)  # plus "init" before training and "final" at the end
TEST_SUBSET = 1000  # the first 1,000 test images: the accuracy tests recompute


def augment(x: torch.Tensor, generator: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Random translation by up to ``pad`` pixels (zero-padding in pixel space) and a
    random horizontal flip, per image of a normalised batch (B, C, H, W)."""
    b, c, h, w = x.shape
    background = (0.0 - models.FASHION_MNIST_MEAN) / models.FASHION_MNIST_STD
    xp = F.pad(x, (pad, pad, pad, pad), value=background)
    dy, dx = (torch.randint(0, 2 * pad + 1, (2, b), generator=generator)).to(x.device)
    rows = dy[:, None] + torch.arange(h, device=x.device)  # (B, H)
    cols = dx[:, None] + torch.arange(w, device=x.device)  # (B, W)
    out = xp[torch.arange(b, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    out = out.permute(0, 3, 1, 2)  # (B, H, W, C) -> (B, C, H, W)
    flip = (torch.rand(b, generator=generator) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], out.flip(-1), out)


def _checkpoint_names(stages, steps_per_epoch: int) -> dict[int, str]:
    """Global step (last of an epoch) -> checkpoint name; the last one is "final"."""
    total = sum(e for e, _, _ in stages)
    names = {e * steps_per_epoch - 1: f"epoch{e}" for e in CHECKPOINT_EPOCHS if e < total}
    names[total * steps_per_epoch - 1] = "final"
    return names


def pretrain(out_dir: str | Path = models.DATA_DIR, *, stages=STAGES,
             train_limit: int | None = None, arch: dict | None = None,
             weight_decay: float = RECIPE["weight_decay"], root: str | Path | None = None,
             device: str | None = None, progress: bool = True) -> dict:
    """Pretrain the embedded model into ``out_dir``; return its manifest (checkpoints.json).

    Resumes at stage boundaries: a stage whose end checkpoint is already in ``out_dir``'s
    manifest (same recipe and stages) is loaded instead of trained again.

    Args:
        stages: (epochs, peak lr, seed) per stage (the shipped model: ``STAGES``).
        train_limit: use only this many training images (for tests).
        weight_decay: AdamW's (default ``RECIPE``'s); it shrinks the residual stream (gauge).
        arch: ``VisionTransformer`` keywords (default ``models.EMBEDDED_ARCH``; the tests
            pretrain a tiny one); saved in the manifest, which ``models.load_model`` follows.
        root: Fashion-MNIST folder (see ``vitplast.datasets.data.fashion_mnist_arrays``).
        device: default CUDA when available; one this machine lacks: ``ValueError``
            (``inputs.check_device``) before ``out_dir`` is made.
    """
    device = models.pick_device(inputs.check_device(device))  # before anything is made
    out_dir, arch = Path(out_dir), dict(arch or models.EMBEDDED_ARCH)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_set, val_set, test_set = _sets(root, train_limit)
    first = torch.utils.data.Subset(test_set, list(range(min(TEST_SUBSET, len(test_set)))))
    steps_per_epoch = len(train_set) // RECIPE["batch_size"]
    names = _checkpoint_names(stages, steps_per_epoch)
    recipe = {**RECIPE, "weight_decay": weight_decay, "stages": [list(st) for st in stages],
              "steps_per_epoch": steps_per_epoch, "augment": "translate<=2px + hflip",
              "train_images": len(train_set), "val_images": len(val_set)}
    manifest = files.read_json(out_dir / "checkpoints.json") or {}
    if [manifest.get("recipe"), manifest.get("arch")] != json.loads(json.dumps([recipe, arch])):
        manifest = dict(checkpoints={}, history=[])  # another recipe: start over
    manifest.update(model=models.EMBEDDED_NAME, arch=arch, recipe=recipe,
                    command=_command(stages, weight_decay), device=str(device),
                    **provenance.provenance(device))
    start = time.perf_counter() - manifest.get("wall_seconds", 0.0)

    def save(name: str, model, step: int):
        path = out_dir / f"{models.EMBEDDED_NAME}_{name}.safetensors"
        state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
        with files.atomic_path(path) as tmp:
            save_file(state, str(tmp))
        test_loss, test_acc = passes.evaluate(model, test_set, device=device)
        manifest["checkpoints"][name] = dict(
            file=path.name, sha256=files.sha256(path), epoch=step / steps_per_epoch, step=step,
            test_acc=test_acc, test_loss=test_loss,
            test_acc_first1000=passes.evaluate(model, first, device=device)[1],
            seconds=round(time.perf_counter() - start, 1))
        manifest["wall_seconds"] = round(time.perf_counter() - start, 1)
        files.write_json(out_dir / "checkpoints.json", manifest)

    finetune.seed_everything(stages[0][2])
    model = models.build_embedded(arch=arch)
    if "init" not in manifest["checkpoints"]:
        save("init", model, 0)
    offset = 0
    for epochs, lr, seed in stages:
        steps = epochs * steps_per_epoch
        end = names.get(offset + steps - 1)
        done = out_dir / manifest["checkpoints"].get(end, {}).get("file", "-")
        if end in manifest["checkpoints"] and done.is_file():
            model.load_state_dict(load_file(done))
            offset += steps
            continue

        def on_eval(step, model, row, offset=offset):
            manifest["history"].append(
                {"step": offset + step, **{k: row[k] for k in ("loss", "val_loss", "val_acc")}})
            if offset + step in names:
                save(names[offset + step], model, offset + step + 1)

        finetune.train(model, train_set, val_set, steps=steps, lr=lr, seed=seed,
                       warmup_steps=steps_per_epoch, eval_every=steps_per_epoch, log_every=50,
                       augment=augment, device=device, on_eval=on_eval, keep_best=False,
                       progress=progress, **{**RECIPE, "weight_decay": weight_decay})
        offset += steps
    (out_dir / "README.md").write_text(model_card(manifest))
    return manifest


def parse_stages(text: str) -> tuple:
    """``"12:1e-3:0,8:5e-4:1"`` -> ((12, 0.001, 0), (8, 0.0005, 1)), the CLI's ``--stages``.

    Raises:
        ValueError: not EPOCHS:PEAK_LR:SEED per stage with EPOCHS >= 1 and PEAK_LR > 0.
    """
    try:
        stages = tuple((int(e), float(lr), int(s)) for e, lr, s in
                       (part.split(":") for part in text.split(",")))
    except ValueError:
        stages = ()
    if not stages or any(e < 1 or lr <= 0 for e, lr, _ in stages):
        raise ValueError(f"{text!r}: expected EPOCHS:PEAK_LR:SEED per stage (EPOCHS >= 1, "
                         "PEAK_LR > 0), e.g. 12:1e-3:0,8:5e-4:1")
    return stages


def _command(stages, weight_decay: float) -> str:
    """The CLI command that reproduces this recipe (``--out`` aside)."""
    out = "python -m vitplast pretrain"
    if weight_decay != RECIPE["weight_decay"]:
        out += f" --weight-decay {weight_decay:g}"
    if tuple(map(tuple, stages)) != STAGES:
        out += " --stages " + ",".join(f"{e}:{lr:g}:{s}" for e, lr, s in stages)
    return out


def _sets(root, train_limit: int | None):
    """Fashion-MNIST's (train, val, test) sets: its train set split 90/10 train/val (seed 0),
    the train part cut to its first ``train_limit`` images if given."""
    x, y = data.fashion_mnist_arrays(train=True, root=root)
    xte, yte = data.fashion_mnist_arrays(train=False, root=root)
    train_set, val_set = tasks.split(data.NormalizedTensors(x, y), 1 - VAL_FRACTION, seed=0)
    if train_limit is not None:
        train_set = torch.utils.data.Subset(train_set, range(min(train_limit, len(train_set))))
    return train_set, val_set, data.NormalizedTensors(xte, yte)


def model_card(manifest: dict) -> str:
    """The model card (``vitplast/checkpoints/README.md``) as Markdown, written from the
    manifest's values."""
    r = manifest["recipe"]
    rows = "\n".join(
        f"| `{name}` | {c['epoch']} | {c['step']} | {100 * c['test_acc']:.2f} | "
        f"{100 * c['test_acc_first1000']:.1f} | {c['seconds']:.0f} | `{c['file']}` | "
        f"`{c['sha256']}` |" for name, c in manifest["checkpoints"].items())
    a = manifest["arch"]
    arch = ", ".join(f"{k}={v}" for k, v in a.items())
    n = sum(p.numel() for p in models.build_embedded(arch=a).parameters())
    px = a["img_size"]
    stages = ", ".join(f"({e}, {lr:g}, {s})" for e, lr, s in r["stages"])
    shipped = manifest["command"] == _command(STAGES, RECIPE["weight_decay"])
    load = (f'`vitplast.models.load_model("{manifest["model"]}",\ncheckpoint=NAME)`' if shipped
            else "`vitplast.models.load_pretrained(FOLDER,\ncheckpoint=NAME)` (FOLDER: this one)")
    load += "; every file is checked against the sha256 below (and in `checkpoints.json`)."
    remake = ("`make pretrain` (about 1.5 hours on 2 CPU cores); an\ninterrupted run" if shipped
              else "the command above and `--out FOLDER`; an\ninterrupted run")
    return f"""# Model card: `{manifest['model']}`

A small timm `VisionTransformer` ({arch}; {n:,} parameters) pretrained from timm's random
initialisation on Fashion-MNIST, the embedded stand-in for the paper's ImageNet-21k
pretraining. Inputs: {px}x{px} grayscale, normalised with mean {models.FASHION_MNIST_MEAN} and std
{models.FASHION_MNIST_STD}. Load it with {load}

- Command: `{manifest['command']}` (commit `{manifest['git_commit']}`), recipe in
  `vitplast/train/pretrain.py`: {r['optimizer']}, weight decay {r['weight_decay']}, betas
  {r['betas']}, grad-norm clip {r['clip_grad_norm']}, batch {r['batch_size']}, label smoothing
  {r['label_smoothing']}, augmentation {r['augment']}; cosine schedule with warm restarts,
  stages (epochs, peak lr, seed) = {stages}, each with one epoch ({r['steps_per_epoch']} steps)
  of linear warm-up and a fresh AdamW state; {r['train_images']} training images,
  {r['val_images']} held out for validation.
- Machine: {manifest['machine']}; device {manifest['device']}; torch {manifest['torch']},
  Python {manifest['python']}. Wall time: {manifest.get('wall_seconds', float('nan')):.0f} s.
- Test accuracy on the 10,000 Fashion-MNIST test images, and on the first 1,000 (which
  `tests/test_models.py` recomputes):

| checkpoint | epoch | step | test acc. (%) | first 1,000 (%) | seconds | file | sha256 |
|---|---|---|---|---|---|---|---|
{rows}

Files: fp32 safetensors, one per checkpoint; `checkpoints.json` holds the same values plus the
validation history. Remake them with {remake} resumes at the last finished stage.
"""
