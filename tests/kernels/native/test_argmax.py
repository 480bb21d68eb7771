"""argmax_rows (csrc/decode_math.inc, the AVX2 path in decode_math_avx2.inc): torch.max(dim=-1)'s index —
the first of equal maxima — on every ISA path, for any length and ties anywhere."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.kernels.native import build

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason=f"native kernels unavailable: {build.failure()}")
ISAS = native.isas() if native is not None else []

# Few distinct values (ties everywhere), the infinities a ban or an overflow leaves, and ordinary floats.
VALUES = st.one_of(st.sampled_from([-1.5, 0.0, 2.0, 7.25, float("-inf"), float("inf")]),
                   st.floats(-1e4, 1e4, allow_nan=False, width=32))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 200), count=st.integers(1, 3))
def test_first_index_of_the_largest_value_on_every_path(data, n, count):
    rows = [data.draw(st.lists(VALUES, min_size=n, max_size=n)) for _ in range(count)]
    x = torch.tensor(rows, dtype=torch.float32)
    want = x.max(dim=-1).indices
    for isa in ISAS:
        assert torch.equal(native.argmax_rows(x, isa), want), isa


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("V", [49152, 151936, 262144])     # SmolLM2's, Qwen2.5's and Gemma 3's vocabularies
def test_real_vocabulary_sizes_with_the_maximum_tied_at_both_ends_and_inside(isa, V):
    g = torch.Generator().manual_seed(V)
    x = torch.randn(5, V, generator=g) * 4
    top = float(x.max()) + 1
    x[0, V - 1] = top                                        # in the tail past the last full 32
    x[1, [7, V - 3]] = top                                   # first in the opening 32
    x[2, [4099, 4100, 90000 % V]] = top                      # two lanes side by side: the lower wins
    x[3] = 0.0                                               # all equal: index 0
    x[4, :] = float("-inf")
    x[4, [40001 % V, 33]] = -3.0
    assert torch.equal(native.argmax_rows(x, isa), x.max(dim=-1).indices)
    assert native.argmax_rows(x, isa).tolist()[:4] == [V - 1, 7, 4099, 0]


def test_refuses_what_it_cannot_read():
    with pytest.raises(RuntimeError, match="argmax_rows"):
        native.argmax_rows(torch.zeros(3, 0))
    with pytest.raises(RuntimeError, match="argmax_rows"):
        native.argmax_rows(torch.zeros(3, 4, dtype=torch.float64))
