"""Block allocator: block tables, ref counts, exactly-once free, fragmentation, prefix cache."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.prefix_chain import blocks_for
from haltwise.engine.sequence import Sequence
from haltwise.sampling_params import SamplingParams

_ids = itertools.count()


def make_seq(tokens: list[int], request_id: str = "r") -> Sequence:
    return Sequence(seq_id=next(_ids), request_id=request_id, prompt_token_ids=list(tokens),
                    params=SamplingParams(max_tokens=8), max_total_tokens=10_000)


def compute_all(alloc: BlockAllocator, seq: Sequence) -> None:
    """What after_step does once a whole prefill ran."""
    seq.num_computed_tokens = seq.num_tokens
    alloc.on_computed(seq)


def test_block_table_and_slots() -> None:
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    seq = make_seq(list(range(10)))
    assert alloc.can_allocate(10) and alloc.can_allocate_seq(seq)
    alloc.allocate_prompt(seq)
    assert len(seq.block_table) == 3 and len(set(seq.block_table)) == 3
    assert seq.num_computed_tokens == 0 and seq.num_cached_tokens == 0
    assert alloc.num_used_blocks == 3 and alloc.num_free_blocks == 5
    b = seq.block_table
    assert [alloc.slot(seq, p) for p in (0, 3, 4, 9)] == [b[0] * 4, b[0] * 4 + 3, b[1] * 4, b[2] * 4 + 1]
    assert alloc.fragmentation_rate() == pytest.approx(2 / 12)


def test_ensure_slots_grows_or_changes_nothing() -> None:
    alloc = BlockAllocator(num_blocks=3, block_size=4)
    seq = make_seq([1, 2, 3, 4, 5])
    alloc.allocate_prompt(seq)
    assert alloc.ensure_slots(seq, 8) and len(seq.block_table) == 2  # still fits in 2 blocks
    assert alloc.ensure_slots(seq, 9) and len(seq.block_table) == 3
    table = list(seq.block_table)
    assert not alloc.ensure_slots(seq, 13)
    assert seq.block_table == table and alloc.num_free_blocks == 0


def test_free_is_exactly_once_and_idempotent() -> None:
    alloc = BlockAllocator(num_blocks=4, block_size=4, enable_prefix_caching=False)
    a, b = make_seq([1] * 6), make_seq([2] * 6)
    alloc.allocate_prompt(a)
    alloc.allocate_prompt(b)
    alloc.free(a)
    assert a.block_table == [] and alloc.num_free_blocks == 2
    alloc.free(a)  # no-op: must not decrement b's or anyone's blocks
    assert alloc.num_free_blocks == 2 and all(alloc.ref_count(x) == 1 for x in b.block_table)
    alloc.free(b)
    assert alloc.num_free_blocks == 4 and alloc.num_live_seqs == 0
    assert alloc.fragmentation_rate() == 0.0


def test_allocate_without_room_raises_instead_of_corrupting() -> None:
    alloc = BlockAllocator(num_blocks=2, block_size=4)
    seq = make_seq(list(range(9)))
    assert not alloc.can_allocate_seq(seq)
    with pytest.raises(RuntimeError):
        alloc.allocate_prompt(seq)
    assert alloc.num_free_blocks == 2 and seq.block_table == []


def test_shared_40_token_prefix_shares_two_blocks() -> None:
    alloc = BlockAllocator(num_blocks=16, block_size=16)
    system = list(range(100, 140))  # 40 tokens: 2 full blocks + 8
    a = make_seq(system + [1, 2, 3])
    alloc.allocate_prompt(a)
    compute_all(alloc, a)
    assert alloc.num_cached_blocks == 2
    b = make_seq(system + [7, 8, 9, 10])
    hits_before = alloc.prefix_cache_hits
    assert alloc.lookup_prefix(b) == 32
    alloc.allocate_prompt(b)
    assert b.block_table[:2] == a.block_table[:2]
    assert b.block_table[2] != a.block_table[2]
    assert b.num_cached_tokens == 32 and b.num_computed_tokens == 32
    assert alloc.prefix_cache_hits - hits_before == 32
    assert alloc.prefix_cache_queries == a.num_tokens + b.num_tokens
    assert [alloc.ref_count(x) for x in b.block_table[:2]] == [2, 2]
    assert alloc.num_used_blocks == 4  # 2 shared + 1 each
    alloc.free(a)
    alloc.free(b)
    assert alloc.num_free_blocks == 16 and alloc.num_cached_blocks == 2  # cached, evictable


def test_last_prompt_token_is_always_recomputed() -> None:
    alloc = BlockAllocator(num_blocks=8, block_size=16)
    prompt = list(range(32))  # exactly 2 full blocks
    a = make_seq(prompt)
    alloc.allocate_prompt(a)
    compute_all(alloc, a)
    b = make_seq(prompt)
    alloc.allocate_prompt(b)
    assert b.num_computed_tokens == 16 and b.num_uncomputed_tokens == 16
    assert b.block_table[0] == a.block_table[0] and b.block_table[1] != a.block_table[1]


def test_hash_chains_over_the_whole_prefix() -> None:
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    a = make_seq([1, 1, 1, 1, 2, 2, 2, 2, 9])
    alloc.allocate_prompt(a)
    compute_all(alloc, a)
    b = make_seq([3, 3, 3, 3, 2, 2, 2, 2, 9])  # same second block after a different first block
    assert alloc.lookup_prefix(b) == 0


def test_uncomputed_blocks_are_not_cached() -> None:
    alloc = BlockAllocator(num_blocks=8, block_size=4)
    a = make_seq(list(range(12)))
    alloc.allocate_prompt(a)
    a.num_computed_tokens = 6  # first chunk: only block 0 is full and computed
    alloc.on_computed(a)
    assert alloc.num_cached_blocks == 1
    assert alloc.lookup_prefix(make_seq(list(range(12)))) == 4


def test_evictable_blocks_are_reused_when_the_pool_is_tight() -> None:
    alloc = BlockAllocator(num_blocks=4, block_size=4)
    a = make_seq(list(range(16)))
    alloc.allocate_prompt(a)
    compute_all(alloc, a)
    alloc.free(a)
    assert alloc.num_free_blocks == 4 and alloc.num_cached_blocks == 4
    # A cache hit on evictable blocks takes them back out of the free count.
    b = make_seq(list(range(12)) + [99, 98])
    assert alloc.num_blocks_to_allocate(b) == 4
    alloc.allocate_prompt(b)
    assert b.num_computed_tokens == 12 and alloc.num_free_blocks == 0
    alloc.free(b)
    # Different content needing the whole pool evicts every cached block.
    c = make_seq([500 + i for i in range(16)])
    assert alloc.can_allocate_seq(c)
    alloc.allocate_prompt(c)
    assert c.num_computed_tokens == 0 and alloc.num_cached_blocks == 0 and alloc.num_free_blocks == 0
    alloc.free(c)
    assert alloc.num_free_blocks == 4


def test_prefix_caching_disabled_never_hits() -> None:
    alloc = BlockAllocator(num_blocks=8, block_size=4, enable_prefix_caching=False)
    a = make_seq(list(range(12)))
    alloc.allocate_prompt(a)
    compute_all(alloc, a)
    b = make_seq(list(range(12)))
    alloc.allocate_prompt(b)
    assert b.num_computed_tokens == 0 and alloc.prefix_cache_hits == 0 and alloc.num_cached_blocks == 0


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocate / grow / compute / append / free; the bookkeeping must always add up.

    A shadow KV store (slot -> token) is written for every computed position; each live
    sequence must read its own tokens back through its block table (sharing never corrupts).
    """

    @initialize(num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4, 16]),
                caching=st.booleans(), usable=st.none() | st.integers(0, 24))
    def setup(self, num_blocks: int, block_size: int, caching: bool, usable: int | None) -> None:
        self.alloc = BlockAllocator(num_blocks, block_size, enable_prefix_caching=caching, usable_blocks=usable)
        self.live: list[Sequence] = []
        self.kv: dict[int, int] = {}

    @rule(tokens=st.lists(st.integers(0, 2), min_size=1, max_size=40))
    def allocate(self, tokens: list[int]) -> None:
        seq = make_seq(tokens)
        free_before = self.alloc.num_free_blocks
        if not self.alloc.can_allocate_seq(seq):
            return
        need = self.alloc.num_blocks_to_allocate(seq)
        self.alloc.allocate_prompt(seq)
        assert self.alloc.num_free_blocks == free_before - need
        assert seq.num_computed_tokens < seq.num_tokens
        self.live.append(seq)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def compute(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.live))
        n = data.draw(st.integers(0, seq.num_uncomputed_tokens))
        for p in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
            self.kv[self.alloc.slot(seq, p)] = seq.token_ids[p]
        seq.num_computed_tokens += n
        self.alloc.on_computed(seq)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), token=st.integers(0, 2))
    def append(self, data: st.DataObject, token: int) -> None:
        seq = data.draw(st.sampled_from(self.live))
        if seq.num_uncomputed_tokens == 0 and self.alloc.ensure_slots(seq, seq.num_tokens + 1):
            seq.append_token(token)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), extra=st.integers(0, 20))
    def grow(self, data: st.DataObject, extra: int) -> None:
        seq = data.draw(st.sampled_from(self.live))
        table = list(seq.block_table)
        free_before = self.alloc.num_free_blocks
        target = seq.num_tokens + extra
        if self.alloc.ensure_slots(seq, target):
            assert len(seq.block_table) * self.alloc.block_size >= target
        else:
            assert seq.block_table == table and self.alloc.num_free_blocks == free_before

    @precondition(lambda self: self.live)
    @rule(data=st.data(), twice=st.booleans())
    def free(self, data: st.DataObject, twice: bool) -> None:
        seq = data.draw(st.sampled_from(self.live))
        self.live.remove(seq)
        self.alloc.free(seq)
        if twice:
            self.alloc.free(seq)
        assert seq.block_table == []

    @rule(more=st.integers(0, 30))
    def commit_more(self, more: int) -> None:
        """Pages committed: blocks up to num_usable_blocks + more (capped at the pool) may be handed out."""
        before = self.alloc.num_usable_blocks
        self.alloc.make_usable(before + more)
        assert self.alloc.num_usable_blocks == min(before + more, self.alloc.num_blocks)

    @rule()
    def host_refused_the_rest(self) -> None:
        self.alloc.shrink_to_usable()
        assert self.alloc.num_blocks == self.alloc.num_usable_blocks

    @invariant()
    def books_balance(self) -> None:
        if not hasattr(self, "alloc"):
            return
        alloc = self.alloc
        refs: dict[int, int] = {}
        for seq in self.live:
            assert len(set(seq.block_table)) == len(seq.block_table)
            for b in seq.block_table:
                refs[b] = refs.get(b, 0) + 1
        for b in range(alloc.num_blocks):
            assert alloc.ref_count(b) == refs.get(b, 0)
        assert alloc.num_used_blocks == len(refs)
        assert all(b < alloc.num_usable_blocks for b in refs)          # never a block not yet committed
        assert alloc.num_free_blocks + alloc.num_used_blocks == alloc.num_usable_blocks <= alloc.num_blocks
        allocated = sum(len(s.block_table) for s in self.live) * alloc.block_size
        unused = sum(len(s.block_table) * alloc.block_size - min(s.num_tokens, len(s.block_table) * alloc.block_size)
                     for s in self.live)
        assert alloc.fragmentation_rate() == pytest.approx(unused / allocated if allocated else 0.0)
        for seq in self.live:
            readback = [self.kv.get(alloc.slot(seq, p)) for p in range(seq.num_computed_tokens)]
            assert readback == seq.token_ids[:seq.num_computed_tokens]

    def teardown(self) -> None:
        if not hasattr(self, "alloc"):
            return
        for seq in self.live:
            self.alloc.free(seq)
        assert self.alloc.num_free_blocks == self.alloc.num_usable_blocks
        assert self.alloc.num_live_seqs == 0
        assert all(self.alloc.ref_count(b) == 0 for b in range(self.alloc.num_blocks))


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_blocks_for() -> None:
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_can_allocate_is_true_exactly_up_to_the_free_blocks() -> None:
    """Killed mutant (mutmut): `<=` -> `<` in can_allocate (a request that fits exactly was refused)."""
    from haltwise.engine.block_allocator import BlockAllocator

    alloc = BlockAllocator(num_blocks=4, block_size=16)
    assert alloc.can_allocate(4 * 16) and alloc.can_allocate(4 * 16 - 15)
    assert not alloc.can_allocate(4 * 16 + 1)
