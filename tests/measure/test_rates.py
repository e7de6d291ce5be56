"""One batch's rates (``vitplast.measure.rates``): hooked rates equal direct recomputation on three
ViT variants, both protocols feed what they say, chunked pair distances equal whole-batch ones
and allocate no batch-sized difference, later passes reuse the first one's buffers, and the
hook scope removes its handles after an error."""

import pytest
import torch
from helpers import direct_rates, tiny_vit
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from vitplast.measure import components, rates
from vitplast.measure.pairs import PROTOCOLS


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("variant", ["vit", "dinov2", "deit"])
def test_hook_rates_equal_direct_recomputation(images, protocol, variant):
    kwargs = {"vit": {}, "dinov2": dict(init_values=1e-5, reg_tokens=4),
              "deit": dict(class_token=True, global_pool="avg", fc_norm=True)}[variant]
    model = tiny_vit(**kwargs)
    x, y = images
    hooked = rates.batch_rates(model, x, y, protocol)
    direct = direct_rates(model, x, y, protocol)
    assert set(hooked) == {(i, c) for i in range(2) for c in components.COMPONENTS}
    for key in hooked:
        torch.testing.assert_close(hooked[key], direct[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 300, 1 << 17])
def test_chunked_pair_distances_equal_whole_batch_ones(monkeypatch, chunk):
    """The estimator forms x - y a few pairs at a time on a CPU (``_CHUNK`` elements): the
    same numbers as the whole-batch difference (float rounding at most), however the batch
    splits into chunks (one pair each, uneven ones, one), also for a non-contiguous
    activation; other dtypes take the whole-batch path (in float32)."""
    monkeypatch.setattr(rates, "_CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    t = torch.randn(2 * 9, 5, 12, generator=g)
    for tensor in (t, t.transpose(1, 2), t.double()):
        got = rates._Rates()._pair_distance(tensor)
        want = (tensor[:9].double() - tensor[9:].double()).flatten(1).norm(dim=1)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)
        torch.testing.assert_close(got, rates._pair_distance(tensor), rtol=1e-6, atol=0)


class _NewStorages(TorchDispatchMode):
    """Records the size in bytes of every storage an op creates (views and ``out=`` writes
    create none)."""

    def __init__(self):
        super().__init__()
        self.sizes = [0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        self.sizes += [t.untyped_storage().nbytes() for t in tree_leaves(out)
                       if isinstance(t, torch.Tensor)
                       and t.untyped_storage().data_ptr() not in given]
        return out


def test_chunked_pair_distances_allocate_no_difference_of_the_whole_batch():
    """What ``_Rates`` says of memory: on a CPU nothing larger than its scratch buffer is
    allocated, where the whole-batch difference allocates half the activation."""
    t = torch.randn(2 * 64, 50, 512)  # an FC1 output of the embedded model, 64 pairs
    with _NewStorages() as chunked:
        rates._Rates()._pair_distance(t)
    with _NewStorages() as whole:
        rates._pair_distance(t)
    assert max(chunked.sizes) <= 4 * rates._CHUNK < t.nbytes // 2 <= max(whole.sizes)


def test_later_passes_reuse_the_first_passs_buffers():
    """What ``_Rates`` says of its results: after the first pass, a pass allocates no storage
    (distances and rates land in the first pass's buffers, a smaller batch in a part of them),
    and its rates are still the rates of its own tensors."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(2 * 9, 5, 12, generator=g) for _ in range(3))
    r = rates._Rates()

    def one_pass(n):  # two calls, the second's input the first's output (its distances reused)
        r.new_pass()
        return [r(a[:2 * n], b[:2 * n]), r(b[:2 * n], c[:2 * n])]

    first = one_pass(9)
    first_ptrs = [t.data_ptr() for t in first]
    for n in (9, 4):
        with _NewStorages() as new:
            got = one_pass(n)
        assert max(new.sizes) == 0
        assert [t.data_ptr() for t in got] == first_ptrs
        for (inp, out), rate in zip(((a, b), (b, c)), got):
            want = rates._pair_rate(inp[:2 * n], out[:2 * n])
            torch.testing.assert_close(rate, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hook_rates_do_not_depend_on_the_chunk(monkeypatch, model, images, protocol):
    x, y = images
    whole = rates.batch_rates(model, x, y, protocol)
    monkeypatch.setattr(rates, "_CHUNK", 100)  # several chunks per activation
    chunked = rates.batch_rates(model, x, y, protocol)
    for key in whole:
        torch.testing.assert_close(chunked[key], whole[key], rtol=1e-6, atol=0)


def test_embedding_protocol_feeds_every_component_the_embedding(model, images):
    x, y = images
    ex, ey = rates.embed(model, x), rates.embed(model, y)
    got = rates.batch_rates(model, x, y, "embedding")
    fc2 = model.blocks[1].mlp.fc2
    pad = lambda e: torch.nn.functional.pad(e, (0, fc2.in_features - e.shape[-1]))  # noqa: E731
    with torch.no_grad():
        num = (fc2(pad(ex)) - fc2(pad(ey))).flatten(1).norm(dim=1)
        expected = num / (ex - ey).flatten(1).norm(dim=1)
        mha = rates.rate(model.blocks[0].attn, ex, ey)
    torch.testing.assert_close(got[(1, "FC2")], expected)
    torch.testing.assert_close(got[(0, "MHA")], mha)


def test_hidden_protocol_uses_in_network_inputs(model, images):
    x, _ = images
    inputs = rates.component_inputs(model, x, "hidden")
    with torch.no_grad():
        torch.testing.assert_close(inputs[(0, "MHA")], model.blocks[0].norm1(inputs[(0, "LN1")]))
        torch.testing.assert_close(inputs[(0, "LN1")], rates.embed(model, x))
        assert inputs[(1, "FC2")].shape[-1] == 4 * 32


def test_hooks_removed_even_after_an_error(model):
    with pytest.raises(RuntimeError):
        with rates.hooks(model, lambda key, module, inp, out: None):
            model.forward_features(torch.randn(3, 1, 16, 16))  # odd batch still runs
            raise RuntimeError("boom")
    assert all(not m._forward_hooks for m in model.modules())
