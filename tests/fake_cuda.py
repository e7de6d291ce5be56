"""A CUDA device simulated on the CPU, to catch device mismatches without a GPU.

``FakeCuda()`` is a ``TorchFunctionMode``: inside it, a tensor moved to ``"cuda"`` (``.to``,
``.cuda``, a factory with ``device="cuda"``) stays in CPU memory but becomes an ``OnDevice``
tensor, whose ``.device`` says ``cuda:0``; results of operations on it are ``OnDevice`` too
(torch's subclass propagation). As on a real GPU, an operation that mixes an ``OnDevice``
tensor with a host tensor of one or more dimensions raises "Expected all tensors to be on the
same device", the ``.grad`` of an ``OnDevice`` tensor is ``OnDevice``, ``.numpy()`` of an
``OnDevice`` tensor raises, and ``.cpu()`` brings it back.
Numbers are the CPU's: a whole measuring pass runs, to its end, under the mode.

``on_fake_cuda(model)`` puts a model's parameters and buffers there (as ``model.to("cuda")``
would); ``cuda_available(monkeypatch)`` makes ``torch.cuda.is_available()`` say True so that
``models.pick_device()`` picks it, as on a GPU machine.
"""

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

FAKE = torch.device("cuda", 0)
GRAD_GET = torch.Tensor.grad.__get__  # a new method-wrapper at each access: compare with ==
#: Operations that may legitimately take tensors on two devices.
MIXED_OK = (torch.Tensor.copy_, torch.Tensor.__getitem__, torch.Tensor.view_as,
            torch.Tensor.reshape_as, torch.Tensor.expand_as, torch.autograd.grad,
            torch.autograd.backward, torch.Tensor.backward, torch._has_compatible_shallow_copy_type)
FACTORIES = (torch.zeros, torch.ones, torch.empty, torch.randn, torch.rand, torch.full,
             torch.arange, torch.tensor, torch.as_tensor, torch.randint, torch.zeros_like,
             torch.ones_like, torch.empty_like, torch.randn_like)


class OnDevice(torch.Tensor):
    """A CPU tensor that says it lies on the fake CUDA device."""

    @property
    def device(self):
        return FAKE

    @property
    def is_cuda(self):
        return True

    def __deepcopy__(self, memo):
        if id(self) not in memo:  # a copy.deepcopy of a model on the device stays there
            copied = self.as_subclass(torch.Tensor).detach().clone().as_subclass(OnDevice)
            if getattr(self, "_is_param", False):
                copied = nn.Parameter(copied, self.requires_grad)
            memo[id(self)] = copied
        return memo[id(self)]


def _on(t: torch.Tensor) -> bool:
    """Whether ``t`` (or what a torch.func transform wraps in it) is on the fake device."""
    from torch._C import _functorch

    while not isinstance(t, OnDevice):
        if not _functorch.is_functorch_wrapped_tensor(t):
            return False
        t = _functorch.get_unwrapped(t)
    return True


def _cuda(device) -> bool | None:
    """True for a CUDA device, False for another, None for no device."""
    if isinstance(device, torch.Tensor):
        return _on(device)
    if isinstance(device, (str, torch.device)):
        return torch.device(device).type == "cuda"
    return None


class FakeCuda(TorchFunctionMode):
    """See the module docstring. ``moves`` counts host-to-device moves."""

    def __init__(self):
        super().__init__()
        self.moves = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to or func is torch.Tensor.cuda:
            return self._to(func, args, kwargs)
        if func is torch.Tensor.pin_memory:  # page-locking needs a real driver: a no-op here
            return args[0]
        if func == GRAD_GET:  # autograd's engine fills .grad outside the mode
            grad = func(*args, **kwargs)
            return grad.as_subclass(OnDevice) if grad is not None and _on(args[0]) else grad
        if func is torch.Tensor.cpu:
            return args[0].as_subclass(torch.Tensor) if _on(args[0]) else args[0]
        if func in (torch.Tensor.numpy, torch.Tensor.__array__) and _on(args[0]):  # np.asarray too
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() "
                            "to copy the tensor to host memory first.")
        if func in FACTORIES and _cuda(kwargs.get("device")):
            return func(*args, **{**kwargs, "device": "cpu"}).as_subclass(OnDevice)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if func not in MIXED_OK and any(_on(t) for t in tensors):
            host = [t for t in tensors if not _on(t) and t.dim() > 0]
            if host:
                name = getattr(func, "__name__", str(func))
                raise RuntimeError("Expected all tensors to be on the same device, but found at "
                                   f"least two devices, cuda:0 and cpu! ({name}, host tensor "
                                   f"of shape {tuple(host[0].shape)})")
        return func(*args, **kwargs)

    def _to(self, func, args, kwargs):
        t = args[0]
        target = True if func is torch.Tensor.cuda else next(
            (c for c in map(_cuda, [*args[1:], kwargs.get("device")]) if c is not None), None)
        if target is None:  # a dtype change only: stays where it is
            return func(*args, **kwargs)
        rest = [a for a in args[1:] if isinstance(a, torch.dtype)]  # not device, non_blocking
        kw = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking")}
        out = torch.Tensor.to(t.as_subclass(torch.Tensor), *rest, **kw) if (rest or kw) else t
        if target:
            self.moves += not _on(t)
            return out if isinstance(out, OnDevice) else out.as_subclass(OnDevice)
        return out.as_subclass(torch.Tensor) if _on(out) else out


def on_fake_cuda(model: nn.Module) -> nn.Module:
    """``model`` with its parameters and buffers on the fake device, in place."""
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = nn.Parameter(p.detach().as_subclass(OnDevice),
                                                        p.requires_grad)
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = b.as_subclass(OnDevice)
    return model
