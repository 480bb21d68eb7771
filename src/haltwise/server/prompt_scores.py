"""Response shapes of prompt logprobs (engine/prompt_logprobs.py): OpenAI's legacy echo shape and vLLM's
`prompt_logprobs` field. Pure functions, no I/O.

    echo + logprobs (completions):  logprobs = {tokens, token_logprobs, top_logprobs, text_offset} over the
                                    prompt's tokens (first: null) followed by the generated ones
    prompt_logprobs (vLLM):         [null, {"<id>": {logprob, rank, decoded_token}, ...}, ...], one entry per
                                    prompt token: the token itself and its top alternatives
"""
from __future__ import annotations

from typing import Any

from haltwise.outputs import TokenLogprob


def _text(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def echo_logprobs(tokenizer: Any, prompt_ids: list[int], lps: list[TokenLogprob | None],
                  generated: dict[str, Any] | None, text_offset: int = 0) -> dict[str, Any]:
    """The legacy completions logprobs of an echoed prompt, then `generated` (the same shape) appended."""
    tokens, offsets = [], []
    for token_id in prompt_ids:
        tokens.append(_text(tokenizer, token_id))
        offsets.append(text_offset)
        text_offset += len(tokens[-1])
    body = {"tokens": tokens, "token_logprobs": [lp.logprob if lp else None for lp in lps],
            "top_logprobs": [{_text(tokenizer, t): v for t, v in lp.top} if lp else None for lp in lps],
            "text_offset": offsets}
    for key in body if generated else ():
        body[key] = body[key] + generated[key]
    return body


def vllm_prompt_logprobs(tokenizer: Any, lps: list[TokenLogprob | None]) -> list[dict[str, Any] | None]:
    """vLLM's prompt_logprobs: per prompt token, {str(id): {logprob, rank, decoded_token}} for the token and
    its top alternatives (the token's own rank is computed; an alternative's rank is its place in the top)."""
    out: list[dict[str, Any] | None] = []
    for lp in lps:
        if lp is None:
            out.append(None)
            continue
        entry = {str(t): {"logprob": v, "rank": r, "decoded_token": _text(tokenizer, t)}
                 for r, (t, v) in enumerate(lp.top, start=1)}
        entry[str(lp.token_id)] = {"logprob": lp.logprob, "rank": lp.rank,
                                   "decoded_token": _text(tokenizer, lp.token_id)}
        out.append(entry)
    return out
