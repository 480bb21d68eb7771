"""The KV cache's stored forms (models/kv_codec.py): round trips within each dtype's bound, row by row."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.config import ModelConfig
from haltwise.models.kv_codec import KV_DTYPES, cache_tensor, decode, encode, head_dim_of, kv_dtype_of, row_bytes

rows = st.tuples(st.integers(1, 6), st.integers(1, 3), st.sampled_from([8, 16, 64]), st.integers(0, 2**31 - 1),
                 st.floats(1e-3, 1e3))


def _values(shape, seed, magnitude) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * magnitude
    x[0, 0, : shape[2] // 2] = 0.0                        # a half-zero row and, where T > 1, a zero row
    if shape[0] > 1:
        x[1, 0] = 0.0
    return x


@settings(max_examples=60, deadline=None)
@given(rows)
def test_round_trips_within_each_dtypes_bound(case) -> None:
    T, kvh, D, seed, magnitude = case
    x = _values((T, kvh, D), seed, magnitude)
    assert torch.equal(decode(encode(x, "float32"), torch.float32), x)
    bf = decode(encode(x, "bfloat16"), torch.float32)
    assert torch.all((bf - x).abs() <= x.abs() * 2.0**-8)
    stored = encode(x, "int8")
    assert stored.dtype == torch.int8 and stored.shape == (T, kvh, D + 4)
    back = decode(stored, torch.float32)
    step = x.abs().amax(dim=-1, keepdim=True) / 127.0     # one quantization step of each row
    assert torch.all((back - x).abs() <= step * 0.5 * (1 + 1e-5) + 1e-30)
    assert torch.all(back[x.abs().amax(-1) == 0] == 0)     # an all-zero row stays exactly zero


@settings(max_examples=30, deadline=None)
@given(rows)
def test_a_rows_stored_form_depends_on_that_row_alone(case) -> None:
    T, kvh, D, seed, magnitude = case
    x = _values((T, kvh, D), seed, magnitude)
    for dtype in KV_DTYPES:
        whole = encode(x, dtype)
        for t in range(T):
            assert torch.equal(encode(x[t:t + 1], dtype)[0], whole[t])


def test_cache_shapes_and_bytes_agree_with_the_budget_arithmetic() -> None:
    config = ModelConfig(vocab_size=10, hidden_size=64, intermediate_size=8, num_layers=3, num_heads=4,
                         num_kv_heads=2, head_dim=16, max_position_embeddings=64)
    for dtype in KV_DTYPES:
        cache = cache_tensor(dtype, 5, 4, 2, 16)
        assert kv_dtype_of(cache) == dtype and head_dim_of(cache) == 16
        per_row = cache.element_size() * cache.shape[-1]
        assert per_row == row_bytes(dtype, 16)
        assert config.kv_bytes_per_token(dtype) == 2 * 3 * 2 * per_row
    assert (row_bytes("float32", 64), row_bytes("bfloat16", 64), row_bytes("int8", 64)) == (256, 128, 68)
