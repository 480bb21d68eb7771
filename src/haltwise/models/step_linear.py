"""bfloat16 linears that pick their weight format by the number of rows in the step.

A decode step multiplies a handful of rows by every weight: it is bound by how fast the weights
stream from memory, so small steps read a quantized copy. A prefill chunk or a large batch is bound by
compute, where bf16 on AMX wins, and oneDNN runs it from a weight reordered once at load into its
own blocked layout (plain F.linear reorders the weight on every call).

Quantized copies (used for steps of at most `max_rows` rows):
  int4  when the weight already lies on a 4-bit grid, groups of 32 along the input dimension --
        true of every Q4_0/Q4_1 tensor of a GGUF -- so the copy is the checkpoint's own values
        (w = (q - 8) * scale + zero; only scale and zero are rounded to bf16);
  int8  otherwise (e.g. a Q8_0 or float embedding tied to lm_head): per-output-row scales.

Measured on the 2-core dev machine, SmolLM2-135M's 30 layers of linears (ms per step):
  rows   F.linear bf16   prepacked bf16   int8    int4
     1        19.4            15.0         10.9     4.5
     4        21.1            15.7         13.5     7.5
    32        23.2            18.2         62.6    46.9
"""
from __future__ import annotations

import torch
from torch import nn

INT4_GROUP = 32
# A weight is on the 4-bit grid when requantizing it moves no element by more than this fraction of
# its group's largest magnitude: bf16 rounding of a grid point moves it by at most 2^-9 relative, while
# off-grid weights (gaussian-like) move by ~1/30 of the group's range.
_GRID_TOLERANCE = 2.0 ** -7


class StepLinear(nn.Module):
    """y = x @ W.T for a bf16 W: prepacked bf16 for large steps, int4/int8 copies for small ones."""

    def __init__(self, weight: nn.Parameter, max_rows: int):
        super().__init__()
        if weight.dtype != torch.bfloat16:
            raise ValueError("StepLinear needs a bfloat16 weight")
        self.weight = weight                                          # (out, in) bf16, may be tied
        self.max_rows = max_rows
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 32)  # opaque oneDNN layout
        self.int4: tuple[torch.Tensor, torch.Tensor] | None = None   # (packed q, scales_and_zeros)
        self.int8: tuple[torch.Tensor, torch.Tensor] | None = None   # (q (out, in), scales (out,))
        if max_rows:
            self.int4 = int4_on_grid(weight.detach())
            if self.int4 is None:
                self.int8 = int8_per_row(weight.detach())

    @property
    def weight_format(self) -> str:
        """The format small steps read: 'int4', 'int8' or 'bf16' (no quantized copy)."""
        return "int4" if self.int4 is not None else "int8" if self.int8 is not None else "bf16"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= self.max_rows:
            if self.int4 is not None:
                return torch.ops.aten._weight_int4pack_mm_for_cpu(x.contiguous(), self.int4[0], INT4_GROUP, self.int4[1])
            if self.int8 is not None:
                return torch.ops.aten._weight_int8pack_mm(x.contiguous(), *self.int8)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


def int8_per_row(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 with one scale per output row: |q * scale - w| <= scale / 2 per element.

    Scales are rounded to bf16 first, so q is chosen against the scale the kernel really multiplies by.
    """
    w = weight.float()
    scales = (w.abs().amax(dim=1).clamp(min=1e-12) / 127.0).to(weight.dtype)            # (out,)
    q = torch.round(w / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)         # (out, in)
    return q, scales


def int4_on_grid(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The int4 copy of a weight that lies on a 4-bit grid (groups of INT4_GROUP inputs), else None.

    Asymmetric per group: scale = (max - min) / 15, q = round((w - min) / scale) in 0..15, and the
    kernel computes (q - 8) * scale + zero, so zero = min + 8 * scale.
    """
    out_features, in_features = weight.shape
    if in_features % INT4_GROUP:
        return None
    w = weight.float().view(out_features, in_features // INT4_GROUP, INT4_GROUP)
    low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
    scale = ((high - low) / 15).clamp(min=1e-12)
    q = torch.round((w - low) / scale).clamp(0, 15)
    scale_bf16, zero_bf16 = scale.to(torch.bfloat16), (low + 8 * scale).to(torch.bfloat16)
    back = (q - 8) * scale_bf16.float() + zero_bf16.float()
    limit = _GRID_TOLERANCE * w.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
    if bool(((back - w).abs() > limit).any()):
        return None
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.view(out_features, in_features).to(torch.int32), 1)
    scales_and_zeros = torch.cat([scale_bf16, zero_bf16], dim=-1).transpose(0, 1).contiguous()  # (groups, out, 2)
    return packed, scales_and_zeros


def enable_step_linears(model: nn.Module, max_rows: int) -> dict[str, int]:
    """Swap every bias-free nn.Linear of a bfloat16 model for a StepLinear.

    Returns how many linears read each small-step format, e.g. {'int4': 210, 'int8': 1}.
    """
    formats: dict[str, int] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child.bias is None:
                if child.weight.dtype != torch.bfloat16:
                    raise ValueError("step linears need a bfloat16 model")
                layer = StepLinear(child.weight, max_rows)
                setattr(parent, name, layer)
                formats[layer.weight_format] = formats.get(layer.weight_format, 0) + 1
    return formats
