"""Token-level termination checks as small pure functions, in the SPEC §2 order.

Before each engine step:   check_cancelled, check_deadline                 (system layer)
After each appended token: check_stop_token, check_eos                     (content: text complete;
                           [stop strings / presets: SequenceStopper]        skipped below min_tokens)
                           check_max_tokens, check_context_limit           (limits: text cut)
                           check_repetition                                (rule layer)
Each returns the Reason it finds, or None. Only SequenceStopper and the engine combine them.
"""
from __future__ import annotations

from haltwise.stopping.termination import Reason


def content_checks_active(num_output_tokens: int, min_tokens: int) -> bool:
    """eos, stop tokens and stop strings count only once min_tokens output tokens exist."""
    return num_output_tokens >= min_tokens


def check_cancelled(cancelled: bool) -> Reason | None:
    return Reason.CANCELLED if cancelled else None


def check_deadline(now: float, deadline: float | None) -> Reason | None:
    """`now` and `deadline` on the same monotonic clock; None = no deadline."""
    return Reason.TIMEOUT if deadline is not None and now >= deadline else None


def check_stop_token(token_id: int, stop_token_ids: frozenset[int]) -> Reason | None:
    return Reason.STOP_TOKEN if token_id in stop_token_ids else None


def check_eos(token_id: int, eos_token_ids: frozenset[int], ignore_eos: bool) -> Reason | None:
    return Reason.EOS if not ignore_eos and token_id in eos_token_ids else None


def check_max_tokens(num_output_tokens: int, max_tokens: int | None) -> Reason | None:
    """max_tokens None = only the context window limits the output."""
    return Reason.MAX_TOKENS if max_tokens is not None and num_output_tokens >= max_tokens else None


def check_context_limit(num_prompt_tokens: int, num_output_tokens: int, max_total_tokens: int) -> Reason | None:
    return Reason.CONTEXT_LIMIT if num_prompt_tokens + num_output_tokens >= max_total_tokens else None


def check_repetition(period: int | None) -> Reason | None:
    """`period` as returned by RepetitionDetector.append."""
    return Reason.REPETITION if period is not None else None
