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

import numpy as np
from gguf import GGMLQuantizationType as Q

# qtype -> X8 code (1000 + qtype)
X8 = {Q.Q4_0: 1002, Q.Q4_1: 1003, Q.Q5_0: 1006, Q.Q8_0: 1008, Q.Q4_K: 1012, Q.Q6_K: 1014}
# 32-input formats: qtype -> (widths of the fields before qs, bytes of qs per block)
_SMALL = {Q.Q4_0: ((2,), 16), Q.Q4_1: ((2, 2), 16), Q.Q5_0: ((2, 4), 16), Q.Q8_0: ((2,), 32)}
_K_BLOCK = {Q.Q4_K: 144, Q.Q6_K: 210}
# Q5_0: stored bit 8t + s <- original qh bit of the input step s reads from byte t
_QH_SOURCE = np.array([4 * s + t if s < 4 else 16 + 4 * (s - 4) + t for t in range(4) for s in range(8)])


def repack_x8(data: np.ndarray, qtype: Q) -> tuple[np.ndarray, int]:
    """(rows, bytes_per_row) blocks -> ((ceil(rows / 8), group record bytes) records, X8 code)."""
    block = _K_BLOCK.get(qtype) or sum(_SMALL[qtype][0]) + _SMALL[qtype][1]
    rows, row_bytes = data.shape
    nb = row_bytes // block
    groups = -(-rows // 8)
    padded = np.zeros((groups * 8, nb, block), dtype=np.uint8)
    padded[:rows] = data.reshape(rows, nb, block)
    blocks = padded.reshape(groups, 8, nb, block).transpose(0, 2, 1, 3)       # (G, nb, 8 rows, block)
    fields = _k_fields(blocks, qtype) if qtype in _K_BLOCK else _small_fields(blocks, qtype)
    records = np.concatenate(fields, axis=-1)                                 # (G, nb, record)
    return np.ascontiguousarray(records.reshape(groups, -1)), X8[qtype]


def _by_step(q: np.ndarray) -> np.ndarray:
    """(G, nb, 8 rows, bytes) quant bytes -> (G, nb, bytes * 8): chunks of 32 bytes, in each 4 bytes per row
    per step: [chunk c][step s][row r][byte t] = row r's byte 32c + 4s + t (bytes 4j + t when < 32 bytes)."""
    g, nb, _, n = q.shape
    steps = min(n, 32) // 4
    q = q.reshape(g, nb, 8, n // (4 * steps), steps, 4)                       # (G, nb, r, c, s, t)
    return q.transpose(0, 1, 3, 4, 2, 5).reshape(g, nb, 8 * n)


def _side_by_side(f: np.ndarray) -> np.ndarray:
    """(G, nb, 8 rows, fields of w bytes) -> (G, nb, fields * 8 * w): field k of rows 0..7, then k + 1, ..."""
    return f.transpose(0, 1, 3, 2).reshape(f.shape[0], f.shape[1], -1)


def _small_fields(blocks: np.ndarray, qtype: Q) -> list[np.ndarray]:
    widths, qs_bytes = _SMALL[qtype]
    head = sum(widths)
    g, nb = blocks.shape[:2]
    if qtype == Q.Q5_0:
        blocks = blocks.copy()
        qh = blocks[..., 2:6].copy().view("<u4")[..., 0]                         # (G, nb, 8)
        bits = (qh[..., None] >> _QH_SOURCE.astype(np.uint32)) & 1               # (G, nb, 8, 32): new bit i
        blocks[..., 2:6] = (bits << np.arange(32, dtype=np.uint32)).sum(-1, dtype=np.uint32)[..., None].view(np.uint8)
    starts = np.cumsum((0,) + widths)
    fields = [blocks[..., a:b].reshape(g, nb, 8 * (b - a)) for a, b in zip(starts[:-1], starts[1:])]
    return fields + [_by_step(blocks[..., head:])]


def _k_fields(blocks: np.ndarray, qtype: Q) -> list[np.ndarray]:
    g, nb = blocks.shape[:2]
    if qtype == Q.Q6_K:   # ql[128] qh[64] scales[16] d -> d[8] | sc[16][8] | ql by step | qh by step
        return [blocks[..., 208:210].reshape(g, nb, 16), _side_by_side(blocks[..., 192:208]),
                _by_step(blocks[..., :128]), _by_step(blocks[..., 128:192])]
    s = blocks[..., 4:16].astype(np.uint8)   # Q4_K: d dmin scales[12] qs[128] -> d[8] | dmin[8] | sc[8][8] | mn[8][8] | qs
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    return [blocks[..., 0:2].reshape(g, nb, 16), blocks[..., 2:4].reshape(g, nb, 16), _side_by_side(sc),
            _side_by_side(mn), _by_step(blocks[..., 16:])]
