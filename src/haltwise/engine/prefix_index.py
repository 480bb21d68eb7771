"""The prefix cache's index over the KV pool's blocks: chain hash -> block id, and the evictable blocks. No torch.

A block is registered here once it is full and computed (block_allocator.on_computed), under its chain hash
(prefix_chain.py). A registered block with no reference left is evictable: reusable by a prefix hit, and
evicted least recently freed first when the pool needs a block.

A listener (engine/prompt_cache/engine_link.py) may watch the index: `registered(block_id, hash)` when a block
enters it, `evicted(block_id, hash)` just before an evictable block is reused (its KV still intact).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from haltwise.engine.prefix_chain import iter_chain


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None  # set only while registered in the prefix cache


class PrefixIndex:
    """Which blocks hold which prefixes; the allocator keeps the reference counts and the free list."""

    def __init__(self) -> None:
        self.by_hash: dict[bytes, int] = {}                       # hash -> block id (in use or evictable)
        self.evictable: OrderedDict[int, None] = OrderedDict()    # ref 0, hashed; oldest first
        self.listener = None                                      # see the module docstring

    def match(self, token_ids: Sequence[int], num_blocks: int, block_size: int) -> tuple[list[bytes], list[int]]:
        """Hashes and block ids of the registered leading full blocks of token_ids (at most num_blocks)."""
        hashes: list[bytes] = []
        hits: list[int] = []
        for h in iter_chain(token_ids, b"", 0, num_blocks, block_size):
            if (block_id := self.by_hash.get(h)) is None:
                break
            hashes.append(h)
            hits.append(block_id)
        return hashes, hits

    def register(self, block: Block, block_hash: bytes) -> None:
        """Register block under block_hash, unless it or another block with that content already is."""
        if block.block_hash is None and block_hash not in self.by_hash:
            block.block_hash = block_hash
            self.by_hash[block_hash] = block.block_id
            if self.listener is not None:
                self.listener.registered(block.block_id, block_hash)

    def evict_oldest(self, blocks: list[Block]) -> Block:
        """Unregister and return the least recently freed evictable block (the listener hears it first)."""
        block_id, _ = self.evictable.popitem(last=False)
        block = blocks[block_id]
        if self.listener is not None:
            self.listener.evicted(block_id, block.block_hash)
        del self.by_hash[block.block_hash]
        block.block_hash = None
        return block

    def clear_evictable(self, blocks: list[Block]) -> list[int]:
        """Unregister every evictable block; returns their ids (now plain free blocks)."""
        freed = list(self.evictable)
        for block_id in freed:
            block = blocks[block_id]
            del self.by_hash[block.block_hash]
            block.block_hash = None
        self.evictable.clear()
        return freed
