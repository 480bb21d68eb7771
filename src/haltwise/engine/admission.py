"""Admission control: reject at once what can never run or cannot queue; gate starts by a watermark.

    projected need (tokens) = prompt + max_tokens, capped by the window;  max_tokens None -> the window
    projected need (blocks) = ceil(need / block_size)

    add():       need > pool           -> AdmissionError("too_large")   (HTTP 400)
                 prompt >= window      -> AdmissionError("too_large")   (HTTP 400, no room for output)
                 queue full            -> AdmissionError("queue_full")  (HTTP 503 + Retry-After)
    schedule():  start a waiting sequence only while used blocks + the blocks it needs now (its tokens
                 plus one block of growth) <= watermark x pool, or when nothing is running (so every
                 admitted request can eventually start). Growth beyond that is the headroom's job, and
                 preemption's when the headroom runs out: reserving max_tokens (or the whole window when
                 it is omitted, as OpenAI clients often do) would serialise such requests.
"""
from __future__ import annotations

from dataclasses import dataclass

from haltwise.engine.prefix_chain import blocks_for
from haltwise.engine.sequence import Sequence

TOO_LARGE = "too_large"
QUEUE_FULL = "queue_full"


class AdmissionError(Exception):
    """A request refused before it starts; the server maps `kind` to an HTTP status.

    kind: "too_large" (can never fit: 400, code context_length_exceeded) or
          "queue_full" (503 with Retry-After: retry_after seconds).
    """

    def __init__(self, kind: str, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after


def projected_tokens(seq: Sequence, max_model_len: int) -> int:
    """Tokens the sequence may occupy at its longest: prompt + max_tokens, capped by its window."""
    window = min(seq.max_total_tokens, max_model_len)
    if seq.params.max_tokens is None:
        return window
    return min(seq.num_prompt_tokens + seq.params.max_tokens, window)


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """Pure admission decisions over counts; holds no queue and no blocks."""

    num_blocks: int         # KV pool size
    block_size: int         # tokens per block
    max_model_len: int      # context window the engine serves
    max_queue: int          # waiting sequences beyond which new requests are refused
    watermark: float        # share of the pool that running sequences' projected needs may fill
    retry_after: float = 1.0  # seconds suggested to a client refused because the queue is full

    def need_blocks(self, seq: Sequence) -> int:
        return blocks_for(projected_tokens(seq, self.max_model_len), self.block_size)

    def check_new(self, seq: Sequence, num_waiting: int) -> None:
        """Raise AdmissionError if `seq` may not even wait; return if it may be queued."""
        window = min(seq.max_total_tokens, self.max_model_len)
        if seq.num_prompt_tokens >= window:
            raise AdmissionError(
                TOO_LARGE, f"prompt has {seq.num_prompt_tokens} tokens; the context window is {window} "
                           f"tokens and must leave room for at least one output token")
        need = self.need_blocks(seq)
        if need > self.num_blocks:
            tokens = projected_tokens(seq, self.max_model_len)
            raise AdmissionError(
                TOO_LARGE, f"request needs {tokens} tokens of KV cache ({need} blocks of {self.block_size}: "
                           f"prompt {seq.num_prompt_tokens} + max_tokens {seq.params.max_tokens}); "
                           f"the KV pool holds {self.num_blocks * self.block_size} tokens ({self.num_blocks} blocks)")
        if num_waiting >= self.max_queue:
            raise AdmissionError(
                QUEUE_FULL, f"server busy: {num_waiting} requests already waiting (max_queue {self.max_queue})",
                retry_after=self.retry_after)

    def may_start(self, seq: Sequence, num_used_blocks: int, num_running: int) -> bool:
        """True if the waiting `seq` may start now under the watermark."""
        if num_running == 0:
            return True
        start_need = blocks_for(seq.num_tokens, self.block_size) + 1
        return num_used_blocks + start_need <= self.watermark * self.num_blocks
