"""RamTier: LRU within a byte budget, against a plain model of what it should hold (hypothesis)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from haltwise.engine.prompt_cache.ram_tier import RamTier

NS = b"n" * 32
# small sizes against a small budget: the boundaries (exactly full, one byte over) come up often
ops = st.lists(st.tuples(st.sampled_from(["save", "load"]), st.integers(0, 7), st.integers(0, 12)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(budget=st.integers(0, 30), ops=ops)
def test_lru_bookkeeping_matches_a_model(budget, ops):
    tier = RamTier(budget)
    model: list[tuple[int, int]] = []     # (key, size), least recently used first
    for op, k, size in ops:
        key = (NS, bytes([k]) * 16)
        if op == "save":
            kept = tier.save(key, bytes([k]) * size)
            model = [(mk, ms) for mk, ms in model if mk != k]
            assert kept == (size <= budget)
            if kept:
                while sum(s for _, s in model) + size > budget:
                    model.pop(0)
                model.append((k, size))
        else:
            payload = tier.load(key)
            held = dict(model)
            assert (payload is not None) == (k in held)
            if payload is not None:
                assert payload == bytes([k]) * held[k]
                model = [(mk, ms) for mk, ms in model if mk != k] + [(k, held[k])]
        assert tier.used_bytes == sum(s for _, s in model) <= budget
        assert len(tier) == len(model)


def test_namespaces_never_see_each_other():
    tier = RamTier(1000)
    tier.save((b"a" * 32, b"c" * 16), b"xyz")
    assert tier.load((b"b" * 32, b"c" * 16)) is None
    assert tier.load((b"a" * 32, b"c" * 16)) == b"xyz"


def test_tiers_with_an_empty_ram_tier_are_enabled():
    """A tier has __len__ (its entries): an empty one must still turn the prompt cache on (the server's default,
    a RAM tier and no directory, starts empty)."""
    from haltwise.engine.prompt_cache.prompt_cache import PromptTiers

    assert PromptTiers(ram=RamTier(1 << 20)).enabled
    assert not PromptTiers(ram=RamTier(0)).enabled and not PromptTiers().enabled
