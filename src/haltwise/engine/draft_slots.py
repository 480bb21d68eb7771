"""Speculative drafts in a step: the last thing scheduled, from the token budget and free blocks left.

Drafts never preempt, delay or displace any sequence; short of budget or blocks, a decode gets none this
step, and no decode gets any in a step with more than speculative_max_batch decodes (engine/speculation.py).
"""
from __future__ import annotations

from collections.abc import Callable

from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.scheduler_output import ScheduledSeq
from haltwise.engine.sequence import Sequence


def add_drafts(scheduled: list[ScheduledSeq], budget: int, propose: Callable[[Sequence, int], list[int]],
               allocator: BlockAllocator, max_batch: int | None) -> None:
    """Attach propose(seq, k_max)'s drafts to the scheduled decodes, reserving their slots.

    A run of 1 + k tokens appends at most k + 1 tokens: k stays below what max_tokens and the
    context window still allow, so a run never overruns either."""
    if max_batch is not None and sum(s.is_decode for s in scheduled) > max_batch:
        return
    for s in scheduled:
        if budget <= 0:
            return
        if not s.is_decode:
            continue
        seq = s.seq
        left = seq.max_total_tokens - seq.num_tokens
        if seq.params.max_tokens is not None:
            left = min(left, seq.params.max_tokens - seq.num_output_tokens)
        room = (len(seq.block_table) + allocator.num_free_blocks) * allocator.block_size
        k_max = min(budget, left - 1, room - seq.num_tokens)   # free blocks only: nobody is preempted
        drafts = propose(seq, k_max)[:k_max] if k_max > 0 else []
        if drafts and allocator.ensure_slots(seq, seq.num_tokens + len(drafts)):
            s.draft_token_ids = drafts
            budget -= len(drafts)
