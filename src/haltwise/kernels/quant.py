"""Weight-only quantized copies of a float32 (out, in) weight, for torch's int8/int4 CPU kernels."""
from __future__ import annotations

import torch

INT4_GROUP = 32
# A weight lies on the 4-bit grid when re-quantizing it moves no element by more than this fraction of
# its group's largest magnitude. Q4_1 blocks dequantized to float32 land within float rounding (~1e-7);
# gaussian-like weights move by ~1/30 of the group's range.
GRID_TOLERANCE = 2.0 ** -12


def int8_per_row(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8, one float32 scale per output row: |q * scale - w| <= scale / 2 elementwise.

    Returns q (out, in) int8 and scales (out,) float32.
    """
    w = weight.float()
    scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0                          # (out,)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)            # (out, in)
    return q, scales


def int4_grid(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(q (out, in) int32 in 0..15, scale (out, groups), zero (out, groups)) when the weight is on an
    asymmetric 4-bit grid per group of INT4_GROUP inputs (true of Q4_1 tensors), else None.

    w = (q - 8) * scale + zero, so zero = min + 8 * scale (torch's int4 kernel convention).
    """
    out_features, in_features = weight.shape
    if in_features % INT4_GROUP:
        return None
    w = weight.float().view(out_features, in_features // INT4_GROUP, INT4_GROUP)
    low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-12)
    q = torch.round((w - low) / scale).clamp(0, 15)
    zero = low + 8 * scale
    limit = GRID_TOLERANCE * w.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
    if bool((((q - 8) * scale + zero - w).abs() > limit).any()):
        return None
    return q.view(out_features, in_features).to(torch.int32), scale.squeeze(-1), zero.squeeze(-1)
