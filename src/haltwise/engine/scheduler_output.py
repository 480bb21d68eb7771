"""What the scheduler hands the engine for one step: the chunks to compute, who was preempted, the token count."""
from __future__ import annotations

from dataclasses import dataclass, field

from haltwise.engine.sequence import Sequence
from haltwise.engine.step_cost import prefill_pairs


@dataclass(slots=True)
class ScheduledSeq:
    """seq.token_ids[start : start + num_new_tokens] are computed this step (positions start..)."""

    seq: Sequence
    num_new_tokens: int
    start: int = field(init=False)     # seq.num_computed_tokens when scheduled
    samples: bool = field(init=False)  # this chunk reaches the end of the sequence -> sample a token
    # Speculative drafts verified after the chunk (positions start + num_new_tokens ..); not counted in
    # num_new_tokens: only accepted ones become computed (Scheduler.after_drafts).
    draft_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start = self.seq.num_computed_tokens
        self.samples = self.start + self.num_new_tokens == self.seq.num_tokens

    @property
    def is_decode(self) -> bool:
        return self.num_new_tokens == 1 and self.samples


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSeq]
    preempted: list[Sequence]
    num_batched_tokens: int

    @property
    def num_decode_tokens(self) -> int:
        return sum(1 for s in self.scheduled if s.is_decode)

    @property
    def num_attention_pairs(self) -> int:
        """(query, key) position pairs the step's attention computes (step_cost.py)."""
        return sum(prefill_pairs(s.start, s.num_new_tokens + len(s.draft_token_ids)) for s in self.scheduled)

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_batched_tokens - self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        return not self.scheduled
