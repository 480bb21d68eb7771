"""What the engine hands back: per request, one CompletionOutput per sequence (vLLM-shaped)."""
from __future__ import annotations

from dataclasses import dataclass, field

from haltwise.stopping.termination import Termination


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)  # (token_id, logprob), best first
    rank: int | None = None             # the token's rank in the distribution (1 = best), when computed


@dataclass
class CompletionOutput:
    index: int
    text: str = ""                      # released text so far (final text once finished)
    token_ids: list[int] = field(default_factory=list)  # output tokens so far (after stop truncation)
    delta_text: str = ""                # text released by this update (streams concatenate these)
    delta_token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    delta_logprobs: list[TokenLogprob] | None = None
    termination: Termination | None = None
    tool_calls: list[dict] | None = None  # offline LLM.chat with tools: the calls, OpenAI-shaped (toolcalls/)
    # A think section (stopping/reasoning.py), split from `text`; the tags are in neither. Not held back:
    # stops never act on it, so concatenated deltas always equal the final reasoning text.
    reasoning_text: str = ""
    delta_reasoning_text: str = ""
    num_reasoning_tokens: int = 0       # reasoning tokens so far (tags not counted)
    recipient: str | None = None        # harmony (stopping/harmony.py): the answer is addressed to=... (a tool
                                        # call: "functions.NAME", `text` its arguments); None: the answer is text
    num_draft_tokens: int = 0           # speculative drafts verified (engine/speculation.py)
    num_accepted_draft_tokens: int = 0  # of which accepted

    @property
    def finished(self) -> bool:
        return self.termination is not None

    @property
    def finish_reason(self) -> str | None:
        return self.termination.finish_reason if self.termination else None

    @property
    def stop_reason(self) -> str | int | None:
        return self.termination.stop_reason if self.termination else None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    num_truncated_prompt_tokens: int = 0   # > 0 only when truncate_prompt_tokens asked for it
    num_cached_tokens: int = 0             # prompt tokens served from the prefix cache
    num_tier_tokens: dict[str, int] = field(default_factory=dict)   # of which restored from ram / disk

    @property
    def cached_by_tier(self) -> dict[str, int]:
        """Where the cached prompt tokens came from: {pool, ram, disk}."""
        ram, disk = self.num_tier_tokens.get("ram", 0), self.num_tier_tokens.get("disk", 0)
        return {"pool": max(0, self.num_cached_tokens - ram - disk), "ram": ram, "disk": disk}
    first_token_latency: float | None = None  # seconds from arrival to first token
    latency: float | None = None           # seconds from arrival to finish
    queue_time: float | None = None        # seconds from arrival to the first step that ran it
    # The prompt tokens' logprobs (first None), when asked (SamplingParams.prompt_logprobs), once computed
    prompt_logprobs: list[TokenLogprob | None] | None = None

    @property
    def finished(self) -> bool:
        return all(o.finished for o in self.outputs)
