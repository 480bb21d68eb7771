"""POST /v1/responses: OpenAI Responses (stateless) over the chat core.

This module only translates: the request into a ChatTurn (openai_responses_protocol.py), the ChatResult
into a response object, ChatDeltas into Responses events. Output items: one reasoning item (when the
model reasoned: its text as one `reasoning_text` content part, `summary` empty), one assistant message
(when there is text, or nothing else), then one function_call item per tool call — the same items, in
the same order, streamed or not. Every event carries a sequence_number counting from 0. Stream order:

    response.created, response.in_progress,
    [response.output_item.added(reasoning), response.content_part.added, response.reasoning_text.delta...,
     response.reasoning_text.done, response.content_part.done, response.output_item.done]
    [response.output_item.added(message), response.content_part.added, response.output_text.delta...,
     response.output_text.done, response.content_part.done, response.output_item.done]
    [response.output_item.added(function_call), response.function_call_arguments.delta...,
     response.function_call_arguments.done, response.output_item.done]...
    response.completed | response.incomplete            (an error: response.failed)
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from haltwise.errors import HaltwiseError
from haltwise.server.chat_core import ChatCall, ChatDelta, ChatResult
from haltwise.server.generation import respond
from haltwise.server.runner import ClientGone
from haltwise.server.surfaces.openai_bodies import chat_logprobs
from haltwise.server.state import begin
from haltwise.server.surfaces.openai_responses_protocol import ResponsesRequest
from haltwise.server.surfaces.stop_reasons import words_for

log = logging.getLogger("haltwise.server")
router = APIRouter()


def reasoning_status(result: ChatResult, status: str) -> str:
    """A reasoning item is complete once an answer follows it; ended inside, it shares the response's status."""
    return "completed" if result.text or result.tool_calls else status


class ResponseBuilder:
    """The response object and its items for one request (ids fixed up front: streamed == non-streamed)."""

    def __init__(self, body: ResponsesRequest, model: str):
        self.id, self.created, self.model, self.body = f"resp_{uuid.uuid4().hex}", int(time.time()), model, body
        self.msg_id = f"msg_{uuid.uuid4().hex}"
        self.rs_id = f"rs_{uuid.uuid4().hex}"

    def reasoning_item(self, text: str, status: str) -> dict[str, Any]:
        return {"id": self.rs_id, "type": "reasoning", "summary": [], "status": status,
                "content": [{"type": "reasoning_text", "text": text}]}

    def message_item(self, text: str, status: str) -> dict[str, Any]:
        return {"id": self.msg_id, "type": "message", "role": "assistant", "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def call_item(self, i: int, call: dict[str, Any], status: str) -> dict[str, Any]:
        return {"id": f"fc_{self.id[5:]}_{i}", "type": "function_call", "call_id": call.get("id") or f"call_{i}",
                "name": call["function"]["name"], "arguments": call["function"].get("arguments") or "",
                "status": status}

    def output(self, result: ChatResult, status: str) -> list[dict[str, Any]]:
        items = [self.reasoning_item(result.reasoning, reasoning_status(result, status))] if result.reasoning else []
        items += [self.message_item(result.text, status)] if result.text or not result.tool_calls else []
        return items + [self.call_item(i, c, status) for i, c in enumerate(result.tool_calls or ())]

    def response(self, status: str, output: list[dict[str, Any]], result: ChatResult | None = None,
                 incomplete: str | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
        b = self.body
        texts = [p["text"] for it in output if it["type"] == "message" for p in it["content"]]
        usage = None if result is None else {
            "input_tokens": result.prompt_tokens, "input_tokens_details": {"cached_tokens": result.cached_tokens},
            "output_tokens": result.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": result.reasoning_tokens},
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "prompt_cache": result.cached_by_tier}
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "model": self.model, "output": output, "output_text": "".join(texts), "usage": usage,
                "incomplete_details": {"reason": incomplete} if incomplete else None, "error": error,
                "instructions": b.instructions, "max_output_tokens": b.max_output_tokens,
                "temperature": b.temperature, "top_p": b.top_p, "tools": [t.model_dump() for t in b.tools or ()],
                "tool_choice": b.tool_choice or "auto", "parallel_tool_calls": b.parallel_tool_calls is not False,
                "text": b.text.model_dump(by_alias=True, exclude_none=True) if b.text else {"format": {"type": "text"}},
                "store": False, "previous_response_id": None, "metadata": b.metadata or {},
                "termination": result.termination.to_dict() if result else None}

    def final(self, result: ChatResult) -> dict[str, Any]:
        """The finished response: status and incomplete_details.reason from stop_reasons.TABLE."""
        words = words_for(result.termination, result.finish_reason)
        return self.response(words.status, self.output(result, words.status), result, words.incomplete)


class ResponseEvents:
    """ChatDeltas -> Responses events (pure: no I/O; see the module docstring for the order)."""

    def __init__(self, builder: ResponseBuilder):
        self.b, self.seq = builder, 0
        self.text: str | None = None               # None until the message item is open
        self.reasoning: str | None = None          # None until the reasoning item is open
        self.reasoning_open = False
        self.calls: dict[int, dict[str, Any]] = {}  # OpenAI tool-call index -> accumulated call

    def event(self, kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        self.seq += 1
        return kind, {"type": kind, "sequence_number": self.seq - 1, **fields}

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        r = self.b.response("in_progress", [])
        return [self.event("response.created", response=r), self.event("response.in_progress", response=r)]

    @property
    def _msg_index(self) -> int:
        return 1 if self.reasoning is not None else 0

    def _reasoning_delta(self, text: str) -> list[tuple[str, dict[str, Any]]]:
        events = []
        ids = {"item_id": self.b.rs_id, "output_index": 0, "content_index": 0}
        if self.reasoning is None:
            self.reasoning, self.reasoning_open = "", True
            item = {**self.b.reasoning_item("", "in_progress"), "content": []}
            events += [self.event("response.output_item.added", output_index=0, item=item),
                       self.event("response.content_part.added", **ids, part={"type": "reasoning_text", "text": ""})]
        self.reasoning += text
        return events + [self.event("response.reasoning_text.delta", **ids, delta=text)]

    def _close_reasoning(self, status: str) -> list[tuple[str, dict[str, Any]]]:
        self.reasoning_open = False
        ids = {"item_id": self.b.rs_id, "output_index": 0, "content_index": 0}
        item = self.b.reasoning_item(self.reasoning or "", status)
        return [self.event("response.reasoning_text.done", **ids, text=self.reasoning),
                self.event("response.content_part.done", **ids, part=item["content"][0]),
                self.event("response.output_item.done", output_index=0, item=item)]

    def _open_message(self) -> list[tuple[str, dict[str, Any]]]:
        self.text = ""
        ids = {"item_id": self.b.msg_id, "output_index": self._msg_index, "content_index": 0}
        item = {**self.b.message_item("", "in_progress"), "content": []}
        return [self.event("response.output_item.added", output_index=self._msg_index, item=item),
                self.event("response.content_part.added", **ids,
                         part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})]

    def delta(self, d: ChatDelta) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        if d.reasoning and self.text is None and not self.calls:
            events += self._reasoning_delta(d.reasoning)
        if self.reasoning_open and (d.text or d.tool_calls or d.result is not None):
            status = "completed" if d.result is None else \
                reasoning_status(d.result, words_for(d.result.termination, d.result.finish_reason).status)
            events += self._close_reasoning(status)
        ids = {"item_id": self.b.msg_id, "output_index": self._msg_index, "content_index": 0}
        if d.text and not self.calls:
            if self.text is None:
                events += self._open_message()
            self.text = (self.text or "") + d.text
            events.append(self.event("response.output_text.delta", **ids, delta=d.text, logprobs=[]))
        for call in d.tool_calls:
            events += self._call_delta(call)
        if d.result is None:
            return events
        words = words_for(d.result.termination, d.result.finish_reason)
        if self.text is None and not d.result.tool_calls:
            events += self._open_message()
        if self.text is not None:
            item = self.b.message_item(self.text, words.status)
            events += [self.event("response.output_text.done", **ids, text=self.text, logprobs=[]),
                       self.event("response.content_part.done", **ids, part=item["content"][0]),
                       self.event("response.output_item.done", output_index=self._msg_index, item=item)]
        for i, call in sorted(self.calls.items()):
            item = self.b.call_item(i, call, words.status)   # a call cut by max_output_tokens: incomplete
            index = self._index(i)
            events += [self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                name=item["name"], arguments=item["arguments"]),
                       self.event("response.output_item.done", output_index=index, item=item)]
        final = self.b.final(d.result)
        kind = "response.completed" if words.status == "completed" else "response.incomplete"
        return events + [self.event(kind, response=final)]

    def _index(self, call_index: int) -> int:
        return call_index + (1 if self.text is not None else 0) + (1 if self.reasoning is not None else 0)

    def _call_delta(self, call: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events = []
        i, fn = call["index"], call.get("function", {})
        if i not in self.calls:
            self.calls[i] = {"id": call.get("id"), "function": {"name": fn.get("name"), "arguments": ""}}
            item = {**self.b.call_item(i, self.calls[i], "in_progress")}
            events.append(self.event("response.output_item.added", output_index=self._index(i), item=item))
        if fn.get("arguments"):
            self.calls[i]["function"]["arguments"] += fn["arguments"]
            events.append(self.event("response.function_call_arguments.delta", output_index=self._index(i),
                                   item_id=self.b.call_item(i, self.calls[i], "in_progress")["id"],
                                   delta=fn["arguments"]))
        return events


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _stream(call: ChatCall, events: ResponseEvents) -> AsyncIterator[str]:
    try:
        for e in events.start():
            yield _sse(*e)
        async for d in call.deltas():
            for e in events.delta(d):
                yield _sse(*e)
    except ClientGone:
        return
    except Exception as exc:
        known = isinstance(exc, HaltwiseError)
        if not known:
            log.exception("responses stream failed")
        error = {"code": getattr(exc, "code", None) or "server_error",
                 "message": str(exc) if known else "Internal server error"}
        yield _sse(*events.event("response.failed", response=events.b.response("failed", [], error=error)))


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    """OpenAI Responses, stateless; the termination record rides along as `termination`."""
    served = await begin(request, body)
    builder = ResponseBuilder(body, served.name)
    call = await run_in_threadpool(ChatCall, served, request, builder.id, body.to_turn())   # template: off the loop

    async def final() -> dict[str, Any]:
        result = await call.result()
        body_out = builder.final(result)
        if result.logprobs is not None:    # include: message.output_text.logprobs (chat's per-token shape)
            entries = (chat_logprobs(served.tokenizer, result.logprobs) or {}).get("content", [])
            for part in (p for it in body_out["output"] if it["type"] == "message" for p in it["content"]):
                part["logprobs"] = entries
        return body_out

    return await respond(call, body.stream, lambda: _stream(call, ResponseEvents(builder)), final)
