"""Regroup GGUF block rows 8 at a time (the X8 records of csrc/quant_kernels.h), so a 256-bit lane is one
output row and the kernels need no horizontal sums. Rows are padded to a multiple of 8 with zero blocks
(scale 0: they add nothing, and are never written out).

Q4_0 / Q4_1 / Q5_0 / Q8_0: every byte is kept, only moved. A group's record for block b holds the 8 rows'
scales side by side, then their quant bytes 4 at a time:

    plain:  row r, block b = [d | (m) or (qh) | qs[0..15] or qs[0..31]]
    X8:     group g, block b = [d of rows 8g..8g+7 | (m or qh of them) | qs[4j..4j+3] of each row, j = 0, 1, ...]

Q5_0's high bits are reordered within each row's 32-bit qh so a kernel step finds them with one shift:
bit 8t + s of the stored word is the high bit of the input that step s reads from byte t (step s < 4:
input 4s + t, the low nibbles; step s >= 4: input 16 + 4(s - 4) + t, the high nibbles).

Q4_K / Q6_K (256 inputs per block): the quant bytes are moved the same way, 4 at a time per row, chunk by
chunk of 32 bytes (a chunk's byte i holds input i of two 32-input sub-blocks, one per nibble); Q6_K's
scales and high bits are only moved. Q4_K's 6-bit scales and mins (12 packed bytes per row) are stored
unpacked, one byte each (16 bytes per row: 148 instead of 144 bytes per row and block), so a kernel loads
8 rows' scale of a sub-block as 8 bytes. Lossless: the same integers, and every row's arithmetic is the
same whatever its lane.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.native import build

# qtype -> X8 code (1000 + qtype)
X8 = {Q.Q4_0: 1002, Q.Q4_1: 1003, Q.Q5_0: 1006, Q.Q8_0: 1008, Q.Q4_K: 1012, Q.Q6_K: 1014}


def repack_x8(data: np.ndarray | Sequence[np.ndarray], qtype: Q,
              out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(rows, bytes_per_row) blocks, or parts of them whose rows follow one another (a fused linear's
    shards, so they need no concatenated copy) -> ((ceil(rows / 8), group record bytes) records, X8 code).
    out: a writable array of records_shape's shape to write them into (a map of the record file) instead of
    new memory.

    One pass in the native extension (csrc/repack.cpp), without the GIL: a start regroups every linear it
    runs (Qwen2.5-Coder-0.5B: 485 MB of blocks, 1.75 s as numpy strided copies on one thread here)."""
    if qtype not in X8:
        raise ValueError(f"GGUF type {Q(qtype).name} has no X8 records")
    parts = [np.ascontiguousarray(p) for p in ([data] if isinstance(data, np.ndarray) else data)]
    if out is None:
        return build.load().repack_x8(parts, int(qtype)).numpy(), X8[qtype]
    build.load().repack_x8_into(parts, int(qtype), out)
    return out, X8[qtype]


def records_shape(data: np.ndarray | Sequence[np.ndarray], qtype: Q) -> tuple[int, int]:
    """(groups of 8 rows, bytes a group) of repack_x8's records of `data` (blocks, or parts of them)."""
    parts = [data] if isinstance(data, np.ndarray) else list(data)
    return tuple(build.load().records_shape(sum(p.shape[0] for p in parts), parts[0].shape[1], int(qtype)))
