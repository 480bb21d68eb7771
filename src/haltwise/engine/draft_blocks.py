"""The draft model's KV bookkeeping: its own small block pool and, per sequence, what its KV holds.

Plain data, no tensors (the scheduler and the engine see only this). A sequence's draft state is a block
table in the draft pool and the tokens whose KV the draft model wrote there, position by position:
`tokens[:num_valid]` agree with the sequence's tokens (the KV is reusable), anything past them was a
draft the target rejected (overwritten later). Reconciling against the sequence's token ids is lazy
(DraftSeq.sync): whatever the target kept -- an accepted run, a cut at a stop, a preemption that kept
the tokens -- the draft KV stays valid exactly as far as the draft's own tokens still agree.

The pool never preempts the target: when it runs short, the draft states least recently used give their
blocks back (their sequences are recomputed by the draft when they draft again); a sequence longer than
the whole pool is not drafted by the draft model at all.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class DraftSeq:
    """One sequence's KV in the draft pool: tokens[p] is the token whose KV sits at position p."""

    block_table: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    num_valid: int = 0       # tokens[:num_valid] == the sequence's tokens[:num_valid] (as of the last sync)
    last_used: int = 0

    def sync(self, token_ids: list[int]) -> int:
        """Positions whose draft KV is still the sequence's own; the rest is dropped. Returns that count."""
        n = 0
        limit = min(len(self.tokens), len(token_ids))
        while n < limit and self.tokens[n] == token_ids[n]:
            n += 1
        del self.tokens[n:]
        self.num_valid = n
        return n


class DraftBlocks:
    """A free list of the draft pool's blocks and the DraftSeq of each sequence that holds any."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks - 1, -1, -1))   # pop() hands out block 0 first
        self._seqs: dict[int, DraftSeq] = {}
        self._clock = itertools.count(1)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_live_seqs(self) -> int:
        return len(self._seqs)

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def get(self, seq_id: int) -> DraftSeq:
        """seq_id's draft state (a new, empty one the first time); marks it most recently used."""
        state = self._seqs.get(seq_id)
        if state is None:
            state = self._seqs[seq_id] = DraftSeq()
        state.last_used = next(self._clock)
        return state

    def peek(self, seq_id: int) -> DraftSeq | None:
        return self._seqs.get(seq_id)

    def reserve(self, seq_id: int, num_positions: int) -> bool:
        """Make seq_id's table cover num_positions, taking back the least recently used other states'
        blocks when the free list runs short; False (nothing changed for others beyond evictions) when
        the pool cannot hold that many positions at all."""
        state = self.get(seq_id)
        need = math.ceil(num_positions / self.block_size) - len(state.block_table)
        if need <= 0:
            return True
        if math.ceil(num_positions / self.block_size) > self.num_blocks:
            return False
        while len(self._free) < need:
            victim = min((s for s in self._seqs if s != seq_id), key=lambda s: self._seqs[s].last_used)
            self.release(victim)
        state.block_table += [self._free.pop() for _ in range(need)]
        return True

    def release(self, seq_id: int) -> None:
        """Give back every block of seq_id's draft state and forget it (no-op when it has none)."""
        state = self._seqs.pop(seq_id, None)
        if state is not None:
            self._free += reversed(state.block_table)

    def trim(self, seq_id: int, num_positions: int) -> None:
        """Give back seq_id's blocks past the first num_positions positions."""
        state = self._seqs.get(seq_id)
        if state is None:
            return
        keep = math.ceil(num_positions / self.block_size)
        while len(state.block_table) > keep:
            self._free.append(state.block_table.pop())
