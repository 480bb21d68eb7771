"""Tool use on /v1/messages and /v1/responses (tiny random model, official clients): the calls are the
ones /v1/chat/completions makes for the same request (one tool-calling path: server/chat_tools.py),
streamed equal to non-streamed, validated against the declared schema, and a cut call reads as cut.

The random model writes nonsense, so calls are forced (Anthropic tool_choice any / tool, Responses
required / named); what the real model chooses in auto mode is in test_http_surfaces_qwen.py.
"""
from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

SMALL = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "s": {"enum": ["a", "b"]}}, "required": ["n", "s"],
         "additionalProperties": False}
EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}
ASK = [{"role": "user", "content": "call something"}]
QUIET = {"temperature": 0, "repetition_detection": {"enabled": False}}
CLAUDE_TOOLS = [{"name": "f", "input_schema": SMALL}, {"name": "g", "description": "no arguments", "input_schema": EMPTY}]
RESP_TOOLS = [{"type": "function", "name": "f", "parameters": SMALL},
              {"type": "function", "name": "g", "description": "no arguments", "parameters": EMPTY}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": SMALL}},
              {"type": "function", "function": {"name": "g", "description": "no arguments", "parameters": EMPTY}}]
SCHEMAS = {"f": SMALL, "g": EMPTY}


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=60)


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)


def chat_calls(url: str, choice, max_tokens: int, parallel: bool | None = None) -> tuple[list[tuple[str, str]], str]:
    """(calls as (name, arguments JSON text), finish_reason) of the same request on /v1/chat/completions."""
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    r = oai(url).chat.completions.create(model="tiny", messages=ASK, tools=CHAT_TOOLS, tool_choice=choice,
                                         max_tokens=max_tokens, extra_body=QUIET, **extra).choices[0]
    calls = [(c.function.name, c.function.arguments) for c in r.message.tool_calls or []]
    return calls, r.finish_reason


@pytest.mark.parametrize("choice,chat_choice", [
    ({"type": "any"}, "required"),
    ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ({"type": "any", "disable_parallel_tool_use": True}, "required"),
], ids=["any", "named", "one-call"])
def test_messages_tool_use_is_chats_call_streamed_or_not(tiny_server, choice, chat_choice) -> None:
    url = tiny_server.url
    ask = dict(model="tiny", max_tokens=200, messages=ASK, tools=CLAUDE_TOOLS, tool_choice=choice, extra_body=QUIET)
    msg = claude(url).messages.create(**ask)
    uses = [b for b in msg.content if b.type == "tool_use"]
    parallel = False if choice.get("disable_parallel_tool_use") else None
    expected, finish = chat_calls(url, chat_choice, 200, parallel)
    assert finish == "tool_calls" and msg.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in uses] == [(n, json.loads(a)) for n, a in expected] and uses
    assert msg.model_extra["termination"]["reason"] == "tool_call"
    for b in uses:
        jsonschema.validate(b.input, SCHEMAS[b.name])
        assert b.id.startswith("call_")
    if "name" in choice:
        assert {b.name for b in uses} == {"f"}
    if parallel is False:
        assert len(uses) == 1
    with claude(url).messages.stream(**ask) as s:
        raw = {}
        for e in s:
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
                raw[e.index] = raw.get(e.index, "") + e.delta.partial_json
            assert not (e.type == "content_block_delta" and e.delta.type == "text_delta"), "no call markup as text"
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(b.name, b.input) for b in uses]
    assert [json.loads(v or "{}") for _, v in sorted(raw.items())] == [b.input for b in uses]
    assert final.stop_reason == "tool_use"


def test_messages_cut_call_is_max_tokens_never_tool_use(tiny_server) -> None:
    for n in (1, 4, 7, 12):
        ask = dict(model="tiny", max_tokens=n, messages=ASK, tools=CLAUDE_TOOLS, tool_choice={"type": "any"},
                   extra_body=QUIET)
        msg = claude(tiny_server.url).messages.create(**ask)
        assert msg.stop_reason == "max_tokens", (n, msg)
        assert "incomplete" in msg.model_extra["termination"]["detail"]
        with claude(tiny_server.url).messages.stream(**ask) as s:
            final = s.get_final_message()
        assert final.stop_reason == "max_tokens"
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]


def test_messages_round_trip_with_a_tool_result(tiny_server) -> None:
    url = tiny_server.url
    first = claude(url).messages.create(model="tiny", max_tokens=60, messages=ASK, tools=CLAUDE_TOOLS,
                                        tool_choice={"type": "tool", "name": "f"}, extra_body=QUIET)
    use = next(b for b in first.content if b.type == "tool_use")
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"}]}]
    answer = claude(url).messages.create(model="tiny", max_tokens=5, messages=history, tools=CLAUDE_TOOLS,
                                         tool_choice={"type": "none"}, extra_body=QUIET)
    assert answer.content[0].type == "text" and answer.stop_reason in ("max_tokens", "end_turn")
    longer = claude(url).messages.count_tokens(model="tiny", messages=history, tools=CLAUDE_TOOLS)
    shorter = claude(url).messages.count_tokens(model="tiny", messages=ASK, tools=CLAUDE_TOOLS)
    assert longer.input_tokens > shorter.input_tokens


@pytest.mark.parametrize("choice,chat_choice", [
    ("required", "required"),
    ({"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
], ids=["required", "named"])
def test_responses_function_calls_are_chats_calls_streamed_or_not(tiny_server, choice, chat_choice) -> None:
    url = tiny_server.url
    ask = dict(model="tiny", input="call something", tools=RESP_TOOLS, tool_choice=choice, max_output_tokens=200,
               temperature=0, extra_body={"repetition_detection": {"enabled": False}})
    r = oai(url).responses.create(**ask)
    calls = [it for it in r.output if it.type == "function_call"]
    expected, finish = chat_calls(url, chat_choice, 200)
    assert finish == "tool_calls" and r.status == "completed" and calls
    assert [(c.name, c.arguments) for c in calls] == expected
    assert r.model_extra["termination"]["reason"] == "tool_call"
    events = list(oai(url).responses.create(**ask, stream=True))
    assert not [e for e in events if e.type == "response.output_text.delta"], "no call markup as text"
    args: dict[int, str] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            args[e.output_index] = args.get(e.output_index, "") + e.delta
    done = events[-1]
    assert done.type == "response.completed"
    streamed = [it for it in done.response.output if it.type == "function_call"]
    assert [(c.name, c.arguments) for c in streamed] == [(c.name, c.arguments) for c in calls]
    added = [e.item.call_id for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert added == [c.call_id for c in streamed] and all(c.call_id.startswith("call_") for c in streamed)
    assert [v for _, v in sorted(args.items())] == [c.arguments for c in calls]


def test_responses_cut_call_is_incomplete(tiny_server) -> None:
    r = oai(tiny_server.url).responses.create(model="tiny", input="call something", tools=RESP_TOOLS,
                                              tool_choice="required", max_output_tokens=4, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert all(it.status == "incomplete" for it in r.output if it.type == "function_call")


def _chat_stream_calls(url: str, **ask) -> tuple[list[tuple[str, str]], str | None]:
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in oai(url).chat.completions.create(**ask, stream=True):
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                call = calls.setdefault(tc.index, ["", ""])
                call[0] += tc.function.name or ""
                call[1] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return [(n, a) for n, a in (calls[i] for i in sorted(calls))], finish


def test_a_loop_after_complete_calls_keeps_them_on_every_surface(tiny_server) -> None:
    """Default detectors, greedy: the tiny model writes calls until the near-loop detector fires inside one.
    Every surface returns the complete calls before it, as calls (reason tool_loop) -- never "length" with a
    call the server wrote to close the cut one (toolcalls/call_ends.py) -- streamed or not."""
    url = tiny_server.url
    ask = dict(model="tiny", messages=ASK, tools=CHAT_TOOLS, tool_choice="required", max_tokens=200, temperature=0)
    r = oai(url).chat.completions.create(**ask).choices[0]
    term = r.model_extra["termination"]
    assert term["reason"] == "tool_loop" and "inside a run of tool calls" in term["detail"], term  # the case arises
    expected = [(c.function.name, c.function.arguments) for c in r.message.tool_calls or []]
    assert r.finish_reason == "tool_calls" and expected and r.message.content is None
    for name, arguments in expected:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    assert _chat_stream_calls(url, **ask) == (expected, "tool_calls")
    as_inputs = [(n, json.loads(a)) for n, a in expected]

    claude_ask = dict(model="tiny", max_tokens=200, messages=ASK, tools=CLAUDE_TOOLS, tool_choice={"type": "any"},
                      extra_body={"temperature": 0})
    msg = claude(url).messages.create(**claude_ask)
    assert msg.stop_reason == "tool_use" and msg.model_extra["termination"]["reason"] == "tool_loop"
    assert [(b.name, b.input) for b in msg.content if b.type == "tool_use"] == as_inputs
    with claude(url).messages.stream(**claude_ask) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and [(b.name, b.input) for b in final.content] == as_inputs

    resp_ask = dict(model="tiny", input="call something", tools=RESP_TOOLS, tool_choice="required",
                    max_output_tokens=200, temperature=0)
    resp = oai(url).responses.create(**resp_ask)
    assert resp.status == "completed" and resp.model_extra["termination"]["reason"] == "tool_loop"
    assert [(c.name, c.arguments) for c in resp.output if c.type == "function_call"] == expected
    done = list(oai(url).responses.create(**resp_ask, stream=True))[-1]
    assert done.type == "response.completed"
    assert [(c.name, c.arguments) for c in done.response.output if c.type == "function_call"] == expected
