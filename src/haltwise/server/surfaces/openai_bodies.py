"""OpenAI response bodies and stream chunks built from engine outputs (pure functions, no I/O).

Each choice carries the OpenAI fields unchanged plus vLLM's `stop_reason` and haltwise's
`termination` ({reason, layer, detail, token_index, char_offset}). Choice indices of a request with
several prompts are prompt_index * n + output.index, as in OpenAI.
"""
from __future__ import annotations

from typing import Any, Callable

from haltwise.outputs import CompletionOutput, RequestOutput, TokenLogprob
from haltwise.server.generation import raise_if_failed
from haltwise.server.prompt_scores import echo_logprobs, vllm_prompt_logprobs
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.response import ToolDeltaStream, chat_message


def usage(outs: list[RequestOutput]) -> dict[str, Any]:
    prompt = sum(len(o.prompt_token_ids) for o in outs)
    completion = sum(len(c.token_ids) for o in outs for c in o.outputs)
    body = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(o.num_cached_tokens for o in outs)},
            "prompt_cache": tier_totals(outs)}
    reasoning = sum(c.num_reasoning_tokens for o in outs for c in o.outputs)
    if reasoning:   # completion_tokens counts them too (and the think tags), as OpenAI and vLLM do
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    drafted = sum(c.num_draft_tokens for o in outs for c in o.outputs)
    if drafted:     # speculative decoding (engine/speculation.py): draft tokens verified, and accepted
        body["speculation"] = {"drafted": drafted,
                               "accepted": sum(c.num_accepted_draft_tokens for o in outs for c in o.outputs)}
    return body


def tier_totals(outs: list[RequestOutput]) -> dict[str, int]:
    """usage.prompt_cache: which tier served the cached prompt tokens, {pool, ram, disk} (haltwise's field)."""
    totals = {"pool": 0, "ram": 0, "disk": 0}
    for out in outs:
        for tier, tokens in out.cached_by_tier.items():
            totals[tier] += tokens
    return totals


def end_fields(o: CompletionOutput, out: RequestOutput) -> dict[str, Any]:
    """finish_reason, stop_reason and termination (all None until the output has finished)."""
    fields: dict[str, Any] = {"finish_reason": o.finish_reason, "stop_reason": o.stop_reason,
                              "termination": o.termination.to_dict() if o.termination else None}
    if out.num_truncated_prompt_tokens:
        fields["truncated_prompt_tokens"] = out.num_truncated_prompt_tokens
    return fields


def _token_text(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def completion_logprobs(tokenizer: Any, lps: list[TokenLogprob] | None, text_offset: int) -> dict[str, Any] | None:
    """Legacy completions shape: tokens, token_logprobs, top_logprobs, text_offset."""
    if lps is None:
        return None
    tokens, offsets = [], []
    for lp in lps:
        tokens.append(_token_text(tokenizer, lp.token_id))
        offsets.append(text_offset)
        text_offset += len(tokens[-1])
    return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{_token_text(tokenizer, t): v for t, v in lp.top} for lp in lps],
            "text_offset": offsets}


def chat_logprobs(tokenizer: Any, lps: list[TokenLogprob] | None) -> dict[str, Any] | None:
    """Chat shape: content = [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]."""
    if lps is None:
        return None

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = _token_text(tokenizer, token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]}
                        for lp in lps]}


def completion_body(rid: str, created: int, model: str, outs: list[RequestOutput], n: int,
                    echo: list[str] | None, tokenizer: Any, prompt_logprobs: bool = False) -> dict[str, Any]:
    """prompt_logprobs: add vLLM's `prompt_logprobs` to each choice (asked by that field)."""
    choices = []
    for p, out in enumerate(outs):
        prefix = echo[p] if echo else ""
        for o in out.outputs:
            logprobs = completion_logprobs(tokenizer, o.logprobs, len(prefix))
            if echo and logprobs is not None and out.prompt_logprobs is not None:
                logprobs = echo_logprobs(tokenizer, out.prompt_token_ids, out.prompt_logprobs, logprobs)
            choice = {"index": p * n + o.index, "text": prefix + o.text, "logprobs": logprobs, **end_fields(o, out)}
            if prompt_logprobs:
                choice["prompt_logprobs"] = vllm_prompt_logprobs(tokenizer, out.prompt_logprobs or [])
            choices.append(choice)
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": choices, "usage": usage(outs)}


def chat_body(rid: str, created: int, model: str, out: RequestOutput, tokenizer: Any,
              tool_calls: ToolCallConstraint | None = None) -> dict[str, Any]:
    choices = [{"index": o.index,
                "message": _with_reasoning(chat_message(tool_calls, o.text, rid, o.index, o.recipient), o),
                "logprobs": chat_logprobs(tokenizer, o.logprobs), **end_fields(o, out)} for o in out.outputs]
    body = {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": choices, "usage": usage([out])}
    if out.prompt_logprobs is not None:       # vLLM: top level on chat
        body["prompt_logprobs"] = vllm_prompt_logprobs(tokenizer, out.prompt_logprobs)
    return body


def _with_reasoning(message: dict[str, Any], o: CompletionOutput) -> dict[str, Any]:
    """vLLM's `reasoning_content`, present when the model reasoned (a non-empty think section)."""
    return {**message, "reasoning_content": o.reasoning_text} if o.reasoning_text else message


class Chunker:
    """Turns merged updates into stream chunks; each choice's final chunk is sent exactly once."""

    def __init__(self, chat: bool, rid: str, created: int, model: str, n: int, tokenizer: Any,
                 include_usage: bool, echo: Callable[[int, RequestOutput], str] | None = None,
                 tool_calls: ToolCallConstraint | None = None):
        self.chat, self.rid, self.created, self.model, self.n = chat, rid, created, model, n
        self.tool_calls = tool_calls          # chat with tools: deltas go through a ToolDeltaStream per choice
        self.tool_streams: dict[int, ToolDeltaStream] = {}
        self.tokenizer = tokenizer
        self.include_usage = include_usage
        self.echo = echo
        self.started: set[int] = set()
        self.ended: set[int] = set()
        self.offsets: dict[int, int] = {}
        self.finals: dict[int, RequestOutput] = {}

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {"id": self.rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                                 "created": self.created, "model": self.model, "choices": choices}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self, p: int, out: RequestOutput) -> list[dict[str, Any]]:
        """Chunks for one update of prompt p. Raises HaltwiseError if it ended in error/cancelled."""
        if out.finished:
            raise_if_failed(out)
            self.finals[p] = out
        roles, choices = [], []
        for o in out.outputs:
            index = p * self.n + o.index
            if index in self.ended:
                continue
            prefix = ""
            if index not in self.started:
                self.started.add(index)
                if self.chat:
                    roles.append({"index": index, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None})
                elif self.echo:
                    prefix = self.echo(p, out)
            if not (o.delta_text or prefix or o.delta_token_ids or o.finished):
                continue
            offset = self.offsets.get(index, 0)
            self.offsets[index] = offset + len(prefix) + len(o.delta_text)
            ended = o.finished
            if ended:
                self.ended.add(index)
            if self.chat and self.tool_calls is not None:
                if o.delta_reasoning_text:
                    choices.append({"index": index, "delta": {"reasoning_content": o.delta_reasoning_text},
                                    "logprobs": None, "finish_reason": None, "stop_reason": None})
                choices += self._tool_choices(index, o, ended)
                choice = {"index": index, "delta": {}, "logprobs": None}
                if not ended:
                    continue
            elif self.chat:
                delta = {"reasoning_content": o.delta_reasoning_text} if o.delta_reasoning_text else {}
                if o.delta_text or not (ended or delta):
                    delta["content"] = o.delta_text
                choice = {"index": index, "delta": delta,
                          "logprobs": chat_logprobs(self.tokenizer, o.delta_logprobs)}
            else:
                logprobs = completion_logprobs(self.tokenizer, o.delta_logprobs, offset + len(prefix))
                if prefix and logprobs is not None and out.prompt_logprobs is not None:
                    logprobs = echo_logprobs(self.tokenizer, out.prompt_token_ids, out.prompt_logprobs, logprobs)
                choice = {"index": index, "text": prefix + o.delta_text, "logprobs": logprobs}
            choice.update(end_fields(o, out) if ended else {"finish_reason": None, "stop_reason": None})
            choices.append(choice)
        if self.tool_calls is not None:      # one chunk per delta: a call's events stay in order
            return [self._chunk(c) for c in [roles] + [[c] for c in choices] if c]
        return [self._chunk(c) for c in (roles, choices) if c]

    def _tool_choices(self, index: int, o: CompletionOutput, ended: bool) -> list[dict[str, Any]]:
        """The content / tool-call deltas of this update (held-back text released at the end)."""
        stream = self.tool_streams.get(index)
        if stream is None:
            stream = self.tool_streams[index] = ToolDeltaStream(self.tool_calls, self.rid, index)
        deltas = stream.feed(o.delta_text, o.recipient) + (stream.finish() if ended else [])
        return [{"index": index, "delta": d, "logprobs": None, "finish_reason": None, "stop_reason": None}
                for d in deltas]

    def usage_chunk(self) -> dict[str, Any] | None:
        if not self.include_usage:
            return None
        outs = [self.finals[p] for p in sorted(self.finals)]
        return {"id": self.rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [], "usage": usage(outs)}

