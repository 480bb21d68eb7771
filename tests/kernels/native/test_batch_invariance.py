"""Batch invariance of the native kernels: a row's outputs are the same bits whatever else is computed.

The default path's determinism rests on this (csrc/decode_stack.cpp, gguf_format.py, dense_format.py):
each row computed alone, inside batches of every size (tile widths 4, 3, 2, 1 and the remainders), with
one thread or two, and on every ISA path this CPU runs, gives identical bits. A kernel that shared a
reduction between rows, or split one across threads, fails here.
"""
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import GGUFNative
from haltwise.kernels.formats import LinearSource, GGUFShard
from haltwise.kernels.native.repack import X8, repack_x8
from tests.kernels.native.blocks import BLOCK, random_blocks

ROW_COUNTS = (1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 64, 257)
QTYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K]


@pytest.fixture(scope="module")
def native():
    module = build.load()
    assert module is not None, build.failure()       # test_native_build.py says why this is not a skip
    return module


def _activations(rows: int, k: int) -> torch.Tensor:
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    x[:, 3] *= 40.0                                    # an outlier channel, as real models have
    return x


def _assert_rows_invariant(run, k: int) -> None:
    big = _activations(max(ROW_COUNTS), k)
    reference = run(big)
    for rows in ROW_COUNTS:
        for start in (0, 5):
            part = big[start:start + rows]
            assert torch.equal(run(part), reference[start:start + part.shape[0]]), f"{rows} rows from {start}"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(run(big), reference), "one thread differs from many"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
def test_block_kernels_are_batch_invariant(native, qtype):
    per_block = BLOCK[qtype][0]
    k, n = 2 * max(per_block, 64), 40                  # 40 rows: X8 groups with a ragged last group
    data, values = random_blocks(qtype, n, k, np.random.default_rng(int(qtype)))
    source = LinearSource("w", torch.from_numpy(values), gguf=[GGUFShard(qtype, data, n)])
    fmt = GGUFNative()
    prepared = fmt.prepare(source)
    assert prepared.qtypes == [X8.get(qtype, int(qtype))]      # the row-interleaved kernels where they exist
    for isa in native.isas():
        _assert_rows_invariant(lambda x: native.gemm(prepared.weights, prepared.qtypes, prepared.rows, x, isa), k)


@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
def test_interleaved_row_bits_do_not_depend_on_its_lane(native, qtype):
    """An X8 record computes all 8 rows of a group side by side: a weight row gives the same bits in every
    lane (rows shifted down by 0..7 others) and whether its group is full or ragged."""
    per_block = BLOCK[qtype][0]
    k, n = 2 * max(per_block, 64), 13
    rng = np.random.default_rng(100 + int(qtype))
    data, _ = random_blocks(qtype, n, k, rng)
    padding, _ = random_blocks(qtype, 7, k, rng)
    x = _activations(6, k)
    for isa in native.isas():
        outputs = []
        for shift in range(8):
            packed, code = repack_x8(np.concatenate([padding[:shift], data]), qtype)
            y = native.gemm([torch.from_numpy(packed)], [code], [shift + n], x, isa)
            outputs.append(y[:, shift:])
        for shift, y in enumerate(outputs):
            assert torch.equal(y, outputs[0]), f"{isa}: rows shifted by {shift} lanes"


def test_dense_kernel_is_batch_invariant(native):
    k = 100                                              # not a multiple of 32: the dot's tail runs too
    w = torch.randn(50, k, generator=torch.Generator().manual_seed(3))
    for isa in native.isas():
        _assert_rows_invariant(lambda x: native.dense(x, w, isa), k)


def test_dense_kernel_handles_a_ragged_tail(native):
    w = torch.randn(9, 100, generator=torch.Generator().manual_seed(4))
    x = torch.randn(3, 100, generator=torch.Generator().manual_seed(5))
    for isa in native.isas():
        y = native.dense(x, w, isa)
        assert (y - x @ w.T).abs().max() <= 2 * 100 * 2.0 ** -24 * (x.abs() @ w.abs().T).max()
