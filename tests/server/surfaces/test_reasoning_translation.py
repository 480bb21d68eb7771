"""Reasoning in the Messages and Responses translations (pure: ChatDeltas in, events / bodies out)."""
from __future__ import annotations

import hashlib

from haltwise.server.chat_core import ChatDelta, ChatResult
from haltwise.server.surfaces.anthropic_messages import MessageEvents, message_body
from haltwise.server.surfaces.anthropic_protocol import MessagesRequest
from haltwise.server.surfaces.openai_responses import ResponseBuilder, ResponseEvents
from haltwise.server.surfaces.openai_responses_protocol import ResponsesRequest
from haltwise.stopping.termination import Reason, Termination
from haltwise.tokenizer.tiny import tiny_tokenizer

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


def result(text: str, reasoning: str, reason: Reason = Reason.EOS, tool_calls=None) -> ChatResult:
    return ChatResult(text=text, termination=Termination(reason), prompt_tokens=5, completion_tokens=9,
                      tool_calls=tool_calls, reasoning=reasoning, reasoning_tokens=4)


def test_messages_thinking_request_translation() -> None:
    body = MessagesRequest.model_validate({
        "model": "m", "max_tokens": 50, "thinking": {"type": "enabled", "budget_tokens": 20},
        "messages": [{"role": "user", "content": "q"},
                     {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                                       {"type": "redacted_thinking", "data": "xx"},
                                                       {"type": "text", "text": "a"}]},
                     {"role": "user", "content": "q2"}]})
    turn = body.to_turn()
    assert turn.params.split_reasoning and turn.params.max_reasoning_tokens == 20
    assert turn.template_kwargs == {"enable_thinking": True}
    assert turn.messages[1] == {"role": "assistant", "content": "a", "reasoning_content": "hmm"}


def test_messages_body_and_events_put_thinking_first() -> None:
    r = result("answer", "think it")
    body = message_body("msg_1", "m", r, tiny_tokenizer())
    sig = "sha256:" + hashlib.sha256(b"think it").hexdigest()
    assert body["content"] == [{"type": "thinking", "thinking": "think it", "signature": sig},
                               {"type": "text", "text": "answer"}]
    ev = MessageEvents("msg_1", "m", 5, tiny_tokenizer())
    events = ev.start() + ev.delta(ChatDelta(reasoning="think ")) + ev.delta(ChatDelta(reasoning="it", text="ans")) \
        + ev.delta(ChatDelta(text="wer", result=r))
    seq = [(k, e.get("index"), e.get("delta", {}).get("type") or e.get("content_block", {}).get("type"))
           for k, e in events[2:-2]]
    assert seq == [("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
                   ("content_block_delta", 0, "thinking_delta"), ("content_block_delta", 0, "signature_delta"),
                   ("content_block_stop", 0, None), ("content_block_start", 1, "text"),
                   ("content_block_delta", 1, "text_delta"), ("content_block_delta", 1, "text_delta"),
                   ("content_block_stop", 1, None)]
    assert events[2 + 3][1]["delta"]["signature"] == sig


def test_messages_events_thinking_then_tool_use_without_text() -> None:
    ev = MessageEvents("msg_1", "m", 5, tiny_tokenizer())
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a": 1}'}}
    events = ev.delta(ChatDelta(reasoning="r")) + ev.delta(ChatDelta(tool_calls=[call],
                                                                     result=result("", "r", tool_calls=[CALL])))
    stops = [e["index"] for k, e in events if k == "content_block_stop"]
    starts = [(e["index"], e["content_block"]["type"]) for k, e in events if k == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "tool_use")] and stops == [0, 1]


def test_responses_reasoning_item_and_indices() -> None:
    b = ResponseBuilder(ResponsesRequest.model_validate({"model": "m", "input": "q"}), "m")
    r = result("ans", "why", tool_calls=[CALL])
    out = b.final(r)["output"]
    assert [o["type"] for o in out] == ["reasoning", "message", "function_call"]
    assert out[0]["content"] == [{"type": "reasoning_text", "text": "why"}] and out[0]["summary"] == []
    assert b.final(r)["usage"]["output_tokens_details"] == {"reasoning_tokens": 4}
    ev = ResponseEvents(b)
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a": 1}'}}
    events = ev.delta(ChatDelta(reasoning="why")) + ev.delta(ChatDelta(text="ans")) + \
        ev.delta(ChatDelta(tool_calls=[call], result=r))
    kinds = [(k, e.get("output_index")) for k, e in events]
    assert kinds[:3] == [("response.output_item.added", 0), ("response.content_part.added", 0),
                         ("response.reasoning_text.delta", 0)]
    assert ("response.reasoning_text.done", 0) in kinds and ("response.output_text.delta", 1) in kinds
    assert kinds.index(("response.reasoning_text.done", 0)) < kinds.index(("response.output_text.delta", 1))
    assert ("response.function_call_arguments.delta", 2) in kinds
    assert events[-1][1]["response"]["output"] == b.final(r)["output"]


def test_responses_reasoning_item_of_a_request_cut_inside_it_is_incomplete() -> None:
    b = ResponseBuilder(ResponsesRequest.model_validate({"model": "m", "input": "q"}), "m")
    out = b.final(result("", "half a thou", Reason.MAX_TOKENS))["output"]
    assert out[0]["status"] == "incomplete" and out[1]["type"] == "message"
