"""The native LinearFormat: y = x @ W.T computed on the checkpoint's raw GGUF blocks.

Weights stay in their GGUF bytes (4.5-8.5 bits per weight, never re-expanded); activations are
quantized per block of 32 inputs to int8 with one float scale (llama.cpp's q8 activations), and each
block's integer dot product is scaled in float32. Error: each activation moves by at most half its
block's step (max|x_block| / 254), so |y - y_ref| <= sum_k |w_k| * step_k / 2; for these shapes it is
well under 1% of max|y| (measured on the models' shapes in tests/kernels/native). `TOLERANCE` is the
bound the plan holds it to.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.formats import LinearFormat, LinearSource, Unsupported
from haltwise.kernels.host import HostInfo
from haltwise.kernels.native import build
from haltwise.kernels.native.repack import X8, repack_x8

SUPPORTED = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K)
TOLERANCE = 0.02


@dataclass(frozen=True)
class PreparedBlocks:
    weights: list[torch.Tensor]       # per run of equal-qtype shards: (rows, bytes_per_row) uint8, or X8 records
    qtypes: list[int]                 # GGML type, or 1000 + type for row-interleaved records (repack.py)
    rows: list[int]                   # output rows of each run
    out_features: int


def prepare_blocks(source: LinearSource, interleave: bool = True) -> PreparedBlocks:
    """Shards -> contiguous uint8 tensors; neighbouring shards of one qtype are merged (one kernel run),
    and Q4_0/Q4_1/Q8_0 runs regrouped 8 rows at a time (repack.py) unless interleave is False."""
    if not source.gguf:
        raise Unsupported("no raw GGUF blocks for this weight (not loaded from a GGUF file)")
    out_features, in_features = source.shape
    if in_features % 32:
        raise Unsupported(f"in_features {in_features} is not a multiple of 32")
    runs: list[tuple[int, list[np.ndarray]]] = []
    for shard in source.gguf:
        qtype = Q(shard.qtype)
        if qtype not in SUPPORTED:
            raise Unsupported(f"GGUF type {qtype.name} has no native kernel")
        if runs and runs[-1][0] == int(qtype):
            runs[-1][1].append(shard.data)
        else:
            runs.append((int(qtype), [shard.data]))
    weights, qtypes, rows = [], [], []
    for qtype, parts in runs:
        data = np.concatenate(parts) if len(parts) > 1 else np.array(parts[0])     # a writable copy
        rows.append(data.shape[0])
        if interleave and Q(qtype) in X8:
            data, qtype = repack_x8(data, Q(qtype))
        weights.append(torch.from_numpy(data))
        qtypes.append(qtype)
    if sum(rows) != out_features:
        raise Unsupported(f"GGUF shards hold {sum(rows)} rows, the weight has {out_features}")
    return PreparedBlocks(weights, qtypes, rows, out_features)


class GGUFNative(LinearFormat):
    """Raw GGUF blocks x q8 activations, AVX2 or portable kernels picked from what the CPU reports."""

    name, tolerance, exact, version = "gguf-q8-native", TOLERANCE, False, 2   # 2: Q5_0 X8 records

    def unavailable(self, host: HostInfo) -> str | None:
        if build.load() is None:
            return build.failure()
        return None

    def prepare(self, source: LinearSource) -> PreparedBlocks:
        return prepare_blocks(source)

    def run(self, prepared: PreparedBlocks, x: torch.Tensor) -> torch.Tensor:
        return build.load().gemm(prepared.weights, prepared.qtypes, prepared.rows, x)
