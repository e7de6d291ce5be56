"""Attention kernels (``vitplast.attention``): the matmul path computes what the fused kernel
does, and ``fused_attn`` is off only inside the block, restored after it, on error too."""

import pytest
import torch
from helpers import tiny_vit

from vitplast.attention import unfused_attention


def test_the_matmul_path_is_the_same_function_and_is_restored():
    model = tiny_vit()
    attns = [m for m in model.modules() if hasattr(m, "fused_attn")]
    assert len(attns) == 2 and all(m.fused_attn for m in attns)  # timm's default here
    x = torch.randn(3, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        fused = model(x)
        with unfused_attention(model):
            assert not any(m.fused_attn for m in attns)
            matmul = model(x)
    assert all(m.fused_attn for m in attns)
    torch.testing.assert_close(matmul, fused, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="inside"), unfused_attention(model):
        raise RuntimeError("inside")
    assert all(m.fused_attn for m in attns)
    with unfused_attention(lambda v: v):  # not a module: passes through
        pass
