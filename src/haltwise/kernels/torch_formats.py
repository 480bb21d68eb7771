"""The formats torch ships: float32, bf16, oneDNN-prepacked bf16, int8 and int4 weight-only.

Whether each runs, and how fast, depends on the CPU: oneDNN's bf16 reorder needs AVX512-BW/VL/DQ or
AVX-NE-CONVERT and raises elsewhere; bf16 F.linear runs everywhere but is emulated (slow for many rows)
without AVX512-BF16/AMX. The plan measures; nothing here guesses speed.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from haltwise.kernels.formats import U_BF16, LinearFormat, LinearSource, Unsupported, float32_sum_bound, register
from haltwise.kernels.host import HostInfo
from haltwise.kernels.quant import GRID_TOLERANCE, INT4_GROUP, int4_grid, int8_per_row

# Rounding x, w and the output to bf16 moves each product and the result by at most 2^-9 of itself:
# |error| <= 3 * 2^-9 * sum|w x| to first order; 3.01 covers the second-order terms.
BF16_ROUNDINGS = 3.01 * U_BF16


def int8_row_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """|q * scale - w| <= scale / 2 per weight (quant.int8_per_row): |error| <= scale_n / 2 * sum|x|."""
    scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0                    # (out,)
    return 0.5 * x.abs().sum(dim=1, keepdim=True) * scales[None, :]               # (rows, out)


class Float32(LinearFormat):
    name, tolerance, exact = "float32", 1e-5, True

    def error_bound(self, x, weight, abs_dot):
        return float32_sum_bound(weight, abs_dot)

    def prepare(self, source: LinearSource) -> torch.Tensor:
        return source.weight.float().contiguous()                                   # (out, in)

    def run(self, prepared: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, prepared)


class BF16(LinearFormat):
    """bf16 weight and activations, float32 accumulation, float32 out."""
    name, tolerance = "bf16", 0.03

    def error_bound(self, x, weight, abs_dot):
        return BF16_ROUNDINGS * abs_dot + float32_sum_bound(weight, abs_dot)

    def prepare(self, source: LinearSource) -> torch.Tensor:
        return source.weight.to(torch.bfloat16).contiguous()

    def run(self, prepared: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), prepared).float()


class OneDNNBF16(LinearFormat):
    """bf16 weight reordered once into oneDNN's blocked layout (plain F.linear reorders every call)."""
    name, tolerance = "bf16-onednn", 0.03
    error_bound = BF16.error_bound

    def unavailable(self, host: HostInfo) -> str | None:
        if not torch.backends.mkldnn.is_available():
            return "torch was built without oneDNN"
        return None

    def prepare(self, source: LinearSource) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(source.weight.to(torch.bfloat16), 32)  # opaque layout

    def run(self, prepared: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), prepared, None, "none", [], "").float()


class Int8WeightOnly(LinearFormat):
    """int8 weight, one scale per output row; activations (and scales) in `act` (float32 or bf16)."""

    def __init__(self, act: torch.dtype):
        self.act = act
        self.name = "int8-wo" if act == torch.float32 else "int8-wo-bf16"
        self.tolerance = 0.05

    def error_bound(self, x, weight, abs_dot):
        quantized = int8_row_bound(x, weight)
        rounding = BF16_ROUNDINGS * (abs_dot + quantized) if self.act == torch.bfloat16 else 0
        return quantized + rounding + float32_sum_bound(weight, abs_dot)

    def prepare(self, source: LinearSource) -> tuple[torch.Tensor, torch.Tensor]:
        q, scales = int8_per_row(source.weight)
        return q, scales.to(self.act)

    def run(self, prepared: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x.to(self.act), *prepared).float()


class Int4WeightOnly(LinearFormat):
    """int4 weight with float32 scale and zero per group of 32 inputs: only for weights already on a
    4-bit grid (Q4_1 tensors), so its values are the checkpoint's own. With bf16 activations the scale
    and zero are rounded to bf16 too."""

    def __init__(self, act: torch.dtype):
        self.act = act
        self.name = "int4-wo" if act == torch.float32 else "int4-wo-bf16"
        self.tolerance = 1e-3 if act == torch.float32 else 0.03

    def error_bound(self, x, weight, abs_dot):
        """The grid holds each weight within GRID_TOLERANCE of its group's largest magnitude M (<= max|W_n|).
        bf16 scale and zero (|zero| <= M + 8 scale, 15 scale <= 2M) move a weight by <= 3.2 * 2^-9 * M."""
        row_max = weight.abs().amax(dim=1)[None, :] * x.abs().sum(dim=1, keepdim=True)     # (rows, out)
        grid = GRID_TOLERANCE * row_max
        rounding = BF16_ROUNDINGS * abs_dot + 3.2 * U_BF16 * row_max if self.act == torch.bfloat16 else 0
        return grid + rounding + float32_sum_bound(weight, abs_dot)

    def prepare(self, source: LinearSource) -> tuple[torch.Tensor, torch.Tensor]:
        grid = int4_grid(source.weight[:8]) and int4_grid(source.weight)     # a cheap refusal first
        if grid is None:
            raise Unsupported(f"weight is not on a 4-bit grid (groups of {INT4_GROUP})")
        q, scale, zero = grid
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        scales_and_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()  # (groups, out, 2)
        return packed, scales_and_zeros.to(self.act)

    def run(self, prepared: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        packed, scales_and_zeros = prepared
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(self.act), packed, INT4_GROUP, scales_and_zeros).float()


for _fmt in (Float32(), BF16(), OneDNNBF16(), Int8WeightOnly(torch.float32), Int8WeightOnly(torch.bfloat16),
             Int4WeightOnly(torch.float32), Int4WeightOnly(torch.bfloat16)):
    register(_fmt)
