"""One pass over data (``vitplast.train.passes``): evaluation's loss and accuracy equal a direct
recomputation; the training batches are whole and reshuffled per epoch; precision is checked;
fp32 on CUDA turns TF32 off for its block only."""

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_vit, toy_task

from vitplast.train import finetune, passes


def test_evaluate_equals_a_direct_recomputation():
    model, data = tiny_vit(), toy_task(40)
    loss, acc = passes.evaluate(model, data, batch_size=16)
    x = torch.stack([data[i][0] for i in range(len(data))])
    y = torch.stack([torch.as_tensor(data[i][1]) for i in range(len(data))])
    with torch.no_grad():
        logits = model(x)
    assert loss == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-5)
    assert acc == (logits.argmax(-1) == y).float().mean().item()
    assert passes.evaluate is passes.evaluate  # re-exported where the loop's users read it


def test_training_batches_are_whole_distinct_within_an_epoch_and_reshuffled():
    data = toy_task(40)
    batches = passes._batches(data, 16, torch.Generator().manual_seed(0))
    got = [next(batches)[0] for _ in range(4)]  # two epochs of two full batches (8 left out)
    assert all(len(x) == 16 for x in got)
    epoch = torch.cat(got[:2]).flatten(1)
    assert len(torch.unique(epoch, dim=0)) == 32  # no image twice in one epoch
    assert not torch.equal(got[0], got[2])  # a new permutation per epoch
    with pytest.raises(ValueError, match="gives no full batch"):
        next(passes._batches(toy_task(8), 16, torch.Generator()))


def test_one_loader_per_split_gives_the_batches_of_a_loader_per_epoch(monkeypatch):
    made = []
    real = passes.DataLoader

    class Counting(real):
        def __init__(self, *a, **k):
            made.append(k)
            super().__init__(*a, **k)

    monkeypatch.setattr(passes, "DataLoader", Counting)
    data = toy_task(40)
    batches = passes._batches(data, 16, torch.Generator().manual_seed(3))
    got = [next(batches)[1] for _ in range(7)]  # 3 epochs of 2 full batches, and one more
    g = torch.Generator().manual_seed(3)
    expected = [y for _ in range(4) for _, y in real(data, batch_size=16, shuffle=True,
                                                     drop_last=True, generator=g)][:7]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    made.clear()
    finetune.train(tiny_vit(), toy_task(48), toy_task(16, seed=1), toy_task(16, seed=2),
                   steps=8, batch_size=16, eval_every=2, progress=False)  # 2.7 epochs, 4 evals
    assert len(made) == 3  # train, val (every evaluation), test


def test_precisions_are_checked_and_autocast_only_on_cuda():
    cpu = torch.device("cpu")
    assert all(passes._amp_dtype(cpu, p) is None for p in passes.PRECISIONS)
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        passes._amp_dtype(cpu, "fp8")
    x = torch.randn(4, 4)
    with passes.autocast(cpu, "auto"):  # nothing happens on a CPU: fp32 stays fp32
        assert (x @ x).dtype == torch.float32


def test_fp32_on_cuda_means_no_tf32_for_the_block_only():
    """``numerics``: TF32 off in cuBLAS and cuDNN inside an fp32 block on CUDA, the flags as
    they were after it (also after an error); untouched elsewhere and for other precisions."""
    from vitplast.train.passes import numerics

    flags = lambda: (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)  # noqa: E731
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, True
    try:
        with numerics(torch.device("cuda"), "fp32"):
            assert flags() == (False, False)
        assert flags() == (True, True)
        with pytest.raises(RuntimeError), numerics(torch.device("cuda"), "fp32"):
            raise RuntimeError
        assert flags() == (True, True)
        for device, precision in (("cpu", "fp32"), ("cuda", "auto"), ("cuda", "bf16")):
            with numerics(torch.device(device), precision):
                assert flags() == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
