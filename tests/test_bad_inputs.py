"""Every bad input gets a clear error before any heavy work: its type, and a message naming
the argument, the value and what is valid. Tiny random ViTs and scikit-learn digits."""

import functools
import math
import re
import warnings

import pandas as pd
import pytest
import torch
from helpers import tiny_vit

from vitplast.datasets import tasks
from vitplast.experiments import lr_selection, runs, sweep
from vitplast.measure import bounds, intervals, plasticity, rates
from vitplast.measure.pairs import make_pairs
from vitplast.report import finetuning_tables
from vitplast.train import configurations, finetune

STEPS = dict(steps=2, batch_size=16, progress=False)


@functools.lru_cache(maxsize=1)
def digits():
    return tasks.load("digits")


@functools.lru_cache(maxsize=1)
def model28():
    """A 28 px, 1-channel random ViT: the digits' images."""
    return tiny_vit(img_size=28, patch_size=7, num_classes=10)


def pairs28(n=8, **changes):
    """Aligned digit pairs (x, y), with ``changes`` applied: {"x": f(x), "y": f(y)}."""
    x, _ = tasks.stack(digits().test, 2 * n)
    x, y = x[:n].clone(), x[n:].clone()
    return changes.get("x", lambda t: t)(x), changes.get("y", lambda t: t)(y)


def _nan_at(i):
    def f(t):
        t[i, 0, 3, 3] = math.nan
        return t
    return f


def _inf_at(i):
    def f(t):
        t[i, 0, 5, 5] = math.inf
        return t
    return f


def _measure(**kw):
    x, y = kw.pop("pairs", None) or pairs28()
    return plasticity.measure(kw.pop("model", None) or model28(), x, y, progress=False, **kw)


def _train(**kw):
    task = digits()
    return finetune.train(model28(), kw.pop("train_set", task.train), task.val,
                          **{**STEPS, **kw})


# (case, call, exception, regex the message must match: the argument and what is valid)
CASES = [
    ("n_pairs=0", lambda: make_pairs(pairs28()[0], n_pairs=0), ValueError,
     r"n_pairs=0 .*integer >= 1"),
    ("n_pairs=-5", lambda: make_pairs(*pairs28(), n_pairs=-5), ValueError,
     r"n_pairs=-5 .*integer >= 1"),
    ("n_pairs=2.5", lambda: make_pairs(pairs28()[0], n_pairs=2.5), ValueError,
     r"n_pairs=2.5 .*integer"),
    ("empty source", lambda: make_pairs(pairs28()[0][:0]), ValueError,
     r"x_source has no images"),
    ("one image within a set", lambda: make_pairs(pairs28()[0][:1]), ValueError,
     r"x_source has 1 image.*at least 2"),
    ("NaN pair", lambda: _measure(pairs=pairs28(x=_nan_at(3))), ValueError,
     r"x has non-finite pixels .*pair\(s\) \[3\]"),
    ("inf pair", lambda: _measure(pairs=pairs28(y=_inf_at(6))), ValueError,
     r"y has non-finite pixels .*pair\(s\) \[6\]"),
    ("NaN pair in a later batch", lambda: _measure(pairs=pairs28(x=_nan_at(6)), batch_size=4),
     ValueError, r"x has non-finite pixels .*pair\(s\) \[6\]"),
    ("uint8 images", lambda: _measure(pairs=pairs28(x=lambda t: (t * 50).clamp(0, 255).to(
        torch.uint8), y=lambda t: t.to(torch.uint8))), ValueError,
     r"x has dtype torch.uint8; the model takes float images \(torch.float32\) of \(C, H, W\) "
     r"= \(1, 28, 28\)"),
    ("3 channels into 1", lambda: _measure(pairs=pairs28(x=lambda t: t.expand(-1, 3, -1, -1),
                                                         y=lambda t: t.expand(-1, 3, -1, -1))),
     ValueError, r"x has images of \(C, H, W\) = \(3, 28, 28\); the model takes \(C, H, W\) = "
                 r"\(1, 28, 28\)"),
    ("32 px into 28 px", lambda: _measure(pairs=(torch.randn(4, 1, 32, 32),
                                                 torch.randn(4, 1, 32, 32))),
     ValueError, r"\(1, 32, 32\); the model takes \(C, H, W\) = \(1, 28, 28\)"),
    ("one image, no batch dim", lambda: rates.batch_rates(model28(), pairs28()[0][0],
                                                               pairs28()[1][0]),
     ValueError, r"x must be a batch of images \(N, C, H, W\) = \(N, 1, 28, 28\)"),
    ("batch_size=0", lambda: _measure(batch_size=0), ValueError, r"batch_size=0 .*integer >= 1"),
    ("batch_size=-1", lambda: _measure(batch_size=-1), ValueError, r"batch_size=-1"),
    ("workers=-1", lambda: _measure(workers=-1), ValueError, r"workers=-1 .*integer >= 0"),
    ("batch_rates NaN", lambda: rates.batch_rates(model28(), *pairs28(y=_nan_at(0))),
     ValueError, r"y has non-finite pixels"),
    ("batch_rates x, y shapes", lambda: rates.batch_rates(model28(), pairs28()[0],
                                                               pairs28()[1][:5]),
     ValueError, r"x \(8, 1, 28, 28\) and y \(5, 1, 28, 28\) differ in shape"),
    ("scale_curve inf pair", lambda: plasticity.scale_curve(model28(), *pairs28(x=_inf_at(4)),
                                                            [1.0]),
     ValueError, r"x has non-finite pixels .*\[4\]"),
    ("scale_curve component", lambda: plasticity.scale_curve(model28(), *pairs28(), [1.0],
                                                             component="attn"),
     ValueError, r"unknown component 'attn'; valid: \['LN1'"),
    ("measurement NaN pair", lambda: plasticity.measurement(
        model28(), torch.utils.data.TensorDataset(*pairs28(x=_nan_at(2)))), ValueError,
     r"x has non-finite pixels .*\[2\]"),
    ("measurement keep=-1", lambda: plasticity.measurement(model28(), *pairs28(), keep=-1),
     ValueError, r"keep=-1"),
    ("measurement 3 channels", lambda: plasticity.measurement(
        model28(), torch.utils.data.TensorDataset(torch.randn(2, 3, 28, 28),
                                                  torch.randn(2, 3, 28, 28))), ValueError,
     r"the model takes \(C, H, W\) = \(1, 28, 28\)"),
    ("model_bounds missing statistics", lambda: bounds.model_bounds(
        model28(), pd.DataFrame(dict(layer=[0], component=["FC1"], n=[17]))), ValueError,
     r"no statistics for layer 0 LN1"),
    ("layernorm_bound sigma=0", lambda: bounds.layernorm_bound(torch.nn.LayerNorm(4), 0.0),
     ValueError, r"sigma=0.0 .*finite number > 0"),
    ("mha_bound r=nan", lambda: bounds.mha_bound(model28().blocks[0].attn, 17, math.nan),
     ValueError, r"r=nan .*finite number > 0"),
    ("local_lipschitz iters=-1", lambda: bounds.local_lipschitz(torch.nn.Linear(2, 2),
                                                                torch.randn(3, 2), -1),
     ValueError, r"iters=-1 .*integer >= 0"),
    ("intervals n_lipschitz=0", lambda: intervals.intervals(model28(), *pairs28(),
                                                            n_lipschitz=0),
     ValueError, r"n_lipschitz=0"),
    ("intervals power_iters=-2", lambda: intervals.intervals(model28(), *pairs28(),
                                                             power_iters=-2),
     ValueError, r"power_iters=-2"),
    ("intervals inf pair", lambda: intervals.intervals(model28(), *pairs28(y=_inf_at(1))),
     ValueError, r"y has non-finite pixels .*\[1\]"),
    ("train batch_size > split", lambda: _train(train_set=torch.utils.data.Subset(
        digits().train, range(10))), ValueError,
     r"^batch_size=16 is larger than the training split \(10 images\); batch_size takes an "
     r"integer from 1 to 10 here$"),
    ("train batch_size=0", lambda: _train(batch_size=0), ValueError, r"batch_size=0"),
    ("train batch_size=-8", lambda: _train(batch_size=-8), ValueError, r"batch_size=-8"),
    ("train lr=0", lambda: _train(lr=0.0), ValueError,
     r"lr=0.0 is not valid: expected a number > 0"),
    ("train lr=-0.1", lambda: _train(lr=-0.1), ValueError, r"lr=-0.1"),
    ("train lr=nan", lambda: _train(lr=math.nan), ValueError, r"lr=nan"),
    ("train lr=inf", lambda: _train(lr=math.inf), ValueError, r"lr=inf"),
    ("train lr='0.1'", lambda: _train(lr="0.1"), ValueError, r"lr='0.1'"),
    ("train steps=0", lambda: _train(steps=0), ValueError, r"steps=0 .*integer >= 1"),
    ("train steps=-3", lambda: _train(steps=-3), ValueError, r"steps=-3"),
    ("train empty split", lambda: _train(train_set=torch.utils.data.Subset(digits().train, [])),
     ValueError, r"train_set is empty"),
    ("train patterns match nothing", lambda: _train(config=["nothing.*"]), ValueError,
     r"configuration \['nothing.\*'\] selects no parameter .*only the head and final norm "
     r"would train.*'blocks.0.norm1.weight'"),
    ("train config not a list of str", lambda: _train(config=3), ValueError,
     r"config=3 is not valid"),
    ("make_run lr=nan", lambda: runs.make_run("digits", lr=math.nan), ValueError,
     r"lr=nan is not valid: expected a number > 0"),
    ("make_run lr=0", lambda: runs.make_run("digits", lr=0), ValueError, r"lr=0 "),
    ("make_run lr=-1e-3", lambda: runs.make_run("digits", lr=-1e-3), ValueError, r"lr=-0.001"),
    ("make_run steps=0", lambda: runs.make_run("digits", lr=0.1, steps=0), ValueError,
     r"steps=0 .*integer >= 1"),
    ("make_run batch_size=0", lambda: runs.make_run("digits", lr=0.1, batch_size=0),
     ValueError, r"batch_size=0"),
    ("make_run seed=1.5", lambda: runs.make_run("digits", lr=0.1, seed=1.5), ValueError,
     r"seed=1.5 .*integer"),
    ("make_run seed='0'", lambda: runs.make_run("digits", lr=0.1, seed="0"), ValueError,
     r"seed='0'"),
    ("run_sweep hand-made config", lambda: sweep.run_sweep(
        [{**runs.make_run("digits", lr=0.1), "steps": -1}], "unused", progress=False),
     ValueError, r"run 0 of 1 \(task 'digits'.*refused before the sweep starts.*steps=-1"),
    ("make_run clip_grad_norm=-1", lambda: runs.make_run("digits", lr=0.3, clip_grad_norm=-1.0),
     ValueError, r"clip_grad_norm=-1.0 is not valid: expected a number >= 0, or null"),
    ("make_run momentum=1.5", lambda: runs.make_run("digits", lr=0.1, momentum=1.5),
     ValueError, r"momentum=1.5 is not valid: expected a number >= 0 and < 1"),
    ("make_run weight_decay=-0.1", lambda: runs.make_run("digits", lr=0.1, weight_decay=-0.1),
     ValueError, r"weight_decay=-0.1 is not valid: expected a number >= 0"),
    ("make_run label_smoothing=1.5", lambda: runs.make_run("digits", lr=0.1,
                                                           label_smoothing=1.5),
     ValueError, r"label_smoothing=1.5 is not valid: expected a number >= 0 and < 1"),
    ("make_run optimizer='adam'", lambda: runs.make_run("digits", lr=0.1, optimizer="adam"),
     ValueError, r"optimizer='adam' is not valid: expected one of \['sgd', 'adamw'\]"),
    ("make_run unknown key", lambda: runs.make_run("digits", lr=0.1, grad_masks=None),
     ValueError, r"grad_masks is not a known key; valid: \['kind', 'model'"),
]


@pytest.mark.parametrize("call, error, message", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_too_many_aligned_pairs_warn_saying_how_many_were_made():
    x, y = pairs28()
    with pytest.warns(UserWarning, match=r"n_pairs=100 aligned pairs asked.*made 8 pairs"):
        pairs = make_pairs(x, y, n_pairs=100)
    assert len(pairs) == 8
    with pytest.warns(UserWarning, match=r"from 3 images, which form only 6 distinct pairs"):
        assert len(make_pairs(x[:3], n_pairs=7)) == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(make_pairs(x, y, n_pairs=8)) == 8  # exactly enough: silent


def test_float64_images_are_converted_saying_so_and_measure_the_same():
    x, y = pairs28()
    with pytest.warns(UserWarning, match=r"x is torch.float64: converted to the model's "
                                         r"torch.float32"):
        doubled = _measure(pairs=(x.double(), y.double()), batch_size=3)
    assert doubled.equals(_measure(pairs=(x, y), batch_size=3))


def test_identical_pairs_are_still_excluded_and_counted():
    x, y = pairs28()
    y[2] = x[2]
    assert _measure(pairs=(x, y)).attrs["excluded"] == 1


def test_a_batch_larger_than_the_split_fails_in_batches_too():
    """``_batches`` never loops forever on a split with no full batch."""
    small = torch.utils.data.TensorDataset(torch.zeros(5, 1), torch.zeros(5))
    batches = finetune._batches(small, 8, torch.Generator().manual_seed(0), 0)
    with pytest.raises(ValueError, match=r"batch_size=8: the train split \(5 images\)"):
        next(batches)


def test_gradient_accumulation_may_draw_micro_batches_from_a_small_split():
    task = digits()
    small = torch.utils.data.Subset(task.train, range(10))
    result = finetune.train(model28(), small, steps=1, batch_size=16, accum_steps=2, lr=1e-2,
                            progress=False)  # micro-batches of 8 <= 10 images
    assert result.trainable > 0
    with pytest.raises(ValueError, match=r"batch_size=32 is larger than the training split "
                                         r"\(10 images, micro-batches of batch_size / "
                                         r"accum_steps=2\); batch_size takes an integer from 1 "
                                         r"to 20 here"):
        finetune.train(model28(), small, steps=1, batch_size=32, accum_steps=2, progress=False)


def test_final_norm_or_head_patterns_alone_are_a_configuration():
    """Patterns that select only the head are explicit, not a typo: allowed."""
    names = configurations.trainable_names(model28(), ["head.*"], train_head=False)
    assert names == ["head.weight", "head.bias"]


def test_a_diverged_run_is_recorded_and_never_counted_as_ok(tmp_path, monkeypatch):
    """``run_one`` records divergence as "diverged"; the results tables leave it out as
    they leave out failed runs, however good its validation accuracy before diverging."""
    def fake_train(model, train_set, val_set, test_set, *, lr, **kwargs):
        diverged = lr > 1
        return finetune.TrainResult(history=[{"step": 0, "loss": math.inf if diverged else 1.0}],
                                    best_val_acc=0.99 if diverged else 0.5, best_step=0,
                                    test_acc=math.nan if diverged else 0.4, diverged=diverged)

    monkeypatch.setattr(finetune, "train", fake_train)
    configs = [runs.make_run("digits", "LN1", lr=lr, seed=s, pretrained=False, steps=2,
                               batch_size=16) for lr in (0.1, 10.0) for s in (0, 1)]
    table = sweep.run_sweep(configs, tmp_path, device="cpu", progress=False).table
    assert table["status"].tolist() == ["ok", "ok", "diverged", "diverged"]
    assert table["test_acc"].isna().tolist() == [False, False, True, True]
    assert lr_selection.select_lr(table)["lr"].tolist() == [0.1]  # not 10 (val 0.99, diverged)
    main = finetuning_tables.main_table(table).set_index("task")
    assert main.loc["digits", "lr"] == 0.1 and main.loc["digits", "n_seeds"] == 2
    assert main.loc["digits", "test_acc_mean"] == pytest.approx(40.0)
    assert lr_selection.lr_curves(table)["lr"].tolist() == [0.1]


@pytest.mark.parametrize("args, message", [
    (["--limit", "-1"], r"--limit: takes N >= 1, got -1"),
    (["--limit", "0"], r"--limit: takes N >= 1"),
    (["--root", "FILE"], r"--root '.*' is a file: the results store is a folder"),
    (["--device", "foo"], r"--device 'foo' is not a device .*valid: cpu, cuda"),
    (["--device", "cuda"], r"--device 'cuda': no CUDA GPU is available here"),
    (["--device", "cuda:1"], r"--device 'cuda:1': no CUDA GPU"),
], ids=["limit=-1", "limit=0", "root is a file", "device foo", "cuda without GPU",
        "cuda:1 without GPU"])
def test_cli_sweep_refuses_bad_arguments_before_any_run(args, message, tmp_path, monkeypatch,
                                                        capsys):
    from vitplast.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("a run started"))
    (tmp_path / "file").write_text("")
    args = [str(tmp_path / "file") if a == "FILE" else a for a in args]
    root = [] if "--root" in args else ["--root", str(tmp_path / "store")]
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", *root, *args])
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "store").exists()  # nothing loaded, run or logged


def test_cli_retry_failed_reaches_the_sweep(tmp_path, monkeypatch):
    from helpers import with_spec

    from vitplast.__main__ import main

    with_spec(monkeypatch, "main", tasks=("digits",), lrs={"head": [1.0]})
    seen = []
    nothing = sweep.Outcome(pd.DataFrame({"status": []}))  # a sweep of no runs: complete
    monkeypatch.setattr(sweep, "run_sweep",
                        lambda *a, **k: seen.append(k["retry_failed"]) or nothing)
    main(["sweep", "--root", str(tmp_path), "--retry-failed", "--device", "cpu"])
    main(["sweep", "--root", str(tmp_path)])
    assert seen == [True, False]


@pytest.mark.parametrize("text", ['{"checkpoints": {"final": {"file": "x.safe', '{"epochs": []}',
                                  '{"checkpoints": {"final": {"epoch": 1}}}'])
def test_a_truncated_checkpoint_manifest_says_how_to_restore_it(text, tmp_path, monkeypatch):
    from vitplast import models

    manifest = tmp_path / "checkpoints.json"
    manifest.write_text(text)
    monkeypatch.setattr(models, "MANIFEST", manifest)
    with pytest.raises(ValueError, match="unreadable or truncated.*git checkout"):
        models.load_model(models.EMBEDDED_NAME)
