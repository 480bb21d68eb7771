"""Regroup Q4_0 / Q4_1 / Q5_0 / Q8_0 block rows 8 at a time (the X8 records of csrc/quant_kernels.h).

Every byte is kept, only moved: a group's record for block b holds the 8 rows' scales side by side,
then their quant bytes 4 at a time, so a 256-bit lane is one row and the kernel needs no horizontal
sums. Rows are padded to a multiple of 8 with zero blocks (scale 0: they add nothing, and are never
written out).

    plain:  row r, block b = [d | (m) or (qh) | qs[0..15] or qs[0..31]]
    X8:     group g, block b = [d of rows 8g..8g+7 | (m or qh of them) | qs[4j..4j+3] of each row, j = 0, 1, ...]

Q5_0's high bits are reordered within each row's 32-bit qh so a kernel step finds them with one shift:
bit 8t + s of the stored word is the high bit of the input that step s reads from byte t (step s < 4:
input 4s + t, the low nibbles; step s >= 4: input 16 + 4(s - 4) + t, the high nibbles).
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

# qtype -> (X8 code, widths of the fields before qs, bytes of qs per block)
X8 = {Q.Q4_0: (1002, (2,), 16), Q.Q4_1: (1003, (2, 2), 16), Q.Q5_0: (1006, (2, 4), 16), Q.Q8_0: (1008, (2,), 32)}
# Q5_0: stored bit 8t + s <- original qh bit of the input step s reads from byte t
_QH_SOURCE = np.array([4 * s + t if s < 4 else 16 + 4 * (s - 4) + t for t in range(4) for s in range(8)])


def repack_x8(data: np.ndarray, qtype: Q) -> tuple[np.ndarray, int]:
    """(rows, bytes_per_row) blocks -> ((ceil(rows / 8), bytes_per_row * 8) records, X8 code)."""
    code, widths, qs_bytes = X8[qtype]
    head = sum(widths)
    rows, row_bytes = data.shape
    block = head + qs_bytes
    nb = row_bytes // block
    groups = -(-rows // 8)
    padded = np.zeros((groups * 8, nb, block), dtype=np.uint8)
    padded[:rows] = data.reshape(rows, nb, block)
    blocks = padded.reshape(groups, 8, nb, block).transpose(0, 2, 1, 3)       # (G, nb, 8 rows, block)
    if qtype == Q.Q5_0:
        blocks = blocks.copy()
        qh = blocks[..., 2:6].copy().view("<u4")[..., 0]                         # (G, nb, 8)
        bits = (qh[..., None] >> _QH_SOURCE.astype(np.uint32)) & 1               # (G, nb, 8, 32): new bit i
        blocks[..., 2:6] = (bits << np.arange(32, dtype=np.uint32)).sum(-1, dtype=np.uint32)[..., None].view(np.uint8)
    starts = np.cumsum((0,) + widths)
    fields = [blocks[..., a:b].reshape(groups, nb, 8 * (b - a)) for a, b in zip(starts[:-1], starts[1:])]
    qs = blocks[..., head:].reshape(groups, nb, 8, qs_bytes // 4, 4)           # (G, nb, r, j, t)
    qs = qs.transpose(0, 1, 3, 2, 4).reshape(groups, nb, 8 * qs_bytes)        # (G, nb, j, r, t)
    records = np.concatenate(fields + [qs], axis=-1)                          # (G, nb, 8 * block)
    return np.ascontiguousarray(records.reshape(groups, nb * 8 * block)), code
