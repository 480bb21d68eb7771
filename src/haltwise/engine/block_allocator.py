"""Paged KV block allocator: free list, reference counts, block tables, prefix cache. No torch.

A sequence's KV lives in fixed-size blocks named by its block table:

    block_size = 4, seq.block_table = [7, 2, 9], seq.num_tokens = 10

        positions 0..3 -> block 7 (slots 28..31)
        positions 4..7 -> block 2 (slots  8..11)
        positions 8..9 -> block 9 (slots 36, 37; slots 38, 39 allocated but unused -> fragmentation)

        slot(p) = block_table[p // block_size] * block_size + p % block_size

Prefix cache: once a block is FULL and computed it is registered under its chain hash (prefix_chain.py:
equal hashes mean equal whole prefixes), and the block's KV can be shared. Only full blocks are ever
shared, and a sequence only writes positions >= its num_computed_tokens, so a shared block is never
written again (no copy-on-write).

Every block is in exactly one state:

    in use      ref_count > 0              (hashed or not)
    evictable   ref_count == 0, hashed     reusable by a prefix hit; evicted LRU-first when needed
    free        ref_count == 0, unhashed

Blocks from num_usable_blocks on are not handed out yet (their pages are still being committed, engine/
page_commit.py): make_usable(n) adds them to the free list as they arrive, and shrink_to_usable() ends the
pool there (the host refused the rest). They count neither as free nor as used.

The prefix index and its listener (a prompt cache beyond the pool): prefix_index.py. add_restored() marks
the blocks that listener filled as computed; the allocator never learns where evicted blocks go.
"""
from __future__ import annotations

from collections import deque

from haltwise.engine.prefix_chain import blocks_for, iter_chain
from haltwise.engine.prefix_index import Block, PrefixIndex
from haltwise.engine.sequence import Sequence
from haltwise.engine.window_blocks import WindowBlocks


class BlockAllocator:
    """Owns the KV pool's block bookkeeping; sequences hold block ids in `seq.block_table`.

    The scheduler asks (can_allocate / can_allocate_seq / ensure_slots returning False) before it
    takes blocks, so running out of blocks is a scheduling decision (preemption), never an error.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 window: WindowBlocks | None = None, usable_blocks: int | None = None):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.window = window       # the sliding layers' own pool (window_blocks.py), None = they use this one
        self.num_usable_blocks = num_blocks if usable_blocks is None else min(usable_blocks, num_blocks)
        self._blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(self.num_usable_blocks))  # ref 0, unhashed
        self._index = PrefixIndex()                                # registered blocks, the evictable ones
        self._live: dict[int, Sequence] = {}                       # seq_id -> sequence holding blocks
        self._seq_hashes: dict[int, list[bytes]] = {}              # seq_id -> hashes of its leading full blocks
        self.prefix_cache_hits = 0     # tokens served from the cache
        self.prefix_cache_queries = 0  # tokens looked up

    @property
    def listener(self):   # who hears blocks enter and leave the prefix cache (prefix_index.py), or None
        return self._index.listener

    @listener.setter
    def listener(self, listener) -> None:
        self._index.listener = listener

    # ---- counts -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks with ref_count 0, including cached blocks that may be evicted."""
        return len(self._free) + len(self._index.evictable)

    @property
    def num_used_blocks(self) -> int:
        """Blocks with ref_count > 0."""
        return self.num_usable_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered in the prefix cache (in use or evictable)."""
        return len(self._index.by_hash)

    @property
    def num_live_seqs(self) -> int:
        return len(self._live)

    def cached_block_hashes(self) -> list[bytes]:
        """The hashes of every block in the prefix cache (a copy; safe to call from another thread)."""
        return list(self._index.by_hash.copy())

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref_count

    def slot(self, seq: Sequence, position: int) -> int:
        """Flat cache slot of `position` in `seq` (see the module diagram)."""
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def make_usable(self, num_blocks: int) -> None:
        """Blocks below num_blocks (capped at the pool's size) may be handed out from now on."""
        num_blocks = min(num_blocks, self.num_blocks)
        self._free.extend(range(self.num_usable_blocks, num_blocks))
        self.num_usable_blocks = max(self.num_usable_blocks, num_blocks)

    def shrink_to_usable(self) -> None:
        """The pool ends at num_usable_blocks: the blocks past it are never handed out."""
        self.num_blocks = self.num_usable_blocks
        del self._blocks[self.num_blocks:]

    # ---- prefix lookup ------------------------------------------------------------------------
    def _match(self, seq: Sequence) -> tuple[list[bytes], list[int]]:
        """Hashes and block ids of the cached leading full blocks of seq.token_ids.

        At most (num_tokens - 1) // block_size blocks: the last token is always recomputed so the
        step that finishes the prefill has logits to sample from.
        """
        if not self.enable_prefix_caching or seq.needs_prompt_logits:   # it needs every position's logits
            return [], []
        return self._index.match(seq.token_ids, (seq.num_tokens - 1) // self.block_size, self.block_size)

    def lookup_prefix(self, seq: Sequence) -> int:
        """Tokens allocate_prompt would serve from the cache right now (no side effects)."""
        return len(self._match(seq)[1]) * self.block_size

    def num_blocks_to_allocate(self, seq: Sequence) -> int:
        """Blocks allocate_prompt(seq) would take out of the free count (hits on evictable blocks count)."""
        _, hits = self._match(seq)
        evictable_hits = sum(1 for b in hits if self._blocks[b].ref_count == 0)
        return blocks_for(seq.num_tokens, self.block_size) - len(hits) + evictable_hits

    def can_allocate(self, num_tokens: int) -> bool:
        """True if num_tokens positions fit in free blocks, ignoring any prefix-cache hits."""
        return blocks_for(num_tokens, self.block_size) <= self.num_free_blocks

    def can_allocate_seq(self, seq: Sequence) -> bool:
        """True if allocate_prompt(seq) would succeed now (accounts for prefix-cache hits)."""
        return self.num_blocks_to_allocate(seq) <= self.num_free_blocks

    # ---- allocation ---------------------------------------------------------------------------
    def _take(self) -> int:
        """A block with ref_count 1 from the free list, else the least recently freed cached block."""
        if self._free:
            block = self._blocks[self._free.popleft()]
        else:
            block = self._index.evict_oldest(self._blocks)
        assert block.ref_count == 0, f"block {block.block_id} handed out while in use"
        block.ref_count = 1
        return block.block_id

    def allocate_prompt(self, seq: Sequence) -> None:
        """Blocks for seq.token_ids[:seq.num_tokens], reusing cached full blocks of its prefix.

        Sets seq.block_table, seq.num_cached_tokens (prompt tokens only) and
        seq.num_computed_tokens (= tokens served from the cache). Raises RuntimeError when the
        blocks are not there: callers check can_allocate_seq first.
        """
        if seq.seq_id in self._live:
            raise RuntimeError(f"sequence {seq.seq_id} already holds blocks")
        hashes, hits = self._match(seq)
        if self.num_blocks_to_allocate(seq) > self.num_free_blocks:
            raise RuntimeError(f"out of KV blocks for sequence {seq.seq_id}; check can_allocate_seq first")
        for block_id in hits:  # take hits first so that _take() cannot evict them
            block = self._blocks[block_id]
            if block.ref_count == 0:
                del self._index.evictable[block_id]
            block.ref_count += 1
        num_new = blocks_for(seq.num_tokens, self.block_size) - len(hits)
        seq.block_table = hits + [self._take() for _ in range(num_new)]
        cached_tokens = len(hits) * self.block_size
        seq.num_computed_tokens = cached_tokens
        seq.num_cached_tokens = min(cached_tokens, seq.num_prompt_tokens)
        seq.num_tier_tokens = {}
        self._live[seq.seq_id] = seq
        self._seq_hashes[seq.seq_id] = hashes
        if self.enable_prefix_caching:
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += cached_tokens

    def ensure_slots(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow seq.block_table to cover positions 0..num_tokens-1. False (nothing changed) if out of blocks."""
        if self._live.get(seq.seq_id, seq) is not seq:
            raise RuntimeError(f"another sequence with id {seq.seq_id} holds blocks")
        need = blocks_for(num_tokens, self.block_size) - len(seq.block_table)
        if need > self.num_free_blocks:
            return False
        if need > 0:
            seq.block_table.extend(self._take() for _ in range(need))
        if seq.block_table:
            self._live[seq.seq_id] = seq
            self._seq_hashes.setdefault(seq.seq_id, [])
        return True

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Return the blocks past the first blocks_for(num_tokens) of seq's table (reserved for rejected
        speculative drafts). They hold no position below num_tokens, so none is in the prefix cache."""
        keep = blocks_for(num_tokens, self.block_size)
        for block_id in reversed(seq.block_table[keep:]):
            block = self._blocks[block_id]
            assert block.ref_count == 1 and block.block_hash is None, f"trimmed block {block_id} is shared"
            block.ref_count = 0
            self._free.appendleft(block_id)   # first out again: the next step's drafts take it back
        del seq.block_table[keep:]
        if self.window is not None:
            self.window.trim(seq.seq_id, num_tokens)

    def window_table(self, seq: Sequence, start: int, end: int) -> list[int] | None:
        """The sliding layers' blocks for a step computing positions start..end-1 (None: no own pool)."""
        return None if self.window is None else self.window.table(seq.seq_id, start, end)

    def on_computed(self, seq: Sequence) -> None:
        """Register the sequence's newly full, computed blocks in the prefix cache.

        If another block already holds the same content, this block stays private (it is freed,
        not cached, when the sequence ends). The sliding layers' pool gives back what fell out of the window.
        """
        if self.window is not None:
            self.window.release_behind(seq.seq_id, seq.num_computed_tokens)
        if not self.enable_prefix_caching or seq.seq_id not in self._live:
            return
        bs = self.block_size
        hashes = self._seq_hashes[seq.seq_id]
        num_full = min(seq.num_computed_tokens, seq.num_tokens, len(seq.block_table) * bs) // bs
        first = len(hashes)
        for i, h in enumerate(iter_chain(seq.token_ids, hashes[-1] if hashes else b"", first, num_full, bs), first):
            hashes.append(h)
            self._index.register(self._blocks[seq.block_table[i]], h)

    def prefix_chains_after_hits(self, seq: Sequence) -> list[bytes]:
        """Chain hashes of seq's full blocks after those it holds computed (its prefix hits, right after
        allocate_prompt), up to the block before its last token (that token is always computed)."""
        if not self.enable_prefix_caching or seq.seq_id not in self._live:
            return []
        bs = self.block_size
        hashes = self._seq_hashes[seq.seq_id]
        first = seq.num_computed_tokens // bs
        if first != len(hashes):
            return []
        end = min((seq.num_tokens - 1) // bs, len(seq.block_table))
        return list(iter_chain(seq.token_ids, hashes[-1] if hashes else b"", first, end, bs))

    def add_restored(self, seq: Sequence, num_blocks: int) -> None:
        """The listener wrote the next num_blocks blocks of seq's table with their exact KV: they count as
        computed and cached, and enter the prefix cache."""
        tokens = num_blocks * self.block_size
        seq.num_computed_tokens += tokens
        seq.num_cached_tokens = min(seq.num_computed_tokens, seq.num_prompt_tokens)
        self.prefix_cache_hits += tokens
        self.on_computed(seq)

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's reference to each of its blocks, exactly once; clears its block table.

        A second call (or a call for a sequence that never held blocks) is a no-op.
        """
        if self.window is not None:
            self.window.free(seq.seq_id)
        if self._live.get(seq.seq_id) is not seq:
            return
        del self._live[seq.seq_id]
        self._seq_hashes.pop(seq.seq_id, None)
        # Reverse order: a sequence's tail blocks are the least likely to be shared, so they are
        # queued for eviction before its head blocks.
        for block_id in reversed(seq.block_table):
            block = self._blocks[block_id]
            assert block.ref_count > 0, f"double free of block {block_id}"
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.block_hash is not None:
                    self._index.evictable[block_id] = None
                else:
                    self._free.append(block_id)
        seq.block_table = []

    def reset_prefix_cache(self) -> None:
        """Forget every cached block that no sequence uses (they become plain free blocks)."""
        self._free.extend(self._index.clear_evictable(self._blocks))

    # ---- metrics ------------------------------------------------------------------------------
    def fragmentation_rate(self) -> float:
        """Unused slots / allocated slots over the block tables of live sequences (0.0 when none).

        A slot is used when it holds one of the sequence's positions 0..num_tokens-1.
        """
        allocated = used = 0
        for seq in self._live.values():
            capacity = len(seq.block_table) * self.block_size
            allocated += capacity
            used += min(seq.num_tokens, capacity)
        return (allocated - used) / allocated if allocated else 0.0

    @property
    def usage(self) -> float:
        """Share of blocks in use (0..1)."""
        return self.num_used_blocks / self.num_blocks
