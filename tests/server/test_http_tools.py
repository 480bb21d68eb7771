"""Tool calling over HTTP on the tiny random model (fast): shapes, stream == non-stream, cuts, 400s.

The random model writes nonsense, so required / named calls (forced by the grammar from the first
token) are what is checked here; the real model's behaviour is in test_http_tools_qwen.py.
"""
from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from haltwise.toolcalls.spec import MAX_SCHEMA_DEPTH

SMALL = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "s": {"enum": ["a", "b"]}}, "required": ["n", "s"],
         "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": SMALL}},
         {"type": "function", "function": {"name": "g", "description": "no arguments"}}]
MSG = [{"role": "user", "content": "call something"}]


def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def ask(server, **kw):
    kw = {"model": "tiny", "messages": MSG, "tools": TOOLS, "temperature": 0, "max_tokens": 60,
          "extra_body": {"repetition_detection": {"enabled": False}}, **kw}
    return oai(server).chat.completions.create(**kw)


def streamed(server, **kw):
    content, calls, finish, term = "", {}, None, None
    for chunk in ask(server, stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                if tc.index not in calls:
                    assert tc.id and tc.function.name and tc.type == "function"
                    calls[tc.index] = [tc.id, tc.function.name, ""]
                else:
                    assert tc.function.name is None
                calls[tc.index][2] += tc.function.arguments or ""
            if ch.finish_reason:
                finish, term = ch.finish_reason, ch.model_extra["termination"]
    return content or None, [tuple(calls[i]) for i in sorted(calls)], finish, term


@pytest.mark.parametrize("kw", [
    {"tool_choice": "required", "parallel_tool_calls": False},
    {"tool_choice": {"type": "function", "function": {"name": "f"}}},
    {"tool_choice": "required", "max_tokens": 7},
], ids=["required", "named", "cut"])
def test_stream_equals_non_stream(tiny_server, kw) -> None:
    full = ask(tiny_server, **kw).choices[0]
    content, calls, finish, term = streamed(tiny_server, **kw)
    assert finish == full.finish_reason and term == full.model_extra["termination"]
    assert [c[1:] for c in calls] == [(c.function.name, c.function.arguments) for c in full.message.tool_calls or []]
    assert all(c[0].startswith("call_") for c in calls)     # ids are per response
    assert content == full.message.content
    if full.finish_reason == "tool_calls":
        assert full.message.content is None and term["reason"] == "tool_call"
        for c in full.message.tool_calls:
            schema = SMALL if c.function.name == "f" else {"type": "object", "properties": {}}
            jsonschema.validate(json.loads(c.function.arguments), schema)
            assert c.function.name in term["detail"]
        if "name" in json.dumps(kw.get("tool_choice")):
            assert {c.function.name for c in full.message.tool_calls} == {"f"}
    else:
        assert full.finish_reason == "length" and term["reason"] == "max_tokens" and "incomplete" in term["detail"]


def test_cut_inside_a_call_is_length_never_tool_calls(tiny_server) -> None:
    for n in (1, 3, 5, 9):
        choice = ask(tiny_server, tool_choice="required", max_tokens=n).choices[0]
        assert choice.finish_reason == "length", (n, choice)


def test_round_trip_history_is_accepted(tiny_server) -> None:
    history = MSG + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"n": 1, "s": "a"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
    assert ask(tiny_server, messages=history, tool_choice="none", max_tokens=3).choices[0].finish_reason


def _deep(levels: int) -> dict:
    schema: dict = {}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return {"type": "object", "properties": {"x": schema}}


BAD = [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"parameters": SMALL}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "h"}}}, "tool_choice.function.name"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools[1].function.name"),
    ({"tools": TOOLS, "messages": MSG + [{"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
    ({"tools": TOOLS, "messages": MSG + [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"tools": [{"type": "function", "function": {"name": "d", "parameters": _deep(MAX_SCHEMA_DEPTH + 5)}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "d", "parameters": _deep(300)}}]},
     "tools[0].function.parameters"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
]


@pytest.mark.parametrize("body, param", BAD, ids=[f"{i}-{p}" for i, (_, p) in enumerate(BAD)])
def test_invalid_definitions_are_400_with_param(tiny_server, body, param) -> None:
    r = httpx.post(tiny_server.url + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 2, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    ok = httpx.post(tiny_server.url + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200
