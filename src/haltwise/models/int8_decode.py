"""Int8 weight-only matmuls for decode-sized steps, bf16 GEMMs for everything larger.

A decode step multiplies a handful of rows by every weight: it is bound by memory bandwidth, so
reading int8 weights (1 byte each, per-output-channel scales) is ~3x faster than bf16 or fp32.
A prefill chunk or a large batch is bound by compute, where bf16 on AMX wins. Measured on the
2-core dev machine (one 3072x576 weight, 2 threads): 1 row int8 58 us vs bf16 181 us vs fp32 283 us;
8 rows about even; 16+ rows bf16 is clearly faster. So each linear keeps both copies and picks by
the number of rows in the step (`max_rows`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DualLinear(nn.Module):
    """y = x @ W.T with W in bf16 (many rows) or int8 + per-row scales (at most max_rows rows)."""

    def __init__(self, weight: nn.Parameter, max_rows: int):
        super().__init__()
        self.weight = weight                                          # (out, in) bf16, may be tied
        w = weight.detach().float()
        # Scales are rounded to the activation dtype first, so the int8 values are chosen against the
        # scale the kernel really multiplies by: |q * scale - w| <= scale / 2 per element.
        scales = (w.abs().amax(dim=1).clamp(min=1e-12) / 127.0).to(weight.dtype)          # (out,)
        q = torch.round(w / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)       # (out, in)
        self.register_buffer("qweight", q, persistent=False)
        self.register_buffer("scales", scales, persistent=False)
        self.max_rows = max_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.max_rows:
            return torch.ops.aten._weight_int8pack_mm(x.contiguous(), self.qweight, self.scales)
        return F.linear(x, self.weight)


def enable_int8_decode(model: nn.Module, max_rows: int) -> int:
    """Swap every bias-free nn.Linear of a bfloat16 model for a DualLinear. Returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child.bias is None:
                if child.weight.dtype != torch.bfloat16:
                    raise ValueError("int8 decode needs a bfloat16 model")
                setattr(parent, name, DualLinear(child.weight, max_rows))
                swapped += 1
    return swapped
