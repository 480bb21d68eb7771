"""Block allocator edges: ensure_slots on its own (a fresh sequence, the one-holder-per-id guard, grown
blocks cached), refusals with their messages, the lookup limit, eviction order, incremental hashing."""
from __future__ import annotations

import pytest

from haltwise.engine.block_allocator import BlockAllocator
from tests.engine.test_block_allocator import compute_all, make_seq


def test_ensure_slots_grows_a_fresh_sequence_and_only_as_needed() -> None:
    alloc = BlockAllocator(num_blocks=4, block_size=4)
    seq = make_seq(list(range(8)))
    assert alloc.ensure_slots(seq, 5) and len(seq.block_table) == 2 and alloc.num_live_seqs == 1
    assert alloc.ensure_slots(seq, 8) and len(seq.block_table) == 2          # already covered
    assert not alloc.ensure_slots(seq, 17) and len(seq.block_table) == 2     # 5 blocks > 4: nothing changes
    alloc.free(seq)
    assert alloc.num_free_blocks == 4 and alloc.num_live_seqs == 0


def test_another_sequence_with_a_live_id_is_refused() -> None:
    alloc = BlockAllocator(num_blocks=4, block_size=4)
    seq = make_seq([1, 2, 3])
    alloc.ensure_slots(seq, 3)
    twin = make_seq([1, 2, 3])
    twin.seq_id = seq.seq_id
    with pytest.raises(RuntimeError, match=f"another sequence with id {seq.seq_id} holds blocks"):
        alloc.ensure_slots(twin, 3)


def test_blocks_grown_by_ensure_slots_are_cached_when_computed() -> None:
    alloc = BlockAllocator(num_blocks=8, block_size=4, enable_prefix_caching=True)
    first = make_seq(list(range(9)))
    assert alloc.ensure_slots(first, first.num_tokens)
    compute_all(alloc, first)
    assert alloc.num_cached_blocks == 2                                       # two full blocks of 4
    second = make_seq(list(range(8)) + [99])         # 9 tokens: (9 - 1) // 4 = 2 blocks may hit
    assert alloc.lookup_prefix(second) == 8


def test_a_sequence_regrown_after_free_caches_its_blocks_again() -> None:
    """Preemption frees a sequence and later grows it again: its new blocks must be cached afresh."""
    alloc = BlockAllocator(num_blocks=2, block_size=4, enable_prefix_caching=True)
    seq = make_seq(list(range(8)))
    alloc.ensure_slots(seq, 8)
    compute_all(alloc, seq)
    alloc.free(seq)                                  # both blocks evictable, still cached
    seq.num_computed_tokens = 0
    assert alloc.ensure_slots(seq, 8)                # takes the two blocks back, evicting their hashes
    compute_all(alloc, seq)
    assert alloc.num_cached_blocks == 2


def test_bad_sizes_and_misuse_are_refused_with_their_reason() -> None:
    for num_blocks, block_size in ((0, 4), (4, 0)):
        with pytest.raises(ValueError, match="num_blocks and block_size must be >= 1"):
            BlockAllocator(num_blocks, block_size)
    alloc = BlockAllocator(num_blocks=2, block_size=4)
    seq = make_seq(list(range(5)))
    alloc.allocate_prompt(seq)
    with pytest.raises(RuntimeError, match=f"sequence {seq.seq_id} already holds blocks"):
        alloc.allocate_prompt(seq)
    with pytest.raises(RuntimeError, match="out of KV blocks"):
        alloc.allocate_prompt(make_seq([1]))


def test_the_least_recently_freed_cached_block_is_evicted_first() -> None:
    alloc = BlockAllocator(num_blocks=2, block_size=4, enable_prefix_caching=True)
    older, newer = make_seq([1] * 4), make_seq([2] * 4)
    for seq in (older, newer):
        alloc.allocate_prompt(seq)
        compute_all(alloc, seq)
    alloc.free(older)
    alloc.free(newer)
    alloc.allocate_prompt(make_seq([3] * 4))           # one block needed: the older one goes
    assert alloc.lookup_prefix(make_seq([1] * 5)) == 0 and alloc.lookup_prefix(make_seq([2] * 5)) == 4


def test_hits_add_up_and_blocks_computed_step_by_step_hash_like_a_whole_prefill() -> None:
    alloc = BlockAllocator(num_blocks=16, block_size=4, enable_prefix_caching=True)
    seq = make_seq(list(range(9)))
    alloc.allocate_prompt(seq)
    for computed in (4, 8):                             # one block per step, as chunked prefill does
        seq.num_computed_tokens = computed
        alloc.on_computed(seq)
    for _ in range(2):
        alloc.allocate_prompt(make_seq(list(range(8)) + [50]))
    assert alloc.prefix_cache_hits == 16                # 8 tokens served, twice
