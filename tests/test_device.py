"""Device-correct everywhere, proven without a GPU: every public function that takes a model
(or a module) and tensors moves the tensors to the model's device. The model lies on a CUDA
device simulated on the CPU (``fake_cuda``): a host tensor meeting it raises, as on a GPU; the
notebooks' measuring calls run as on a GPU machine (``torch.cuda.is_available()`` True)."""

import copy

import pandas as pd
import pytest
import torch
from fake_cuda import FAKE, FakeCuda, OnDevice, on_fake_cuda
from helpers import exec_notebook, tiny_dinov2, tiny_vit, toy_task

from vitplast import models
from vitplast.course import notebooks
from vitplast.datasets import tasks
from vitplast.experiments import confounds
from vitplast.measure import bounds, definitions, intervals, plasticity, rates, real
from vitplast.measure.pairs import make_pairs
from vitplast.train import passes, probes


@pytest.fixture
def fake_cuda(monkeypatch):
    """Inside: the fake CUDA device, picked by default as on a GPU machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "fake CUDA (the CPU)")
    overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)  # model.to keeps the class
    try:
        with FakeCuda() as mode:
            yield mode
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(overwrite)


@pytest.fixture
def pairs():
    g = torch.Generator().manual_seed(1)
    return torch.randn(12, 1, 16, 16, generator=g), torch.randn(12, 1, 16, 16, generator=g)


def test_the_fake_device_catches_a_host_tensor(fake_cuda, pairs):
    """The harness itself: a host batch into a model on the device raises as CUDA does, and
    the same batch moved there runs and gives the CPU's numbers."""
    model, x = tiny_vit(), pairs[0]
    expected = model(x)
    on_fake_cuda(model)
    with pytest.raises(RuntimeError, match="same device"):
        model(x)
    out = model(x.to("cuda"))
    assert isinstance(out, OnDevice) and out.device == FAKE
    with pytest.raises(TypeError, match="numpy"):
        out.numpy()
    torch.testing.assert_close(out.cpu(), expected)


def test_training_a_deep_copy_on_the_fake_device_gives_the_cpu_s_numbers(fake_cuda, pairs):
    """The harness: gradients and optimizer state of a model on the device (and of its deep
    copy) are on the device, and a step with momentum changes the weights as on the CPU."""
    x = pairs[0]

    def step(model, device):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            opt.zero_grad()
            model(x.to(device)).square().mean().backward()
            opt.step()
        return opt

    expected = tiny_vit()
    on_device = copy.deepcopy(on_fake_cuda(tiny_vit()))
    step(expected, "cpu")
    opt = step(on_device, "cuda")
    p = next(on_device.parameters())
    assert isinstance(p.grad, OnDevice) and isinstance(opt.state[p]["momentum_buffer"], OnDevice)
    for a, b in zip(on_device.parameters(), expected.parameters()):
        assert isinstance(a, OnDevice)
        torch.testing.assert_close(a.cpu(), b)


def _calls(model, x, y):
    """Every public measuring function, called with host tensors and a model on the device."""
    block = model.blocks[0]
    tokens = torch.randn(3, 17, 32)
    return {
        "rates.rate": lambda: rates.rate(block.mlp.fc1, tokens, tokens + 1),
        "rates.embed": lambda: rates.embed(model, x),
        "rates.batch_rates": lambda: rates.batch_rates(model, x, y),
        "rates.batch_rates embedding": lambda: rates.batch_rates(
            model, x, y, protocol="embedding"),
        "rates.component_inputs": lambda: rates.component_inputs(model, x),
        "plasticity.measure": lambda: plasticity.measure(model, x, y, progress=False),
        "plasticity.measurement": lambda: plasticity.measurement(
            model, make_pairs(x, y), protocol="embedding", keep=2, progress=False),
        "plasticity.scale_curve": lambda: plasticity.scale_curve(model, x, y, [0.5, 2.0]),
        "intervals.intervals": lambda: intervals.intervals(model, x, y, n_lipschitz=2,
                                                           power_iters=2, progress=False),
        "bounds.attention_by_heads": lambda: bounds.attention_by_heads(block.attn, tokens),
        "bounds.local_lipschitz": lambda: bounds.local_lipschitz(block.attn, tokens, 2),
        "bounds.component_bounds": lambda: bounds.component_bounds(
            block.attn, "MHA", dict(n=17, r_max=3.0, r_rms=2.0, alpha=1.1, energy=9.0)),
        "definitions.linear_table": lambda: definitions.linear_table(block.mlp.fc1, n=16),
        "definitions.scale_table": lambda: definitions.scale_table(
            {"LN": block.norm1, "MHA": block.attn}, (17, 32), [1.0], n=4),
        "confounds.check_rescale": lambda: confounds.check_rescale(model, x, y, {"LN1": 2.0}),
        "passes.evaluate": lambda: passes.evaluate(model, toy_task(16)),
        "probes.linear_probe": lambda: probes.linear_probe(model, tasks.Task(
            "toy", toy_task(20), toy_task(10, seed=1), toy_task(10, seed=2), 5), max_iter=20),
    }


@pytest.mark.parametrize("name", list(_calls(tiny_vit(), None, None)))
def test_every_measuring_function_moves_host_tensors_to_the_model(name, fake_cuda, pairs):
    """Host images or tokens, the model (or module) on the device: no mismatch, and the
    result equals the CPU's (the numbers are computed on the CPU either way)."""
    expected = _calls(tiny_vit(), *pairs)[name]()
    model = on_fake_cuda(tiny_vit())
    got = _calls(model, *pairs)[name]()
    assert fake_cuda.moves > 0 or name == "bounds.component_bounds"
    _assert_same(got, expected)


def _assert_same(got, expected):
    import pandas as pd

    if isinstance(expected, dict) and not isinstance(got, plasticity.Measurement):
        assert got.keys() == expected.keys()
        for k in expected:
            _assert_same(got[k], expected[k])
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    elif isinstance(expected, pd.DataFrame):
        pd.testing.assert_frame_equal(got, expected, rtol=1e-4)
    elif isinstance(expected, plasticity.Measurement):
        _assert_same(got.rates, expected.rates)
    elif isinstance(expected, tuple):
        for a, b in zip(got, expected):
            _assert_same(a, b)
    else:
        assert got == pytest.approx(expected, rel=1e-4)


def test_the_real_model_is_measured_on_the_device_it_is_given(fake_cuda, monkeypatch):
    """``real.measure_model(device=...)``: every table of a DINOv2-shaped model on the device,
    with the CPU's numbers (the shipped tables are measured on the CPU, the default)."""
    def load(*_, device=None, **__):
        model = tiny_dinov2()
        return on_fake_cuda(model) if device == "cuda" else model

    monkeypatch.setattr(models, "load_model", load)
    monkeypatch.setattr(real, "CHECK_PAIRS", 2)
    kw = dict(n_pairs=4, batch_size=2, n_lipschitz=1, power_iters=2, stream_images=2,
              progress=False)
    on_cpu = real.measure_model("tiny", **kw)
    on_device = real.measure_model("tiny", device="cuda", **kw)
    for name, table in on_cpu.items():
        pd.testing.assert_frame_equal(on_device[name], table, rtol=1e-4)


def test_load_model_puts_the_model_on_the_device(fake_cuda):
    model = models.load_model()  # picks CUDA when available
    assert next(model.parameters()).device == FAKE


def test_a_run_starts_from_the_same_model_on_every_device(fake_cuda, fake_train):
    """``runner.build`` makes a run's model on the CPU (new head, adapters and all), the same
    whatever device the run trains on; the loop is handed the device and moves it there."""
    from helpers import TINY

    from vitplast.experiments import runner, runs

    run = runs.make_run("digits", "MHA", lr=0.1, seed=3, prepare="lora",
                        ablation={"component": "MHA", "rank": 2}, **TINY)
    for device in ("cpu", "cuda"):
        runner.run_one(run, device=device)
    (here, here_kwargs), (there, there_kwargs) = fake_train.calls
    assert [k["device"].type for k in (here_kwargs, there_kwargs)] == ["cpu", "cuda"]
    assert not any(isinstance(t, OnDevice) for t in [*there.parameters(), *there.buffers()])
    assert here.state_dict().keys() == there.state_dict().keys()
    assert any("lora_a" in k for k in here.state_dict())
    assert all(torch.equal(v, there.state_dict()[k]) for k, v in here.state_dict().items())


def test_scale_curve_skips_identical_pairs_and_streams(pairs):
    """An identical pair is excluded (it made the whole curve NaN), counted; batches of 5
    give the one-batch curve."""
    x, y = pairs
    y = y.clone()
    y[3] = x[3]
    model = tiny_vit()
    whole = plasticity.scale_curve(model, x, y, [0.5, 1.0, 2.0], batch_size=64)
    streamed = plasticity.scale_curve(model, make_pairs(x, y), scales=[0.5, 1.0, 2.0],
                                      batch_size=5)
    assert whole["plasticity"].notna().all() and whole.attrs["excluded"] == 1
    import pandas as pd

    pd.testing.assert_frame_equal(whole, streamed)
    keep = [i for i in range(len(x)) if i != 3]
    direct = plasticity.scale_curve(model, x[keep], y[keep], [0.5, 1.0, 2.0])
    pd.testing.assert_frame_equal(whole, direct)
    e = rates.embed(model, torch.cat([x[keep], y[keep]]))
    attn, c = model.blocks[1].attn, 2.0
    with torch.no_grad():
        r = plasticity._pair_rate(c * e, attn(c * e)).mean().item()
    assert whole.query("layer == 1 and scale == 2.0")["plasticity"].item() == pytest.approx(r)



#: Smaller than the smoke profile, where it is not small enough already: every op runs
#: through the fake device's Python mode. Every notebook of the course runs (a new one with
#: its smoke parameters until it has a line here).
SMALLER = {"01_definitions": dict(n_pairs=16, n_samples=100),
           "02_plasticity": dict(n_pairs=8, tasks=["digits"], pretraining_tasks=["digits"],
                                 checkpoints=["init", "final"], scales=[1.0]),
           "02b_gauge": dict(n_pairs=8, gauge_tasks=["digits"], embedding_scales=[1.0],
                             invariance_steps=2, relative_pairs=8, measured_dir=""),
           "03_bounds": dict(n_pairs=8, n_seeds=1, power_iters=2, n_lipschitz=2),
           "03b_intervals": dict(n_pairs=8, power_iters=2, n_lipschitz=2),
           "06_explorer": dict(n_pairs=8)}


@pytest.mark.slow
@pytest.mark.parametrize("name", notebooks.NOTEBOOKS)
def test_every_notebook_runs_on_the_device(name, fake_cuda, tmp_path, monkeypatch):
    """Each notebook's cells (smoke profile, fewer pairs), in this process, as on a GPU
    machine: every model it loads without asking for the CPU (07 reads the names of the
    study's variants off a CPU copy) lands on the (fake) CUDA device, and no host tensor
    meets it."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    loaded = []
    load = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loaded.append(
        (k.get("device"), load(*a, **k))) or loaded[-1][1])
    exec_notebook(name, params=SMALLER.get(name, {}))
    assert loaded and all(next(m.parameters()).device == FAKE
                          for device, m in loaded if device != "cpu")


def test_batched_runs_train_on_the_device(fake_cuda, monkeypatch):
    """``batched.train_lrs`` moves host batches to the device and gives the CPU's numbers.
    (vmap returns plain tensors from the fake device's: its outputs are put back there, as
    CUDA's would be, when its inputs were.)"""
    from vitplast.train import batched, trainees

    def vmap(fn, **kw):
        def run(*args):
            out = torch.func.vmap(fn, **kw)(*args)
            on = any(isinstance(t, OnDevice) for t in torch.utils._pytree.tree_leaves(args))
            return out.as_subclass(OnDevice) if on else out
        return run

    monkeypatch.setattr(trainees, "vmap", vmap)

    kwargs = dict(lrs=[0.01, 0.1], config="MHA", steps=3, batch_size=16, eval_every=2,
                  progress=False)
    expected = batched.train_lrs(tiny_vit(), toy_task(32), toy_task(16, seed=1),
                                 toy_task(16, seed=2), device="cpu", **kwargs)
    got = batched.train_lrs(on_fake_cuda(tiny_vit()), toy_task(32), toy_task(16, seed=1),
                            toy_task(16, seed=2), device="cuda", **kwargs)
    for g, e in zip(got, expected, strict=True):
        assert g.device == "cuda" and g.test_acc == e.test_acc
        assert [r["loss"] for r in g.history] == pytest.approx([r["loss"] for r in e.history])
