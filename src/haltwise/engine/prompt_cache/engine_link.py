"""The engine's side of the prompt cache: pool events -> tiers, and restoring a prefix into fresh blocks.

The allocator calls `evicted` / `registered` (its listener) with a block id and chain hash; this link copies
the block's bytes out of the KV tensors only when a tier will keep them. The scheduler calls `restore(seq)`
right after allocate_prompt: the blocks after the pool's hits that a tier holds are copied into the
sequence's fresh blocks and marked computed, so its prefill starts after them.

A block a tier no longer gives (evicted meanwhile, or a bad disk entry) ends the run there: only the blocks
before it are marked computed, so a sequence's computed prefix is always an unbroken run of exact blocks.
"""
from __future__ import annotations

from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.prompt_cache.block_bytes import KVCaches, read_block, write_block
from haltwise.engine.prompt_cache.prompt_cache import PromptCache
from haltwise.engine.sequence import Sequence


class PromptCacheLink:
    def __init__(self, cache: PromptCache, allocator: BlockAllocator, kv_caches: KVCaches):
        self.cache = cache
        self.allocator = allocator
        self.kv_caches = kv_caches
        allocator.listener = self

    # ---- allocator listener -------------------------------------------------------------------------------
    def evicted(self, block_id: int, chain: bytes) -> None:
        self.cache.evicted(chain, lambda: read_block(self.kv_caches, block_id))

    def registered(self, block_id: int, chain: bytes) -> None:
        self.cache.computed(chain, lambda: read_block(self.kv_caches, block_id))

    # ---- scheduler hook -----------------------------------------------------------------------------------
    def restore(self, seq: Sequence) -> None:
        """Fill the blocks after seq's pool hits from the tiers; sets seq.num_tier_tokens."""
        chains = self.allocator.prefix_chains_after_hits(seq)
        if not chains:
            return
        tiers = self.cache.find_prefix(chains)
        first = seq.num_computed_tokens // self.allocator.block_size
        restored = 0
        for chain, tier in zip(chains, tiers):
            payload = self.cache.load(chain, tier)
            if payload is None:
                break
            try:
                write_block(self.kv_caches, seq.block_table[first + restored], payload)
            except ValueError:    # not this pool's block size (a namespace collision): a miss, never a crash
                break
            seq.num_tier_tokens[tier] = seq.num_tier_tokens.get(tier, 0) + self.allocator.block_size
            restored += 1
        if restored:
            self.allocator.add_restored(seq, restored)
