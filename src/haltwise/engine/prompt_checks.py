"""Request validation of a prompt against the vocabulary and the context window (SPEC §3)."""
from __future__ import annotations

from haltwise.errors import ContextLengthExceeded, InvalidRequest
from haltwise.sampling_params import SamplingParams


def check_prompt(prompt_token_ids: list[int], params: SamplingParams, vocab: int, window: int) -> tuple[list[int], int]:
    """Validate ids and lengths (no silent truncation). Returns (prompt ids, tokens truncated).

    Raises InvalidRequest (ids outside [0, vocab), an empty prompt) or ContextLengthExceeded.
    """
    if not prompt_token_ids:
        raise InvalidRequest("The prompt is empty: at least one token is required.", param="prompt")
    bad = [t for t in prompt_token_ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab]
    if bad:
        raise InvalidRequest(f"Token id {bad[0]!r} is outside the vocabulary [0, {vocab}).", param="prompt")
    bad = [t for t in params.stop_token_ids if not 0 <= t < vocab]
    if bad:
        raise InvalidRequest(f"stop_token_ids: {bad[0]} is outside the vocabulary [0, {vocab}).",
                             param="stop_token_ids")
    bad = [t for t, _ in params.logit_bias if not 0 <= t < vocab]
    if bad:
        raise InvalidRequest(f"logit_bias: token id {bad[0]} (key {str(bad[0])!r}) is outside the vocabulary "
                             f"[0, {vocab}).", param="logit_bias")
    truncated = 0
    n = params.truncate_prompt_tokens
    if n is not None and len(prompt_token_ids) > n:
        truncated = len(prompt_token_ids) - n
        prompt_token_ids = prompt_token_ids[-n:]
    if len(prompt_token_ids) >= window:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {window} tokens. However, your prompt has "
            f"{len(prompt_token_ids)} tokens, which leaves no room for a completion. Shorten the prompt "
            f"or set truncate_prompt_tokens.", param="prompt")
    if params.max_tokens is not None and len(prompt_token_ids) + params.max_tokens > window:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{len(prompt_token_ids) + params.max_tokens} tokens ({len(prompt_token_ids)} in the prompt, "
            f"{params.max_tokens} for the completion). Reduce the prompt or max_tokens.", param="max_tokens")
    return list(prompt_token_ids), truncated
