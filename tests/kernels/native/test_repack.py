"""X8 records: the native one-pass regrouping (csrc/repack.cpp) against an independent numpy reference that
builds each field of repack.py's layout with strided copies; and the kernels read either the same."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.native import build
from haltwise.kernels.native.repack import X8, records_shape, repack_x8

pytestmark = pytest.mark.skipif(build.load() is None, reason="native kernels unavailable")

BLOCK_BYTES = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q5_0: 22, Q.Q8_0: 34, Q.Q4_K: 144, Q.Q6_K: 210}


@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
@pytest.mark.parametrize("rows", [1, 7, 8, 9, 23])
@pytest.mark.parametrize("blocks", [1, 3])
def test_native_records_are_the_reference_records_byte_for_byte(qtype, rows, blocks):
    data = np.random.default_rng(rows * 7 + blocks).integers(0, 256, (rows, blocks * BLOCK_BYTES[qtype]),
                                                              dtype=np.uint8)
    records, code = repack_x8(data, qtype)
    expected, expected_code = reference_x8(data, qtype)
    assert code == expected_code == X8[qtype]
    assert records.shape == expected.shape and records.dtype == np.uint8
    assert np.array_equal(records, expected)


def test_a_read_only_map_is_read_and_left_as_it_was():
    data = np.random.default_rng(0).integers(0, 256, (16, 2 * 34), dtype=np.uint8)
    frozen = data.copy()
    frozen.flags.writeable = False                 # as a GGUF file's mapped tensor
    records, _ = repack_x8(frozen, Q.Q8_0)
    assert np.array_equal(records, reference_x8(data, Q.Q8_0)[0]) and np.array_equal(frozen, data)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
@pytest.mark.parametrize("cuts", [(8, 16), (3,), (5, 6, 13), (0, 23)])
def test_parts_are_regrouped_as_their_rows_concatenated(qtype, cuts):
    """A fused linear's shards go in as parts; a group of 8 rows may straddle two or three of them."""
    data = np.random.default_rng(len(cuts)).integers(0, 256, (23, 2 * BLOCK_BYTES[qtype]), dtype=np.uint8)
    parts = np.split(data, cuts)
    records, code = repack_x8(parts, qtype)
    assert code == X8[qtype] and np.array_equal(records, reference_x8(data, qtype)[0])


@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
def test_records_written_into_a_given_buffer_are_the_same_bytes(qtype):
    """repack_x8(..., out): the records written straight into a map of the record file (record_cache.py)."""
    parts = np.split(np.random.default_rng(5).integers(0, 256, (21, 2 * BLOCK_BYTES[qtype]), dtype=np.uint8), [9])
    out = np.full(records_shape(parts, qtype), 0xAB, dtype=np.uint8)
    written, code = repack_x8(parts, qtype, out)
    assert written is out and code == X8[qtype] and np.array_equal(out, repack_x8(parts, qtype)[0])
    with pytest.raises(ValueError, match="exactly"):
        repack_x8(parts, qtype, np.zeros((out.shape[0], out.shape[1] - 1), dtype=np.uint8))


def test_parts_of_different_row_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        repack_x8([np.zeros((8, 34), dtype=np.uint8), np.zeros((8, 68), dtype=np.uint8)], Q.Q8_0)


def test_a_type_without_records_or_a_ragged_row_is_refused():
    with pytest.raises(ValueError, match="Q2_K"):
        repack_x8(np.zeros((8, 84), dtype=np.uint8), Q.Q2_K)
    with pytest.raises(ValueError, match="whole number of blocks"):
        repack_x8(np.zeros((8, 35), dtype=np.uint8), Q.Q8_0)


# ---- the numpy reference ----------------------------------------------------------------------------
# 32-input formats: qtype -> (widths of the fields before qs, bytes of qs per block)
_SMALL = {Q.Q4_0: ((2,), 16), Q.Q4_1: ((2, 2), 16), Q.Q5_0: ((2, 4), 16), Q.Q8_0: ((2,), 32)}
_K_BLOCK = {Q.Q4_K: 144, Q.Q6_K: 210}
# Q5_0: stored bit 8t + s <- original qh bit of the input step s reads from byte t
_QH_SOURCE = np.array([4 * s + t if s < 4 else 16 + 4 * (s - 4) + t for t in range(4) for s in range(8)])


def reference_x8(data: np.ndarray, qtype: Q) -> tuple[np.ndarray, int]:
    """The records as numpy strided copies, one field at a time (the layout of repack.py's docstring)."""
    block = _K_BLOCK.get(qtype) or sum(_SMALL[qtype][0]) + _SMALL[qtype][1]
    rows, row_bytes = data.shape
    nb = row_bytes // block
    groups = -(-rows // 8)
    if rows % 8:
        data = np.concatenate([data, np.zeros((groups * 8 - rows, row_bytes), dtype=np.uint8)])
    src = np.ascontiguousarray(data).reshape(groups, 8, nb, block)          # a view: group, row, block, byte
    fields = _k_fields(src, qtype) if qtype in _K_BLOCK else _small_fields(src, qtype)
    records = np.empty((groups, nb, sum(8 * width for width, _ in fields)), dtype=np.uint8)
    offset = 0
    for width, write in fields:
        write(records[:, :, offset: offset + 8 * width])
        offset += 8 * width
    return records.reshape(groups, -1), X8[qtype]


# A field is (bytes per row, write(dst)): dst is its (G, nb, 8 x width) slice of the records.
_Field = tuple[int, Callable[[np.ndarray], None]]


def _rows(src: np.ndarray, start: int, width: int) -> _Field:
    """Bytes start..start+width of each row's block, row after row: [r][i] = row r's byte start + i."""
    def write(dst: np.ndarray) -> None:
        g, nb = dst.shape[:2]
        _words(dst.reshape(g, nb, 8, width))[...] = _words(src[..., start:start + width]).transpose(0, 2, 1, 3)
    return width, write


def _side_by_side(values: np.ndarray) -> _Field:
    """(G, 8 rows, nb, k) one-byte values -> [k][r]: value k of rows 0..7, then k + 1, ..."""
    def write(dst: np.ndarray) -> None:
        g, nb = dst.shape[:2]
        dst.reshape(g, nb, values.shape[-1], 8)[...] = values.transpose(0, 2, 3, 1)
    return values.shape[-1], write


def _by_step(src: np.ndarray, start: int, n: int) -> _Field:
    """n quant bytes from `start`: chunks of 32 bytes, in each 4 bytes per row per step:
    [chunk c][step s][row r][byte t] = row r's byte 32c + 4s + t (bytes 4j + t when fewer than 32)."""
    steps = min(n, 32) // 4

    def write(dst: np.ndarray) -> None:
        g, nb = dst.shape[:2]
        words = src[..., start:start + n].view(np.uint32).reshape(g, 8, nb, n // (4 * steps), steps)  # (G, r, nb, c, s)
        dst.reshape(g, nb, -1, steps, 8, 4).view(np.uint32)[..., 0][...] = words.transpose(0, 2, 3, 4, 1)
    return n, write


def _words(a: np.ndarray) -> np.ndarray:
    """A last axis of 2 or 4 bytes as one uint16 / uint32 (numpy copies whole words, not bytes)."""
    return a.view({2: np.uint16, 4: np.uint32}.get(a.shape[-1], np.uint8)) if a.shape[-1] in (2, 4) else a


def _small_fields(src: np.ndarray, qtype: Q) -> list[_Field]:
    widths, qs_bytes = _SMALL[qtype]
    starts = np.cumsum((0,) + widths)
    fields = [_rows(src, int(a), w) for a, w in zip(starts[:-1], widths)]
    if qtype == Q.Q5_0:
        fields[1] = (4, _q5_high_bits(src))
    return fields + [_by_step(src, int(starts[-1]), qs_bytes)]


def _q5_high_bits(src: np.ndarray) -> Callable[[np.ndarray], None]:
    """Q5_0's 32-bit qh of each row, its bits reordered (module docstring), row after row."""
    def write(dst: np.ndarray) -> None:
        g, nb = dst.shape[:2]
        qh = np.ascontiguousarray(src[..., 2:6]).view(np.uint32)[..., 0]              # (G, r, nb)
        moved = np.zeros_like(qh)
        for byte in range(4):                   # each source byte's 8 bits land through one 256-entry table
            moved |= _QH_TABLES[byte][(qh >> (8 * byte)) & 0xFF]
        dst.reshape(g, nb, 8, 4).view(np.uint32)[..., 0][...] = moved.transpose(0, 2, 1)
    return write


def _k_fields(src: np.ndarray, qtype: Q) -> list[_Field]:
    if qtype == Q.Q6_K:   # ql[128] qh[64] scales[16] d -> d[8] | sc[16][8] | ql by step | qh by step
        return [_rows(src, 208, 2), _side_by_side(src[..., 192:208]), _by_step(src, 0, 128), _by_step(src, 128, 64)]
    s = src[..., 4:16]    # Q4_K: d dmin scales[12] qs[128] -> d[8] | dmin[8] | sc[8][8] | mn[8][8] | qs
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    return [_rows(src, 0, 2), _rows(src, 2, 2), _side_by_side(sc), _side_by_side(mn), _by_step(src, 16, 128)]


def _qh_tables() -> list[np.ndarray]:
    """Per source byte of qh: its 256 values -> the stored word's bits they become."""
    dest = np.empty(32, dtype=np.int64)
    dest[_QH_SOURCE] = np.arange(32)                 # stored bit i <- source bit _QH_SOURCE[i]
    values = np.arange(256, dtype=np.uint32)
    return [sum(((values >> k) & 1) << np.uint32(dest[8 * byte + k]) for k in range(8)).astype(np.uint32)
            for byte in range(4)]


_QH_TABLES = _qh_tables()
