"""Regroup Q4_0 / Q4_1 / Q8_0 block rows 8 at a time (the X8 records of csrc/quant_kernels.h).

Every byte is kept, only moved: a group's record for block b holds the 8 rows' scales side by side,
then their quant bytes 4 at a time, so a 256-bit lane is one row and the kernel needs no horizontal
sums. Rows are padded to a multiple of 8 with zero blocks (scale 0: they add nothing, and are never
written out).

    plain:  row r, block b = [d | (m) | qs[0..15] or qs[0..31]]
    X8:     group g, block b = [d of rows 8g..8g+7 | (m of them) | qs[4j..4j+3] of each row, j = 0, 1, ...]
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

# qtype -> (X8 code, bytes of the scale fields before qs, bytes of qs per block)
X8 = {Q.Q4_0: (1002, 2, 16), Q.Q4_1: (1003, 4, 16), Q.Q8_0: (1008, 2, 32)}


def repack_x8(data: np.ndarray, qtype: Q) -> tuple[np.ndarray, int]:
    """(rows, bytes_per_row) blocks -> ((ceil(rows / 8), bytes_per_row * 8) records, X8 code)."""
    code, head, qs_bytes = X8[qtype]
    rows, row_bytes = data.shape
    block = head + qs_bytes
    nb = row_bytes // block
    groups = -(-rows // 8)
    padded = np.zeros((groups * 8, nb, block), dtype=np.uint8)
    padded[:rows] = data.reshape(rows, nb, block)
    blocks = padded.reshape(groups, 8, nb, block).transpose(0, 2, 1, 3)       # (G, nb, 8 rows, block)
    fields = [blocks[..., f:f + 2].reshape(groups, nb, 16) for f in range(0, head, 2)]  # d (, m) of 8 rows
    qs = blocks[..., head:].reshape(groups, nb, 8, qs_bytes // 4, 4)           # (G, nb, r, j, t)
    qs = qs.transpose(0, 1, 3, 2, 4).reshape(groups, nb, 8 * qs_bytes)        # (G, nb, j, r, t)
    records = np.concatenate(fields + [qs], axis=-1)                          # (G, nb, 8 * block)
    return np.ascontiguousarray(records.reshape(groups, nb * 8 * block)), code
