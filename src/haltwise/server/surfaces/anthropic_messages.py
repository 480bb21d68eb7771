"""POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages over the chat core.

This module only translates: the request into a ChatTurn (anthropic_protocol.py), the ChatResult into a
message, ChatDeltas into Anthropic's event sequence. Content blocks, streamed or not, are the same: a
thinking block (when the model reasoned), a text block (when there is text, or nothing else), then one
tool_use block per call. Stream order (every started block is stopped before the next starts):

    message_start, ping, [content_block_start(thinking), content_block_delta(thinking_delta)...,
    content_block_delta(signature_delta), content_block_stop], [content_block_start(text),
    content_block_delta(text_delta)..., content_block_stop], [content_block_start(tool_use),
    content_block_delta(input_json_delta)..., content_block_stop]...,
    message_delta{stop_reason, stop_sequence, usage, termination}, message_stop

A thinking block's `signature` is "sha256:" + the hex SHA-256 of its thinking text: a digest, not an
attestation (anyone can compute it; nothing is signed with a key), so a client can tell a block that was
edited; blocks sent back in history are accepted whatever their signature.

An error after the stream began is an `error` event (Anthropic's shape), then the stream ends.
"""
from __future__ import annotations

import hashlib
import json
import logging
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from haltwise.errors import HaltwiseError
from haltwise.server.chat_core import ChatCall, ChatDelta, ChatResult
from haltwise.sampling_params import SamplingParams
from haltwise.server.chat_prompt import chat_prompt
from haltwise.server.chat_tools import prepare_chat
from haltwise.server.generation import respond
from haltwise.server.runner import ClientGone
from haltwise.server.state import begin
from haltwise.server.surfaces.anthropic_errors import anthropic_error
from haltwise.server.surfaces.anthropic_protocol import CountTokensRequest, MessagesRequest
from haltwise.server.surfaces.stop_reasons import stop_sequence_of, words_for

log = logging.getLogger("haltwise.server")
router = APIRouter()


def _stop_fields(result: ChatResult, tokenizer: Any) -> dict[str, Any]:
    """stop_reason, stop_sequence (Anthropic's words, stop_reasons.TABLE) and the full termination record."""
    t = result.termination
    token_text = tokenizer.decode([t.stop_reason], skip_special_tokens=False) \
        if isinstance(t.stop_reason, int) else None
    return {"stop_reason": words_for(t, result.finish_reason).anthropic,
            "stop_sequence": stop_sequence_of(t, token_text), "termination": t.to_dict()}


def tool_use_blocks(tool_calls: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """OpenAI message.tool_calls -> Anthropic tool_use blocks (arguments parsed back into `input`).

    A call cut before its arguments closed (stop_reason max_tokens) keeps its block, as Anthropic's API
    does: `input` is {} and the text generated so far rides along as `partial_json` (a haltwise field;
    the streamed input_json_delta events carried the same text)."""
    return [_tool_use(c["id"], c["function"]["name"], c["function"]["arguments"] or "{}") for c in tool_calls or ()]


def _tool_use(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return {"type": "tool_use", "id": call_id, "name": name, "input": value}
    return {"type": "tool_use", "id": call_id, "name": name, "input": {}, "partial_json": arguments}


def signature_of(thinking: str) -> str:
    return "sha256:" + hashlib.sha256(thinking.encode("utf-8")).hexdigest()


def message_body(rid: str, model: str, result: ChatResult, tokenizer: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if result.reasoning:
        content.append({"type": "thinking", "thinking": result.reasoning, "signature": signature_of(result.reasoning)})
    if result.text or not result.tool_calls:
        content.append({"type": "text", "text": result.text})
    content += tool_use_blocks(result.tool_calls)
    return {"id": rid, "type": "message", "role": "assistant", "model": model, "content": content,
            **_stop_fields(result, tokenizer),
            "usage": {**input_usage(result), "output_tokens": result.completion_tokens}}


def input_usage(result: ChatResult) -> dict[str, Any]:
    """input_tokens is the whole prompt here (as count_tokens and message_start say; Anthropic's own API leaves
    cache reads out of it); cache_read_input_tokens are those of them served from the prompt cache (pool, RAM
    or disk: haltwise's prompt_cache says which)."""
    return {"input_tokens": result.prompt_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": result.cached_tokens, "prompt_cache": result.cached_by_tier or
            {"pool": result.cached_tokens, "ram": 0, "disk": 0}}


class MessageEvents:
    """ChatDeltas -> Anthropic SSE events (pure: no I/O; see the module docstring for the order)."""

    def __init__(self, rid: str, model: str, prompt_tokens: int, tokenizer: Any):
        self.rid, self.model, self.prompt_tokens, self.tokenizer = rid, model, prompt_tokens, tokenizer
        self.blocks = 0                     # blocks started so far; the open one is blocks - 1
        self.text_open = False
        self.thinking: str | None = None    # the open thinking block's text so far (None: none open)
        self.calls: dict[int, int] = {}     # OpenAI tool-call index -> block index

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        message = {"id": self.rid, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0}}
        return [("message_start", {"type": "message_start", "message": message}), ("ping", {"type": "ping"})]

    def _start_block(self, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.blocks += 1
        return ("content_block_start", {"type": "content_block_start", "index": self.blocks - 1,
                                        "content_block": block})

    def _stop_block(self) -> tuple[str, dict[str, Any]]:
        return ("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1})

    def delta(self, d: ChatDelta) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        if d.reasoning and not self.blocks:
            self.thinking = ""
            events.append(self._start_block({"type": "thinking", "thinking": "", "signature": ""}))
        if d.reasoning and self.thinking is not None:
            self.thinking += d.reasoning
            events.append(("content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1,
                                                   "delta": {"type": "thinking_delta", "thinking": d.reasoning}}))
        if self.thinking is not None and (d.text or d.tool_calls or d.result is not None):
            events += self._close_thinking()
        if d.text and not self.calls:
            if not self.text_open:
                self.text_open = True
                events.append(self._start_block({"type": "text", "text": ""}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1,
                                                   "delta": {"type": "text_delta", "text": d.text}}))
        for call in d.tool_calls:
            if call["index"] not in self.calls:
                if self.text_open or self.calls:     # the open text or previous tool_use block
                    events.append(self._stop_block())
                events.append(self._start_block({"type": "tool_use", "id": call.get("id"),
                                                 "name": call.get("function", {}).get("name"), "input": {}}))
                self.calls[call["index"]] = self.blocks - 1
            args = call.get("function", {}).get("arguments")
            if args:
                events.append(("content_block_delta", {"type": "content_block_delta",
                                                       "index": self.calls[call["index"]],
                                                       "delta": {"type": "input_json_delta", "partial_json": args}}))
        if d.result is None:
            return events
        if not self.text_open and not self.calls and not d.result.tool_calls:   # no text: one empty text block
            self.text_open = True
            events.append(self._start_block({"type": "text", "text": ""}))
        if self.text_open or self.calls:
            events.append(self._stop_block())
        stop = _stop_fields(d.result, self.tokenizer)
        return events + [("message_delta", {"type": "message_delta",
                                            "delta": {"stop_reason": stop["stop_reason"],
                                                      "stop_sequence": stop["stop_sequence"]},
                                            "usage": {**input_usage(d.result),
                                                      "output_tokens": d.result.completion_tokens},
                                            "termination": stop["termination"]}),
                         ("message_stop", {"type": "message_stop"})]

    def _close_thinking(self) -> list[tuple[str, dict[str, Any]]]:
        assert self.thinking is not None
        signature = signature_of(self.thinking)
        self.thinking = None
        return [("content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1,
                                         "delta": {"type": "signature_delta", "signature": signature}}),
                self._stop_block()]


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _stream(call: ChatCall, events: MessageEvents) -> AsyncIterator[str]:
    try:
        for e in events.start():
            yield _sse(*e)
        async for d in call.deltas():
            for e in events.delta(d):
                yield _sse(*e)
    except ClientGone:
        return
    except HaltwiseError as exc:
        yield _sse("error", anthropic_error(exc.status, str(exc)))
    except Exception:
        log.exception("messages stream failed")
        yield _sse("error", anthropic_error(500, "Internal server error"))


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    """Anthropic Messages; the termination record rides along as `termination`."""
    st = begin(request, body)
    rid = f"msg_{uuid.uuid4().hex}"
    call = await run_in_threadpool(ChatCall, request, rid, body.to_turn())   # template rendering: off the loop
    model, tok = st.served_model_name, st.engine.tokenizer

    async def message() -> dict[str, Any]:
        return message_body(rid, model, await call.result(), tok)

    return await respond(call, body.stream,
                         lambda: _stream(call, MessageEvents(rid, model, len(call.prompt_ids), tok)), message)


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
    """{"input_tokens": N}: the prompt the same conversation would have on /v1/messages."""
    st = begin(request, body)
    _, thinking_kwargs = body.thinking_settings()
    _, _, messages, template_kwargs = prepare_chat(body.chat_tools(), body.chat_tool_choice(),
                                                   body.parallel_tool_calls(), body.chat_messages(),
                                                   SamplingParams(), st.engine.tokenizer, st.tool_call_parser)
    _, ids = await run_in_threadpool(chat_prompt, request, messages, **{**thinking_kwargs, **template_kwargs})
    return {"input_tokens": len(ids)}
