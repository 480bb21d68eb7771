"""Continuous-batching scheduler: one invariant, num_computed_tokens catches up to num_tokens.

Each step spends a token budget (max_num_batched_tokens) over at most max_num_seqs sequences:

    1. running decodes   (1 token each, admission order)   -- never starved by prefills
    2. running prefills  (chunks of min(remaining, budget), sized to a target step time: step_cost.py)
    3. waiting sequences (round-robin across requests, engine/fairness.py; start while blocks and the
       watermark allow; first chunk this step)
    4. speculative drafts for the decodes of step 1, from the budget and free blocks left (draft_slots.py)

A step that needs a block when none is free preempts the most recently admitted running sequence:
its blocks are freed, num_computed_tokens drops to 0 and it goes to the FRONT of the waiting queue
with its token ids (prompt + generated) intact, to be recomputed as a prefill. Sampling happens
only for a chunk that reaches the sequence's end, so a preempted sequence resumes exactly where it was.
A request with nothing running may also displace the latest sequence of the request running the most
(fairness.py), the same way. Under --scheduling-policy priority (priority.py), running sequences are kept
in effective-priority order (so the one preempted first is the least urgent), starts go by effective
priority, and a waiting sequence may preempt a strictly less urgent running one.

The scheduler never touches tensors, the tokenizer or the model; `finish` is the only place a
sequence becomes FINISHED.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from haltwise.config import EngineConfig
from haltwise.engine.admission import AdmissionError, AdmissionPolicy
from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.draft_slots import add_drafts
from haltwise.engine.fairness import FairStarts
from haltwise.engine.priority import PriorityRank
from haltwise.engine.prompt_logprobs import PROMPT_LOGITS_CHUNK
from haltwise.engine.scheduler_output import ScheduledSeq, SchedulerOutput
from haltwise.engine.sequence import Sequence, SequenceStatus
from haltwise.engine.step_cost import SOLO_FACTOR, StepBudget, StepCost
from haltwise.stopping.termination import Termination

__all__ = ["AdmissionError", "Scheduler"]


class Scheduler:
    """Decides, step by step, which tokens of which sequences are computed, within memory and budget."""

    def __init__(self, config: EngineConfig, allocator: BlockAllocator, max_model_len: int,
                 retry_after: float = 1.0, step_cost: StepCost | None = None):
        """step_cost: the host's measured step times (the engine feeds it); None sizes chunks by budget only."""
        self.config = config
        self.step_cost = step_cost if config.step_target_s > 0 else None
        # Every running decode must fit in each step's budget, so the budget also caps running sequences.
        self.max_num_seqs = min(config.max_num_seqs, config.max_num_batched_tokens)
        self.allocator = allocator
        self.max_model_len = max_model_len
        self.policy = AdmissionPolicy(num_blocks=allocator.num_blocks, block_size=allocator.block_size,
                                      max_model_len=max_model_len, max_queue=config.max_queue,
                                      watermark=config.watermark, retry_after=retry_after)
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []  # admission order: the last one is preempted first
        self.num_preemptions = 0
        self.num_steps = 0                  # schedule() calls so far: the clock of priority aging
        # After allocate_prompt: fills the blocks after the pool's hits from a prompt cache beyond the pool
        # (engine/prompt_cache/engine_link.py), marking them computed; None = no such cache.
        self.restore: Callable[[Sequence], None] | None = None

    # ---- views --------------------------------------------------------------------------------
    @property
    def running(self) -> tuple[Sequence, ...]:
        return tuple(self._running)

    @property
    def waiting(self) -> tuple[Sequence, ...]:
        return tuple(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def has_unfinished(self) -> bool:
        return bool(self._running or self._waiting)

    # ---- requests in and out ------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a new sequence, or raise AdmissionError (too_large / queue_full) at once."""
        self.policy.check_new(seq, len(self._waiting))
        seq.status = SequenceStatus.WAITING
        seq.arrival_step = self.num_steps
        self._waiting.append(seq)

    def add_group(self, seqs: list[Sequence]) -> None:
        """Queue the n sequences of one request all together, or none of them."""
        for seq in seqs:
            self.policy.check_new(seq, len(self._waiting) + len(seqs) - 1)
        for seq in seqs:
            seq.status = SequenceStatus.WAITING
            seq.arrival_step = self.num_steps
            self._waiting.append(seq)

    def finish(self, seq: Sequence, termination: Termination) -> None:
        """The only place a sequence becomes FINISHED: record why, free its blocks once, forget it.

        A second call for the same sequence is a no-op (the first termination stands).
        """
        if seq.status == SequenceStatus.FINISHED:
            return
        seq.termination = termination
        seq.status = SequenceStatus.FINISHED
        seq.finish_time = time.monotonic()
        self.allocator.free(seq)
        self._remove(seq)

    def abort(self, request_id: str) -> list[Sequence]:
        """Remove the request's unfinished sequences and free their blocks now.

        Returns them; the engine then calls finish(seq, cancelled) for each.
        """
        removed = [s for s in (*self._running, *self._waiting) if s.request_id == request_id]
        for seq in removed:
            self.allocator.free(seq)
            self._remove(seq)
        return removed

    def _remove(self, seq: Sequence) -> None:
        if seq in self._running:
            self._running.remove(seq)
        elif seq in self._waiting:
            self._waiting.remove(seq)

    # ---- the step -----------------------------------------------------------------------------
    def schedule(self, propose: Callable[[Sequence, int], list[int]] | None = None) -> SchedulerOutput:
        """Choose this step's tokens: running decodes, then running prefill chunks, then new starts, then
        drafts: propose(seq, k_max) gives at most k_max draft tokens for a scheduled decode."""
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted: list[Sequence] = []
        self.num_steps += 1
        rank = PriorityRank(self.config.scheduling_policy == "priority", self.config.priority_aging_steps,
                            self.num_steps)
        if rank.enabled:
            self._running.sort(key=rank)    # stable: admission order among equals; the back is preempted first

        # 1. Decodes, in admission order. Growing by one token may need a block; if none is free,
        #    preempt from the back of `running` (which this loop has not reached yet, or is `seq`).
        i = 0
        while i < len(self._running) and budget > 0:
            seq = self._running[i]
            if seq.num_uncomputed_tokens != 1:
                i += 1
                continue
            if not self._reserve(seq, seq.num_tokens, preempted):
                break  # seq itself was preempted: nothing after it remains
            scheduled.append(ScheduledSeq(seq, 1))
            budget -= 1
            i += 1

        # 2. Running prefills (chunked prompts, recomputation): blocks were allocated at start.
        #    While others wait, a chunk takes at most long_prefill_chunk tokens (and at most half the
        #    budget), so a long prompt never holds whole steps against short arrivals, whose TTFT
        #    would otherwise be the long prefill's; alone, it takes the whole budget.
        #    Every chunk also fits the step's target time (step_cost.py), after the decodes' share.
        chunk_cap = budget
        if self._waiting and self.config.enable_chunked_prefill:
            chunk_cap = max(1, min(self.config.long_prefill_chunk, self.config.max_num_batched_tokens // 2))
        timer = self._step_budget(scheduled)
        for seq in list(self._running):
            if budget <= 0:
                break
            if seq.num_uncomputed_tokens <= 1:
                continue
            n = min(seq.num_uncomputed_tokens, budget, chunk_cap, self._logits_cap(seq))
            if timer is not None:
                n = timer.chunk(seq.num_computed_tokens, n)
            covered = self.allocator.ensure_slots(seq, seq.num_computed_tokens + n)
            assert covered, "a started sequence's blocks cover all of its token ids"
            scheduled.append(ScheduledSeq(seq, n))
            budget -= n

        # 3. Start waiting sequences, fairly across requests (fairness.py): stop at the first that cannot start.
        if self._waiting and budget > 0:
            budget = self._start_waiting(scheduled, preempted, budget, rank, timer)

        # 4. Drafts, last: from what the others left (draft_slots.py).
        if propose is not None:
            add_drafts(scheduled, budget, propose, self.allocator, self.config.speculative_max_batch)
        return SchedulerOutput(scheduled, preempted,
                               sum(s.num_new_tokens + len(s.draft_token_ids) for s in scheduled))

    def after_drafts(self, seq: Sequence, num_accepted: int) -> None:
        """After a verified run appended its tokens: the accepted drafts' KV is computed, the rejected
        positions' is not (it is overwritten later), and blocks past the sequence's length go back."""
        if seq.status != SequenceStatus.RUNNING:
            return
        seq.num_computed_tokens += num_accepted
        assert seq.num_computed_tokens == seq.num_tokens - 1, "a verified run leaves one token to compute"
        self.allocator.on_computed(seq)
        self.allocator.trim(seq, seq.num_tokens)

    def _step_budget(self, decodes: list[ScheduledSeq]) -> StepBudget | None:
        """This step's time for prefill chunks: the target (SOLO_FACTOR of it with no decode to delay) less
        the decodes' predicted share; None when chunks are sized by the token budget only."""
        if self.step_cost is None or not self.config.enable_chunked_prefill:
            return None
        target = self.config.step_target_s * (1 if decodes else SOLO_FACTOR)
        return self.step_cost.step_budget(target, len(decodes), sum(s.seq.num_tokens for s in decodes),
                                          self.config.long_prefill_chunk)

    def _start_waiting(self, scheduled: list[ScheduledSeq], preempted: list[Sequence], budget: int,
                       rank: PriorityRank, timer: StepBudget | None = None) -> int:
        """Start waiting sequences in FairStarts order while budget, slots and blocks allow; returns the budget left.

        A request with nothing running that cannot start displaces the latest sequence of the request running
        the most (a displaced sequence already scheduled this step is unscheduled, its tokens refunded).
        """
        order = FairStarts(self._waiting, self._running, rank)
        while budget > 0 and (seq := order.next()) is not None:
            while not self._can_start(seq):
                victim = order.victim(seq, self._running)
                if victim is None and (victim := rank.victim(seq, self._running)) is not None:
                    order.preempted(victim)
                if victim is None:
                    break
                for i, s in enumerate(scheduled):
                    if s.seq is victim:
                        budget += scheduled.pop(i).num_new_tokens
                        break
                self._preempt(victim)
                preempted.append(victim)
            if not self._can_start(seq):
                break
            remaining = seq.num_tokens - self.allocator.lookup_prefix(seq)
            if not self.config.enable_chunked_prefill and remaining > budget and scheduled:
                break  # waits for a step where it fits whole (or runs alone when larger than the budget)
            order.started(seq)
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
            self.allocator.allocate_prompt(seq)
            if self.restore is not None:
                self.restore(seq)
            seq.status = SequenceStatus.RUNNING
            self._running.append(seq)
            n = seq.num_uncomputed_tokens
            if self.config.enable_chunked_prefill:
                n = min(n, budget, self._logits_cap(seq))
                if timer is not None:
                    n = timer.chunk(seq.num_computed_tokens, n)
            scheduled.append(ScheduledSeq(seq, n))
            budget -= n
        self._waiting = deque(s for s in self._waiting if s.status == SequenceStatus.WAITING)
        return budget

    def _logits_cap(self, seq: Sequence) -> int:
        """A chunk's size limit: PROMPT_LOGITS_CHUNK while seq wants logits at every prompt position."""
        return PROMPT_LOGITS_CHUNK if seq.needs_prompt_logits and self.config.enable_chunked_prefill else 1 << 62

    def _can_start(self, seq: Sequence) -> bool:
        return (len(self._running) < self.max_num_seqs
                and self.policy.may_start(seq, self.allocator.num_used_blocks, len(self._running))
                and self.allocator.can_allocate_seq(seq))

    def _reserve(self, seq: Sequence, num_tokens: int, preempted: list[Sequence]) -> bool:
        """Make seq's block table cover num_tokens positions, preempting from the back as needed.

        Returns False if seq itself had to be preempted.
        """
        while not self.allocator.ensure_slots(seq, num_tokens):
            victim = self._running[-1]
            self._preempt(victim)
            preempted.append(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Free seq's blocks and queue it first in line for recomputation (prompt + generated tokens)."""
        self._running.remove(seq)
        self.allocator.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self._waiting.appendleft(seq)

    def after_step(self, out: SchedulerOutput) -> None:
        """Record that the scheduled tokens were computed; cache newly full blocks."""
        for s in out.scheduled:
            seq = s.seq
            if seq.status != SequenceStatus.RUNNING:
                continue  # finished or aborted while the step ran: its blocks are already gone
            assert seq.num_computed_tokens == s.start, "after_step called twice for one step"
            seq.num_computed_tokens += s.num_new_tokens
            self.allocator.on_computed(seq)
