import torch
from hypothesis import given, settings, strategies as st

from haltwise.structured.bitmask import GrammarMask, allowed_token_ids, apply_bitmask, bitmask_width


@settings(max_examples=60, deadline=None)
@given(vocab=st.integers(1, 200), batch=st.integers(1, 5), seed=st.integers(0, 2**31), data=st.data())
def test_apply_bitmask_matches_a_per_token_reference(vocab: int, batch: int, seed: int, data) -> None:
    gen = torch.Generator().manual_seed(seed)
    rows = sorted(data.draw(st.sets(st.integers(0, batch - 1), min_size=1)))
    bits = torch.randint(-2**31, 2**31 - 1, (len(rows), bitmask_width(vocab)), dtype=torch.int32, generator=gen)
    logits = torch.randn(batch, vocab, generator=gen)
    expected = logits.clone()
    for k, r in enumerate(rows):
        allowed = set(allowed_token_ids(bits[k], vocab))
        for t in range(vocab):
            if t not in allowed:
                expected[r, t] = float("-inf")
    apply_bitmask(logits, GrammarMask(rows, bits))
    assert torch.equal(logits, expected)


def test_allowed_token_ids_reads_bits_least_significant_first() -> None:
    bits = torch.tensor([1 - 2**31, 4], dtype=torch.int32)   # bits 0 and 31; bit 2
    assert allowed_token_ids(bits, 64) == [0, 31, 34]
    assert allowed_token_ids(bits, 32) == [0, 31]
