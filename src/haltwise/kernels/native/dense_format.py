"""The native dense LinearFormat: float32 weights, y = x @ W.T with one fixed-order dot product per output.

For weights with no native block kernel (float32 / float16 / bfloat16 checkpoints, GGUF types without a
kernel): the batch-invariant counterpart of torch's F.linear, whose BLAS picks kernels -- and summation
orders -- by the shape of the call, so a row's result can change with the number of rows beside it (on
the AMD EPYC Zen 3 host this was written on, row 0 of a 64 x 576 by 576 x 256 product differs from the
same row computed alone).
csrc/decode_math.inc `dense_rows_impl` states the invariant.
"""
from __future__ import annotations

import torch

from haltwise.kernels.formats import LinearFormat, LinearSource, float32_sum_bound
from haltwise.kernels.host import HostInfo
from haltwise.kernels.native import build


class Float32Native(LinearFormat):
    name, tolerance, exact, batch_invariant = "float32-native", 1e-5, True, True

    def unavailable(self, host: HostInfo) -> str | None:
        return build.failure() if build.load() is None else None

    def prepare(self, source: LinearSource) -> torch.Tensor:
        return source.weight.float().contiguous()                                   # (out, in)

    def run(self, prepared: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return build.load().dense(x, prepared)

    def error_bound(self, x: torch.Tensor, weight: torch.Tensor, abs_dot: torch.Tensor) -> torch.Tensor:
        return float32_sum_bound(weight, abs_dot)
