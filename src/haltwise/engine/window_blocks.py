"""The sliding layers' own KV pool: a sequence holds only the blocks its next queries can still see.

A model that mixes sliding-window layers with full-context ones (Gemma 3: five of every six layers see
only the last `window` positions) keeps two pools. The full-context layers use the main pool
(block_allocator.py: prefix cache, preemption, admission). The sliding layers use this one, where a
sequence's table is indexed by the same logical block (position // block_size) but a block exists only
while a query may still attend to one of its positions:

    window 8, block_size 4; a step computes positions 12..13 (start 12, end 14):
        the query at 12 sees 5..12 -> logical blocks 1..3 are held; block 0 was given back;
        table [0, 17, 4, 9] -- a given-back entry reads block 0, which no query reaches
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
    """Free list and per-sequence tables of the sliding layers' pool. No torch.

    A sequence's table is its logical blocks 0..n-1, of which it holds [held_from, n): the blocks before
    were given back as the window passed them and read as block 0 (module docstring)."""

    def __init__(self, num_blocks: int, block_size: int, window: int):
        if num_blocks < 1 or window < 1:
            raise ValueError(f"num_blocks and window must be >= 1, got {num_blocks}, {window}")
        self.num_blocks, self.block_size, self.window = num_blocks, block_size, window
        self._free: deque[int] = deque(range(num_blocks))
        self._tables: dict[int, list[int]] = {}     # seq_id -> block id per logical block (0 before held_from)
        self._held_from: dict[int, int] = {}        # seq_id -> its first held logical block

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def table(self, seq_id: int, start: int, end: int) -> list[int]:
        """The table for a step computing positions start..end-1, whose queries see back to start - window + 1
        (held since the last step: this only adds blocks past the table's end). The list is the pool's own."""
        table = self._tables.setdefault(seq_id, [])
        first = max(0, start - self.window + 1) // self.block_size
        assert first >= self._held_from.get(seq_id, 0), "a block the step needs was given back"
        need = (end - 1) // self.block_size + 1 - len(table)
        if need > len(self._free):
            raise RuntimeError(f"the sliding-window KV pool ({self.num_blocks} blocks) ran dry: "
                               "window_pool_blocks() undercounts")
        table.extend(self._free.popleft() for _ in range(need))
        return table

    def holds(self, seq_id: int, logical_block: int) -> bool:
        return self._held_from.get(seq_id, 0) <= logical_block < len(self._tables.get(seq_id, ()))

    def num_held(self, seq_id: int) -> int:
        return max(0, len(self._tables.get(seq_id, ())) - self._held_from.get(seq_id, 0))

    def release_behind(self, seq_id: int, num_computed: int) -> None:
        """Give back the blocks no query at position >= num_computed can attend to."""
        table = self._tables.get(seq_id)
        if table is None:
            return
        held_from = self._held_from.get(seq_id, 0)
        first = min(len(table), max(0, num_computed - self.window + 1) // self.block_size)
        for i in range(held_from, first):
            self._free.append(table[i])
            table[i] = 0
        self._held_from[seq_id] = max(held_from, first)

    def trim(self, seq_id: int, num_tokens: int) -> None:
        """Give back the blocks past position num_tokens - 1 (rejected speculative drafts)."""
        table = self._tables.get(seq_id)
        if table is None:
            return
        keep = max(-(-num_tokens // self.block_size), self._held_from.get(seq_id, 0))
        self._free.extend(table[keep:])
        del table[keep:]

    def free(self, seq_id: int) -> None:
        table = self._tables.pop(seq_id, None)
        if table is not None:
            self._free.extend(table[self._held_from.pop(seq_id, 0):])
