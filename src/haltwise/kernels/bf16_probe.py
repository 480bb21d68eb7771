"""Can this host run bf16 matmuls at all (dtype bfloat16)? Tried once, never assumed from flags."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


@functools.cache
def bf16_unavailable() -> str | None:
    """Why a bf16 F.linear fails or is wrong here, or None when it works."""
    try:
        gen = torch.Generator().manual_seed(0)
        x, w = torch.randn(4, 64, generator=gen), torch.randn(32, 64, generator=gen)
        y = F.linear(x.bfloat16(), w.bfloat16()).float()
    except Exception as e:                      # e.g. a torch build without bf16 CPU kernels
        return f"{type(e).__name__}: {e}"
    ref = F.linear(x, w)
    err = ((y - ref).abs().max() / ref.abs().max()).item()
    return None if err < 0.05 else f"bf16 matmul is off by {err:.3g} relative"
