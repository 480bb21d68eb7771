"""The sliding layers' own KV pool: a sequence holds only the blocks its next queries can still see.

A model that mixes sliding-window layers with full-context ones (Gemma 3: five of every six layers see
only the last `window` positions) keeps two pools. The full-context layers use the main pool
(block_allocator.py: prefix cache, preemption, admission). The sliding layers use this one, where a
sequence's table is indexed by the same logical block (position // block_size) but a block exists only
while a query may still attend to one of its positions:

    window 8, block_size 4; a step computes positions 12..13 (start 12, end 14):
        the query at 12 sees 5..12 -> logical blocks 1..3 are held; block 0 was given back;
        table [0, 17, 4, 9] -- the dropped entry reads block 0, which no query reaches
        (the native stack reads only the window; the Python path masks by position)

Invariants:
  * before a step, a sequence holds blocks for positions [start - window + 1, end) of what it computes;
  * after a step (num_computed = c), blocks wholly below c - window + 1 are given back;
  * so the pool never runs dry when it holds window_pool_blocks() blocks: every running sequence holds at
    most ceil(window / block_size) + 2 blocks between steps, and a step adds at most its own tokens' blocks.
Prefix caching is off for such a model (a cached prefix would need the sliding layers' last window too),
as llama.cpp does by default; `--swa-full` keeps every layer's whole context and the prefix cache.
"""
from __future__ import annotations

import math
from collections import deque

from haltwise.config import EngineConfig, ModelConfig

DROPPED = -1   # a logical block given back (or never needed): read as block 0, never attended


def window_pool_blocks(model: ModelConfig, engine: EngineConfig, max_model_len: int) -> int:
    """Blocks of the sliding layers' own pool: enough that it never runs dry (module invariants); 0 = the
    sliding layers share the main pool (--swa-full, no sliding or no full-context layer, or a window that
    covers max_model_len anyway)."""
    sliding = model.num_sliding_layers
    if engine.swa_full or not 0 < sliding < model.num_layers or model.sliding_window >= max_model_len:
        return 0
    max_running = min(engine.max_num_seqs, engine.max_num_batched_tokens)          # as the scheduler caps it
    max_step = engine.max_num_batched_tokens if engine.enable_chunked_prefill else max(
        engine.max_num_batched_tokens, max_model_len)                                # an unchunked prompt runs whole
    bs = engine.block_size
    return max_running * (math.ceil(model.sliding_window / bs) + 2) + math.ceil(max_step / bs)


class WindowBlocks:
    """Free list and per-sequence tables of the sliding layers' pool. No torch."""

    def __init__(self, num_blocks: int, block_size: int, window: int):
        if num_blocks < 1 or window < 1:
            raise ValueError(f"num_blocks and window must be >= 1, got {num_blocks}, {window}")
        self.num_blocks, self.block_size, self.window = num_blocks, block_size, window
        self._free: deque[int] = deque(range(num_blocks))
        self._tables: dict[int, list[int]] = {}     # seq_id -> logical block -> block id or DROPPED

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def table(self, seq_id: int, start: int, end: int) -> list[int]:
        """Blocks for a step computing positions start..end-1 (their queries see back to start - window + 1);
        dropped entries read as block 0."""
        table = self._tables.setdefault(seq_id, [])
        first, last = max(0, start - self.window + 1) // self.block_size, (end - 1) // self.block_size
        table.extend([DROPPED] * (last + 1 - len(table)))
        for i in range(first, last + 1):
            if table[i] == DROPPED:
                if not self._free:
                    raise RuntimeError(f"the sliding-window KV pool ({self.num_blocks} blocks) ran dry: "
                                       "window_pool_blocks() undercounts")
                table[i] = self._free.popleft()
        return [max(b, 0) for b in table]

    def release_behind(self, seq_id: int, num_computed: int) -> None:
        """Give back the blocks no query at position >= num_computed can attend to."""
        table = self._tables.get(seq_id)
        if table is None:
            return
        for i in range(min(len(table), max(0, num_computed - self.window + 1) // self.block_size)):
            if table[i] != DROPPED:
                self._free.append(table[i])
                table[i] = DROPPED

    def trim(self, seq_id: int, num_tokens: int) -> None:
        """Give back the blocks past position num_tokens - 1 (rejected speculative drafts)."""
        table = self._tables.get(seq_id)
        if table is None:
            return
        keep = -(-num_tokens // self.block_size)
        self._free.extend(b for b in table[keep:] if b != DROPPED)
        del table[keep:]

    def free(self, seq_id: int) -> None:
        table = self._tables.pop(seq_id, None)
        if table is not None:
            self._free.extend(b for b in table if b != DROPPED)

    def num_held(self, seq_id: int) -> int:
        return sum(b != DROPPED for b in self._tables.get(seq_id, ()))
