"""The native GGUF-block kernels (csrc/) against gguf's own dequantization and a float matmul.

Two bounds per case, for every ISA path this CPU can run (the portable path always; AVX2 where the
CPU reports avx2+fma+f16c, AVX-VNNI and AVX512-VNNI where it reports their flags too; each skipped with
that reason elsewhere):
  * kernel logic: against x quantized to q8 exactly as the kernel does, then multiplied in float64,
    the result agrees to 1e-5 of the largest sum of |products| (only float summation order differs, and
    its error grows with the terms, not with a result that may cancel: max|y| failed a Q5_0 case at
    1.15e-5);
  * the q8 activation error: against float32 x, every output within the analytic bound
    sum_k |w_k| * step_k / 2 (step = the block's max|x| / 127; rounding moves an input by at most half a
    step), and, on the models' real widths, within TOLERANCE of max|y| (a relative bound is meaningless
    for a single short dot product, whose result may cancel to nearly 0).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import SUPPORTED, TOLERANCE
from haltwise.kernels.native.repack import X8, repack_x8
from tests.kernels.native.blocks import BLOCK, quantize_q8, random_blocks

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason=f"native kernels unavailable: {build.failure()}")
ISAS = ["scalar", "avx2", "avxvnni", "avx512vnni"]


def _isa_or_skip(isa: str) -> None:
    if isa not in native.isas():
        pytest.skip(f"this CPU cannot run the {isa} path (it needs avx2, fma and f16c; "
                    "avxvnni also avx_vnni; avx512vnni also avx512f, avx512vl and avx512_vnni)")


def _relative(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))


def _check(qtype: Q, rows: int, blocks: int, m: int, isa: str, seed: int, relative: bool = False) -> None:
    rng = np.random.default_rng(seed)
    cols = blocks * BLOCK[qtype][0]
    data, w = random_blocks(qtype, rows, cols, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    y = native.gemm([torch.from_numpy(data)], [int(qtype)], [rows], torch.from_numpy(x), isa).numpy()
    assert y.shape == (m, rows)
    xq = quantize_q8(x).astype(np.float64)
    exact_ref = xq @ w.T.astype(np.float64)
    magnitude = (np.abs(xq) @ np.abs(w.astype(np.float64)).T).max()      # float32 sums err relative to it
    assert np.abs(y - exact_ref).max() <= 1e-5 * max(magnitude, 1e-30)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    step = np.repeat(np.abs(x).reshape(m, -1, 32).max(-1) / 127.0, 32, axis=1)           # (m, cols)
    bound = (step / 2) @ np.abs(w.astype(np.float64)).T                                   # (m, rows)
    assert np.all(np.abs(y - ref) <= bound + 1e-5 * np.abs(ref).max())
    if relative:
        assert _relative(y, ref) < TOLERANCE


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", SUPPORTED, ids=lambda q: q.name)
@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 40), blocks=st.integers(1, 3), m=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_blocks_match_dequantized_matmul(qtype: Q, isa: str, rows: int, blocks: int, m: int, seed: int) -> None:
    _isa_or_skip(isa)
    _check(qtype, rows, blocks, m, isa, seed)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
def test_smollm2_shapes(qtype: Q, isa: str) -> None:
    """SmolLM2's real widths (576 and 1536 inputs), decode and batched row counts."""
    _isa_or_skip(isa)
    for cols, m in ((576, 1), (1536, 5), (576, 32)):
        _check(qtype, 96, cols // 32, m, isa, seed=cols + m, relative=True)


@pytest.mark.parametrize("isa", ISAS)
def test_mixed_shards_fill_their_columns(isa: str) -> None:
    """A fused weight whose shards differ in type (Q4_K_M files mix Q4_K and Q6_K) is one call."""
    _isa_or_skip(isa)
    rng = np.random.default_rng(7)
    parts = [random_blocks(Q.Q4_K, 24, 512, rng), random_blocks(Q.Q6_K, 8, 512, rng), random_blocks(Q.Q8_0, 16, 512, rng)]
    x = rng.standard_normal((3, 512)).astype(np.float32)
    y = native.gemm([torch.from_numpy(d) for d, _ in parts], [int(Q.Q4_K), int(Q.Q6_K), int(Q.Q8_0)],
                    [24, 8, 16], torch.from_numpy(x), isa).numpy()
    w = np.concatenate([v for _, v in parts])
    assert _relative(y, quantize_q8(x).astype(np.float64) @ w.T.astype(np.float64)) < 1e-5


def test_isa_paths_agree() -> None:
    """Where the CPU runs AVX2, it and the portable path compute the same integer sums."""
    _isa_or_skip("avx2")
    rng = np.random.default_rng(3)
    for qtype in SUPPORTED:
        data, _ = random_blocks(qtype, 33, 512, rng)
        x = torch.from_numpy(rng.standard_normal((6, 512)).astype(np.float32))
        a = native.gemm([torch.from_numpy(data)], [int(qtype)], [33], x, "avx2").numpy()
        b = native.gemm([torch.from_numpy(data)], [int(qtype)], [33], x, "scalar").numpy()
        assert _relative(a, b) < 1e-5, qtype.name


def test_zero_rows_and_zero_activations() -> None:
    rng = np.random.default_rng(1)
    data, _ = random_blocks(Q.Q4_1, 8, 64, rng)
    w = torch.from_numpy(data)
    assert native.gemm([w], [int(Q.Q4_1)], [8], torch.zeros(0, 64)).shape == (0, 8)
    assert torch.equal(native.gemm([w], [int(Q.Q4_1)], [8], torch.zeros(2, 64)), torch.zeros(2, 8))


def test_bad_inputs_raise() -> None:
    rng = np.random.default_rng(2)
    data, _ = random_blocks(Q.Q4_1, 4, 64, rng)
    w = torch.from_numpy(data)
    with pytest.raises(RuntimeError, match="bytes per row"):
        native.gemm([w], [int(Q.Q4_1)], [4], torch.zeros(1, 96))
    with pytest.raises(RuntimeError, match="not supported"):
        native.gemm([w], [99], [4], torch.zeros(1, 64))
    with pytest.raises(RuntimeError, match="multiple of 32"):
        native.gemm([w], [int(Q.Q4_1)], [4], torch.zeros(1, 40))
    with pytest.raises(RuntimeError, match="stores 4 rows"):
        native.gemm([w], [int(Q.Q4_1)], [5], torch.zeros(1, 64))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
@settings(max_examples=10, deadline=None)
@given(shard_rows=st.lists(st.integers(1, 45), min_size=1, max_size=3), m=st.integers(1, 9),
       threads=st.sampled_from([1, 2, 3]), seed=st.integers(0, 2**31))
def test_interleaved_records_match(qtype: Q, isa: str, shard_rows: list[int], m: int, threads: int, seed: int) -> None:
    """Row-interleaved (X8) records give the plain blocks' numbers for any row counts (padding never
    written) and any thread split (tasks cut shards at multiples of 8)."""
    _isa_or_skip(isa)
    rng = np.random.default_rng(seed)
    cols = 3 * BLOCK[qtype][0] if BLOCK[qtype][0] == 32 else 2 * BLOCK[qtype][0]
    parts = [random_blocks(qtype, n, cols, rng) for n in shard_rows]
    packed = [repack_x8(d, qtype) for d, _ in parts]
    x = rng.standard_normal((m, cols)).astype(np.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        y = native.gemm([torch.from_numpy(p) for p, _ in packed], [c for _, c in packed], shard_rows,
                        torch.from_numpy(x), isa).numpy()
    finally:
        torch.set_num_threads(before)
    w = np.concatenate([v for _, v in parts])
    assert y.shape == (m, sum(shard_rows))
    assert _relative(y, quantize_q8(x).astype(np.float64) @ w.T.astype(np.float64)) < 1e-5


@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 40), blocks=st.integers(1, 3), m=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_interleaved_records_match_the_row_kernels(qtype: Q, rows: int, blocks: int, m: int, seed: int) -> None:
    """Random blocks -> X8 records: every ISA path this CPU runs gives the numbers of the portable per-row
    kernel on the plain blocks (same integer sums; only float rounding order may differ)."""
    rng = np.random.default_rng(seed)
    cols = blocks * BLOCK[qtype][0]
    data, _ = random_blocks(qtype, rows, cols, rng)
    packed, code = repack_x8(data, qtype)
    x = torch.from_numpy(rng.standard_normal((m, cols)).astype(np.float32))
    x[:, 0] *= 30.0                                     # an outlier channel
    reference = native.gemm([torch.from_numpy(data)], [int(qtype)], [rows], x, "scalar").numpy()
    for isa in native.isas():
        y = native.gemm([torch.from_numpy(packed)], [code], [rows], x, isa).numpy()
        assert _relative(y, reference) < 1e-5, isa


# The X8 kernels change loop order with the activation rows (x8_records.inc, kx8_records.inc): the tile
# order (tiles of 4 rows, of 8 on the VNNI paths, then 3, 2 or 1), then the span order (spans of up to 64
# rows) from 16 rows for Q5_0 and from 8 for Q6_K; the steps order for Q8_0 on AVX2. These row counts run
# each order and cross each boundary. 149 weight rows: two runs of 8 groups (the tiles visit a run's
# groups in turn) and a ragged third run whose last group is ragged too.
LOOP_ORDER_ROWS = (7, 8, 15, 16, 17, 64, 65, 70)
WEIGHT_ROWS = 149


@pytest.mark.parametrize("m", LOOP_ORDER_ROWS)
@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
def test_interleaved_records_match_in_every_loop_order(qtype: Q, m: int) -> None:
    """Many activation rows: every ISA path gives the portable per-row kernel's numbers on the plain
    blocks, and each row exactly the bits it gets computed alone (one row takes the tile order). One
    thread, so that one kernel call gets every weight row and its runs of groups."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _loop_orders_match(qtype, m)
    finally:
        torch.set_num_threads(before)


def _loop_orders_match(qtype: Q, m: int) -> None:
    rng = np.random.default_rng(1000 * int(qtype) + m)
    cols = 2 * max(BLOCK[qtype][0], 64)
    data, _ = random_blocks(qtype, WEIGHT_ROWS, cols, rng)
    packed, code = repack_x8(data, qtype)
    x = torch.from_numpy(rng.standard_normal((m, cols)).astype(np.float32))
    x[:, 5] *= 30.0                                     # an outlier channel
    reference = native.gemm([torch.from_numpy(data)], [int(qtype)], [WEIGHT_ROWS], x, "scalar").numpy()
    for isa in native.isas():
        y = native.gemm([torch.from_numpy(packed)], [code], [WEIGHT_ROWS], x, isa)
        assert _relative(y.numpy(), reference) < 1e-5, isa
        for i in (0, m // 2, m - 1):
            alone = native.gemm([torch.from_numpy(packed)], [code], [WEIGHT_ROWS], x[i:i + 1], isa)
            assert torch.equal(y[i:i + 1], alone), f"{isa}: row {i} of {m}"


@pytest.mark.parametrize("act", [0, 1], ids=["silu", "gelu_tanh"])
def test_gated_activation_has_the_portable_bits_on_every_path(act: int) -> None:
    """The decode stack's gated activation (decode_math.inc; the AVX2 path runs 8 lanes at a time) gives the
    portable path's bits for every input -- widths with tails of 1..7, values past fast_exp's clamp,
    zeros of both signs, infinities and NaN -- and the activation's value within float rounding."""
    special = torch.tensor([0.0, -0.0, 95.0, -95.0, 200.0, -200.0, float("inf"), float("-inf"), float("nan"), 1e-30])
    for width in (8, 13, 64, 71):
        gate = torch.randn(64, width, generator=torch.Generator().manual_seed(width)) * 4.0
        gate[0, :min(width, special.numel())] = special[:width]
        up = torch.randn(64, width, generator=torch.Generator().manual_seed(width + 1))
        gu = torch.cat([gate, up], dim=1)
        reference = native._gated_rows(gu, act, "scalar")
        for isa in native.isas():
            y = native._gated_rows(gu, act, isa)
            assert torch.equal(y.view(torch.int32), reference.view(torch.int32)), f"{isa}, width {width}"
        f = torch.nn.functional
        exact = (f.silu(gate) if act == 0 else f.gelu(gate, approximate="tanh")) * up
        finite = gate.abs() < 50.0
        assert torch.allclose(reference[finite], exact[finite], rtol=1e-5, atol=1e-6)
