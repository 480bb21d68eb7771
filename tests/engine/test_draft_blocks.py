"""The draft model's KV bookkeeping (engine/draft_blocks.py): lazy sync with the sequence's tokens, the
pool's own free list, least-recently-used eviction, refusal of a sequence longer than the pool."""
from __future__ import annotations

from haltwise.engine.draft_blocks import DraftBlocks, DraftSeq


def test_sync_keeps_exactly_the_positions_that_still_agree():
    state = DraftSeq(tokens=[1, 2, 3, 9, 9])        # 9, 9: drafts fed to the draft model
    assert state.sync([1, 2, 3, 9, 4, 5]) == 4       # the first draft was accepted, the second was not
    assert state.tokens == [1, 2, 3, 9] and state.num_valid == 4
    assert state.sync([1, 2]) == 2                   # a sequence cut shorter (a stop truncation)
    assert DraftSeq(tokens=[7]).sync([1, 2]) == 0


def test_reserve_takes_free_blocks_then_evicts_the_least_recently_used():
    blocks = DraftBlocks(num_blocks=4, block_size=4)
    assert blocks.reserve(1, 8) and blocks.reserve(2, 8)      # 2 blocks each: the pool is full
    assert blocks.num_free_blocks == 0
    blocks.get(1)                                             # 1 used again: 2 is now the oldest
    assert blocks.reserve(3, 5)
    assert blocks.peek(2) is None and len(blocks.peek(1).block_table) == 2
    assert len(blocks.peek(3).block_table) == 2


def test_a_sequence_longer_than_the_pool_is_refused_and_release_and_trim_give_blocks_back():
    blocks = DraftBlocks(num_blocks=3, block_size=4)
    assert not blocks.reserve(1, 13)
    assert blocks.reserve(1, 12) and blocks.num_free_blocks == 0
    blocks.trim(1, 5)
    assert len(blocks.peek(1).block_table) == 2 and blocks.num_free_blocks == 1
    blocks.release(1)
    blocks.release(1)                                         # twice: a no-op
    assert blocks.num_free_blocks == 3 and blocks.num_live_seqs == 0
    assert sorted(blocks._free) == [0, 1, 2]
