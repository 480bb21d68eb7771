"""The native LinearFormat: y = x @ W.T computed on the checkpoint's raw GGUF blocks.

Weights stay in their GGUF bytes (4.5-8.5 bits per weight, never re-expanded); activations are
quantized per block of 32 inputs to int8 with one float scale (llama.cpp's q8 activations), and each
block's integer dot product is scaled in float32. Error: each activation moves by at most half its
block's step d = max|x_block| / 127, so |y - y_ref| <= sum_blocks d / 2 * sum_block |w| (`error_bound`,
which the verification holds every linear to, output by output). `TOLERANCE` is the looser relative
bound of the measuring check on Gaussian inputs.

Batch invariant: a row's activations are quantized from that row alone, and every kernel (each ISA, each
tile width MT, the row-interleaved records) gives row m its own accumulators, summed in block order, and
splits threads over output rows only: row m's outputs never depend on the other rows or the threads.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.formats import U32, LinearFormat, LinearSource, Unsupported, float32_sum_bound
from haltwise.kernels.host import HostInfo
from haltwise.kernels.native import build
from haltwise.kernels.native.repack import X8, records_shape, repack_x8

# MXFP4 (gpt-oss's experts): exact integer dots of the doubled e2m1 values (csrc/quant_kernels.h)
SUPPORTED = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.MXFP4)
TOLERANCE = 0.02


@dataclass(frozen=True)
class PreparedBlocks:
    weights: list[torch.Tensor]       # per run of equal-qtype shards: (rows, bytes_per_row) uint8, or X8 records
    qtypes: list[int]                 # GGML type, or 1000 + type for row-interleaved records (repack.py)
    rows: list[int]                   # output rows of each run
    out_features: int


def prepare_blocks(source: LinearSource, interleave: bool = True) -> PreparedBlocks:
    """Shards -> contiguous uint8 tensors; neighbouring shards of one qtype are merged (one kernel run),
    and every run of a type with X8 records (every SUPPORTED type but MXFP4) regrouped 8 rows at a time (repack.py)
    unless interleave is False.

    A mapped source (its record cache maps it: a routed expert of a model kept in files, record_cache.py)
    copies nothing into memory: its records are views of the record file, and blocks without records (MXFP4)
    views of the GGUF's map, one kernel run a shard (a row's output depends on its own row alone, so the
    split changes no bit)."""
    if not source.gguf:
        raise Unsupported("no raw GGUF blocks for this weight (not loaded from a GGUF file)")
    out_features, in_features = source.shape
    if in_features % 32:
        raise Unsupported(f"in_features {in_features} is not a multiple of 32")
    mapped = source.records is not None and source.records.mapped(source.name)
    runs: list[tuple[int, list[np.ndarray]]] = []
    for shard in source.gguf:
        qtype = Q(shard.qtype)
        if qtype not in SUPPORTED:
            raise Unsupported(f"GGUF type {qtype.name} has no native kernel")
        if runs and runs[-1][0] == int(qtype) and not (mapped and not (interleave and qtype in X8)):
            runs[-1][1].append(shard.data)
        else:
            runs.append((int(qtype), [shard.data]))
    weights, qtypes, rows = [], [], []
    for qtype, parts in runs:                                              # parts: read-only views of the map
        rows.append(sum(part.shape[0] for part in parts))
        if interleave and Q(qtype) in X8:
            data, qtype = _records(source, len(rows) - 1, parts, Q(qtype))
        elif mapped:
            data = parts[0]                                                # one shard: a view of the map
        else:
            data = np.concatenate(parts) if len(parts) > 1 else np.array(parts[0])   # writable copies
        weights.append(_tensor(data))
        qtypes.append(qtype)
    if sum(rows) != out_features:
        raise Unsupported(f"GGUF shards hold {sum(rows)} rows, the weight has {out_features}")
    return PreparedBlocks(weights, qtypes, rows, out_features)


def _records(source: LinearSource, run: int, parts: list[np.ndarray], qtype: Q) -> tuple[np.ndarray, int]:
    """Run `run`'s X8 records: from the model's record cache when it has them, else regrouped from the map
    (and handed to the cache)."""
    name = f"{source.name}#{run}"
    made_from = f"{qtype.name}:" + ",".join(f"{p.shape[0]}x{p.shape[1]}" for p in parts)
    cache = source.records
    cached = cache.get(name, made_from) if cache is not None else None
    if cached is not None:
        return cached
    if cache is not None and cache.mapped(name):                  # written straight into the record file
        return cache.make(name, made_from, records_shape(parts, qtype), X8[qtype],
                          lambda out: repack_x8(parts, qtype, out)), X8[qtype]
    data, code = repack_x8(parts, qtype)
    if cache is not None:
        cache.put(name, made_from, data, code)
    return data, code


def _tensor(data: np.ndarray) -> torch.Tensor:
    """A uint8 tensor over `data` without a copy. Records mapped on a later start and mapped MXFP4 blocks are
    read-only views of a file, which torch warns about: the kernels only ever read weights, so the warning
    is silenced here alone."""
    if data.flags.writeable:
        return torch.from_numpy(data)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(data)


class GGUFNative(LinearFormat):
    """Raw GGUF blocks x q8 activations, AVX2 or portable kernels picked from what the CPU reports."""

    # version 4: Q4_K / Q6_K X8 records; 5: MXFP4 blocks
    name, tolerance, exact, version = "gguf-q8-native", TOLERANCE, False, 5
    batch_invariant = True

    def error_bound(self, x: torch.Tensor, weight: torch.Tensor, abs_dot: torch.Tensor) -> torch.Tensor:
        """Activation rounding: each input moves by <= d_b / 2 (d_b = max|x_b| / 127 of its 32-block b), so
        output n moves by <= sum_b d_b / 2 * sum_{k in b} |W_nk|. Float rounding: the kernel sums per-block
        products and offset terms, each <= 3 max_b|W| |x_b|_1 (a block's scale times its quants, and its
        offset, are each at most twice its largest weight), at most K of them: 6 K 2^-24 times that.
        """
        rows, k = x.shape
        xb, wb = x.abs().view(rows, k // 32, 32), weight.abs().view(weight.shape[0], k // 32, 32)
        step = xb.amax(-1) / 127.0                                                     # (rows, nb)
        quantized = 0.5 * step @ wb.sum(-1).T                                          # (rows, out)
        rounding = 6 * k * U32 * (xb.sum(-1) @ wb.amax(-1).T)
        return quantized + rounding + float32_sum_bound(weight, abs_dot)

    def unavailable(self, host: HostInfo) -> str | None:
        if build.load() is None:
            return build.failure()
        return None

    def prepare(self, source: LinearSource) -> PreparedBlocks:
        return prepare_blocks(source)

    def run(self, prepared: PreparedBlocks, x: torch.Tensor) -> torch.Tensor:
        return build.load().gemm(prepared.weights, prepared.qtypes, prepared.rows, x)
