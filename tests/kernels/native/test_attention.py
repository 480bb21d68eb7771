"""The decode stack's paged attention (csrc/decode_math.inc; the AVX2 path in attend_avx2.inc runs 8
lanes at a time, the AVX-512 one sums weighted values 16 at a time: kernels_attend_avx512.cpp): the
portable path's bits on every path, and softmax(q k^T) v within float rounding."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.kernels.native import build

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason=f"native kernels unavailable: {build.failure()}")
BLOCK = 4


def paged(values: torch.Tensor, fmt: str, order: torch.Tensor, kvh: int, kv_heads: int) -> torch.Tensor:
    """values (n, D) float32 -> a cache (blocks, BLOCK, kv_heads, D[+4]) holding them at kv head `kvh`,
    position p in block order[p // BLOCK]; other heads and spare blocks hold noise."""
    n, D = values.shape
    blocks = int(order.max()) + 2
    noise = torch.randn(blocks, BLOCK, kv_heads, D)
    if fmt == "float32":
        cache = noise
        stored = values
    elif fmt == "bfloat16":
        cache, stored = noise.bfloat16(), values.bfloat16()
    else:   # int8: D values then the row's float32 scale, max|x| / 127
        cache = torch.zeros(blocks, BLOCK, kv_heads, D + 4, dtype=torch.int8)
        scale = values.abs().amax(dim=1, keepdim=True) / 127
        q = torch.where(scale > 0, torch.round(values / scale), torch.zeros_like(values)).to(torch.int8)
        stored = torch.cat([q, scale.view(torch.int8).reshape(n, 4)], dim=1)
    for p in range(n):
        cache[order[p // BLOCK], p % BLOCK, kvh] = stored[p]
    return cache


def dequantized(cache: torch.Tensor, order: torch.Tensor, kvh: int, n: int, D: int) -> torch.Tensor:
    rows = torch.stack([cache[order[p // BLOCK], p % BLOCK, kvh] for p in range(n)])
    if rows.dtype == torch.int8:
        return rows[:, :D].float() * rows[:, D:].contiguous().view(torch.float32)
    return rows.float()


def int8_queries(q: torch.Tensor) -> torch.Tensor:
    """Query vectors as int8 scores see them (decode_math.inc quantize_query): each quantized as a K row is
    (scale max|q| / 127, q / scale rounded to nearest even), then scaled back."""
    scale = q.abs().amax(dim=1, keepdim=True) / 127
    return torch.where(scale > 0, torch.round(q / scale), torch.zeros_like(q)) * scale


def with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over each row of scores, or over [scores, sink] with the sink's share dropped (gpt-oss)."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    return torch.softmax(torch.cat([scores, sinks.to(scores.dtype)[:, None]], dim=-1), dim=-1)[:, :-1]


def int8_attention(q: torch.Tensor, keys: torch.Tensor, v_cache: torch.Tensor, order: torch.Tensor, kvh: int,
                   n: int, start: int, scale: float, block: int = 128, sinks: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """Attention against an int8 KV cache as decode_math.inc defines it, in float64: int8 queries; for each
    128 positions of the sequence (counted from position 0), the weights times the V rows' scales rounded
    to int16 steps of their largest / 32767, times the V rows' integers (attend_query_q8.inc)."""
    rows = torch.stack([v_cache[order[p // BLOCK], p % BLOCK, kvh] for p in range(n)])[start:]
    D = rows.shape[1] - 4
    ints, row_scales = rows[:, :D].double(), rows[:, D:].contiguous().view(torch.float32).double()[:, 0]
    p = with_sinks(int8_queries(q).double() @ keys.double().T * scale, sinks)
    out = torch.zeros(q.shape[0], D, dtype=torch.float64)
    for b0 in range(start // block * block, n, block):
        lo, hi = max(b0, start) - start, min(b0 + block, n) - start
        u = p[:, lo:hi] * row_scales[lo:hi]
        step = u.amax(dim=1, keepdim=True) / 32767
        out += torch.round(u / step) * step @ ints[lo:hi]
    return out


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["float32", "bfloat16", "int8"]), st.sampled_from([1, 3, 4, 7, 8, 9, 16]),
       st.sampled_from([8, 64, 72, 256]), st.integers(1, 70), st.integers(0, 69), st.integers(0, 2**16))
def test_every_path_has_the_portable_bits(fmt, G, D, n, start, seed):
    """Query heads 1-16 (one and several groups of 8), head sizes with and without a multiple of 64,
    1-70 positions (softmax tails of 0-7), a window start, each KV format."""
    start = min(start, n - 1)
    gen = torch.Generator().manual_seed(seed)
    kv_heads, kvh = 2, seed % 2
    order = torch.randperm(n // BLOCK + 3, generator=gen)[: -(-n // BLOCK)]
    torch.manual_seed(seed)
    k = paged(torch.randn(n, D, generator=gen) * 3, fmt, order, kvh, kv_heads)
    v = paged(torch.randn(n, D, generator=gen), fmt, order, kvh, kv_heads)
    q = torch.randn(G, D, generator=gen)
    reference = native._attend(q, k, v, order, kvh, start, n, D ** -0.5, "scalar")
    for isa in native.isas():
        out = native._attend(q, k, v, order, kvh, start, n, D ** -0.5, isa)
        assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), isa
    keys, values = (dequantized(c, order, kvh, n, D)[start:] for c in (k, v))
    if fmt == "int8":   # a weight's int16 step may round the other way (fast_exp): up to 5.6e-5 in 300 cases
        exact = int8_attention(q, keys, v, order, kvh, n, start, D ** -0.5)
        assert torch.allclose(reference.double(), exact, rtol=1e-4, atol=2e-4)
    else:
        exact = torch.softmax(q.double() @ keys.double().T * D ** -0.5, dim=-1) @ values.double()
        assert torch.allclose(reference.double(), exact, rtol=1e-4, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["float32", "bfloat16", "int8"]), st.sampled_from([1, 3, 8, 9, 16]), st.sampled_from([8, 64]),
       st.integers(1, 70), st.integers(0, 69), st.floats(-4.0, 8.0), st.integers(0, 2**16))
def test_sinks_join_each_softmax_with_the_portable_bits(fmt, G, D, n, start, level, seed):
    """gpt-oss's attention sinks: each head's logit joins its softmax (the max and the total, no value):
    the portable bits on every path, one row or several, and softmax([q k^T, sink])[:-1] v within rounding.
    `level` moves the sinks from well below the scores to well above them (the max is then a sink's)."""
    start = min(start, n - 1)
    gen = torch.Generator().manual_seed(seed)
    kv_heads, kvh = 2, seed % 2
    order = torch.randperm(n // BLOCK + 3, generator=gen)[: -(-n // BLOCK)]
    k = paged(torch.randn(n, D, generator=gen) * 3, fmt, order, kvh, kv_heads)
    v = paged(torch.randn(n, D, generator=gen), fmt, order, kvh, kv_heads)
    q = torch.randn(G, D, generator=gen)
    sinks = torch.randn(G, generator=gen) + level
    reference = native._attend(q, k, v, order, kvh, start, n, D ** -0.5, "scalar", sinks)
    for isa in native.isas():
        out = native._attend(q, k, v, order, kvh, start, n, D ** -0.5, isa, sinks)
        assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), isa
        rows = native._attend_rows(torch.stack([q, q.flip(0)]), k, v, order, kvh, torch.tensor([start, 0]),
                                   torch.tensor([n, n]), D ** -0.5, isa, sinks)
        assert torch.equal(rows[0].view(torch.int32), reference.view(torch.int32)), isa
    keys, values = (dequantized(c, order, kvh, n, D)[start:] for c in (k, v))
    if fmt == "int8":
        exact = int8_attention(q, keys, v, order, kvh, n, start, D ** -0.5, sinks=sinks.double())
        assert torch.allclose(reference.double(), exact, rtol=1e-4, atol=2e-4)
    else:
        exact = with_sinks(q.double() @ keys.double().T * D ** -0.5, sinks.double()) @ values.double()
        assert torch.allclose(reference.double(), exact, rtol=1e-4, atol=1e-5)
    plain = native._attend(q, k, v, order, kvh, start, n, D ** -0.5, "scalar")
    assert not torch.equal(plain, reference)        # the sinks took their share


def test_scores_past_fast_exp_clamp_and_equal_maxima():
    """Scores far below the max (exp clamps at -87) and ties for the max, including zeros of both signs."""
    D, n, order = 64, 24, torch.arange(6)
    for keys in (torch.zeros(n, D), torch.eye(n, D) * 400.0, -torch.eye(n, D) * 400.0):
        k = paged(keys, "float32", order, 0, 1)
        v = paged(torch.randn(n, D), "float32", order, 0, 1)
        q = torch.ones(3, D)
        q[1] = -0.0
        reference = native._attend(q, k, v, order, 0, 0, n, 1.0, "scalar")
        for isa in native.isas():
            out = native._attend(q, k, v, order, 0, 0, n, 1.0, isa)
            assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), isa
        assert torch.isfinite(reference).all()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["float32", "bfloat16", "int8"]), st.sampled_from([1, 3, 4, 7, 9]), st.sampled_from([8, 64, 72]),
       st.lists(st.tuples(st.integers(1, 60), st.integers(0, 60)), min_size=1, max_size=12),
       st.booleans(), st.integers(0, 2**16))
def test_rows_of_one_sequence_get_each_rows_own_bits(fmt, G, D, spans, prefill, seed):
    """attend_rows: 1-12 rows of one sequence (vectors in groups of 8 that straddle rows) each get
    attend's bits for that row alone. prefill: consecutive positions with a common window (a chunk's
    rows); otherwise any lengths and window starts, so groups have heads and tails of their own."""
    gen = torch.Generator().manual_seed(seed)
    if prefill:
        first, window = spans[0]
        lens = [first + i for i in range(len(spans))]
        starts = [max(0, n - window) if window else 0 for n in lens]
    else:
        lens = [n for n, _ in spans]
        starts = [min(s, n - 1) for n, s in spans]
    n = max(lens)
    kv_heads, kvh = 2, seed % 2
    order = torch.randperm(n // BLOCK + 3, generator=gen)[: -(-n // BLOCK)]
    k = paged(torch.randn(n, D, generator=gen) * 3, fmt, order, kvh, kv_heads)
    v = paged(torch.randn(n, D, generator=gen), fmt, order, kvh, kv_heads)
    q = torch.randn(len(lens), G, D, generator=gen)
    reference = torch.stack([native._attend(q[i], k, v, order, kvh, starts[i], lens[i], D ** -0.5, "scalar")
                             for i in range(len(lens))])
    for isa in native.isas():
        out = native._attend_rows(q, k, v, order, kvh, torch.tensor(starts), torch.tensor(lens), D ** -0.5, isa)
        assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), isa


@pytest.mark.parametrize("fmt", ["float32", "int8"])
@pytest.mark.parametrize("window", [0, 100, 200])
def test_rows_across_position_blocks(fmt, window):
    """Contexts of 250-300 positions go over the vector path's position blocks (128): each row's head,
    common and tail pieces cross block boundaries and still sum in attend's order."""
    gen = torch.Generator().manual_seed(window)
    G, D, n = 3, 64, 300
    order = torch.randperm(n // BLOCK + 3, generator=gen)[: -(-n // BLOCK)]
    k = paged(torch.randn(n, D, generator=gen) * 3, fmt, order, 1, 2)
    v = paged(torch.randn(n, D, generator=gen), fmt, order, 1, 2)
    for lens in ([250 + i for i in range(12)], [300, 129, 128, 127, 260, 1, 255, 256, 257]):
        starts = [max(0, x - window) if window else 0 for x in lens]
        q = torch.randn(len(lens), G, D, generator=gen)
        reference = torch.stack([native._attend(q[i], k, v, order, 1, starts[i], lens[i], 0.125, "scalar")
                                 for i in range(len(lens))])
        for isa in native.isas():
            out = native._attend_rows(q, k, v, order, 1, torch.tensor(starts), torch.tensor(lens), 0.125, isa)
            assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), (isa, lens)
            single = torch.stack([native._attend(q[i], k, v, order, 1, starts[i], lens[i], 0.125, isa)
                                  for i in range(len(lens))])
            assert torch.equal(single.view(torch.int32), reference.view(torch.int32)), (isa, lens)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("n", [40, 64])
def test_a_non_finite_int8_query_gives_nan_for_its_head_alone(bad, n):
    """An int8-scored query holding inf or NaN: that head's output is NaN (as a float dot product's would
    be), the other heads' are finite, with the same bits on every path. n = 64: every score goes through
    the 512-bit exp (its clamps must pass the NaN; at 40 the 8-lane tail's NaN reaches the total anyway)."""
    D, order = 64, torch.arange(16)
    k = paged(torch.randn(n, D) * 3, "int8", order, 0, 1)
    v = paged(torch.randn(n, D), "int8", order, 0, 1)
    q = torch.randn(3, D)
    q[1, 5] = bad
    reference = native._attend(q, k, v, order, 0, 0, n, D ** -0.5, "scalar")
    assert reference[1].isnan().all() and reference[[0, 2]].isfinite().all()
    for isa in native.isas():
        out = native._attend(q, k, v, order, 0, 0, n, D ** -0.5, isa)
        assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), isa
