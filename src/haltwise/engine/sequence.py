"""A sequence is plain data: token ids, counters, a block table, a status. No tensors."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.termination import Termination


class SequenceStatus(IntEnum):
    WAITING = 0    # queued, or preempted and waiting to be recomputed
    RUNNING = 1
    FINISHED = 2   # termination is set; blocks are freed


@dataclass(slots=True, eq=False)
class Sequence:
    """One generation stream (a request with n > 1 has n sequences).

    Invariant (vLLM v1 style): num_computed_tokens catches up to num_tokens. A step schedules
    min(num_tokens - num_computed_tokens, budget) tokens; decode is the case where that is 1.

        token_ids:  [ prompt ............ | output ...... ]
                     <--- num_computed_tokens ---> <- uncomputed ->
    """

    seq_id: int
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    max_total_tokens: int                 # context window for this sequence (prompt + output cap)
    arrival_time: float = field(default_factory=time.monotonic)
    deadline: float | None = None         # monotonic time after which the system layer ends it
    token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0            # prompt tokens served from the prefix cache (pool and tiers)
    num_tier_tokens: dict[str, int] = field(default_factory=dict)   # of which restored per tier (ram, disk)
    block_table: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    termination: Termination | None = None
    num_preemptions: int = 0
    first_token_time: float | None = None
    first_scheduled_time: float | None = None   # when it first left the waiting queue (the end of "queue")
    finish_time: float | None = None
    num_draft_tokens: int = 0             # speculative drafts verified for this sequence (engine/speculation.py)
    num_accepted_draft_tokens: int = 0    # of which accepted
    # The prompt's logits are wanted at every position (engine/prompt_logprobs.py) until scored: no
    # prefix-cache hit then, and chunks capped at PROMPT_LOGITS_CHUNK. Cleared once the prompt is scored.
    needs_prompt_logits: bool = False
    arrival_step: int = 0                 # the scheduler step at which it was queued (priority aging)

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_token_ids)

    def append_token(self, token_id: int) -> None:
        """The only way tokens are added."""
        self.token_ids.append(token_id)
        if self.first_token_time is None:
            self.first_token_time = time.monotonic()

    def truncate_output(self, num_output_tokens: int) -> None:
        """Drop output tokens after a stop was found (they never reach the user or usage)."""
        del self.token_ids[self.num_prompt_tokens + num_output_tokens:]
        self.num_computed_tokens = min(self.num_computed_tokens, len(self.token_ids))

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[len(self.prompt_token_ids):]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_prefill(self) -> bool:
        """True while prompt tokens (or, after preemption, any earlier tokens) are not yet computed."""
        return self.num_uncomputed_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    @property
    def last_token_id(self) -> int:
        return self.token_ids[-1]
