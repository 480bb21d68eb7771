"""Tool definitions and tool_choice: every invalid one is a ToolError naming its param, never a crash."""
from __future__ import annotations

import pytest

from haltwise.toolcalls.spec import MAX_SCHEMA_DEPTH, ToolError, parse_tool_request


def fn(name="get_weather", **kw):
    return {"type": "function", "function": {"name": name, **kw}}


OK_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return {"type": "object", "properties": {"x": schema}}


INVALID = [
    ([fn(parameters={"type": "array"})], None, "tools[0].function.parameters"),
    ([fn(parameters="object")], None, "tools[0].function.parameters"),
    ([{"type": "function", "function": {"parameters": OK_PARAMS}}], None, "tools[0].function.name"),
    ([fn(name="has space")], None, "tools[0].function.name"),
    ([fn(), fn()], None, "tools[1].function.name"),
    ([fn()], {"type": "function", "function": {"name": "nope"}}, "tool_choice.function.name"),
    ([fn()], "sometimes", "tool_choice"),
    ([{"type": "retrieval"}], None, "tools[0].type"),
    ([{"type": "function"}], None, "tools[0].function"),
    ([fn(parameters=deep(300))], None, "tools[0].function.parameters"),
    ([fn(parameters={"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}})], None,
     "tools[0].function.parameters"),
    ([fn(parameters={"type": "object", "properties": {"x": {"type": "string", "maxLenght": 3}}})], None,
     "tools[0].function.parameters"),
    ([], None, "tools"),
    (None, "required", "tool_choice"),
]


@pytest.mark.parametrize("tools, choice, param", INVALID, ids=[p + str(i) for i, (_, _, p) in enumerate(INVALID)])
def test_invalid_definitions_name_their_param(tools, choice, param) -> None:
    with pytest.raises(ToolError) as info:
        parse_tool_request(tools, choice)
    assert info.value.param == param


def test_depth_is_bounded_before_any_recursion() -> None:
    """A schema nested far past Python's recursion limit is refused by the iterative walk."""
    with pytest.raises(ToolError, match=f"deeper than {MAX_SCHEMA_DEPTH}"):
        parse_tool_request([fn(parameters=deep(5000))])


def test_choices() -> None:
    req = parse_tool_request([fn(parameters=OK_PARAMS), fn("get_time")], None)
    assert req.mode == "auto" and req.parallel and [t.name for t in req.callable_tools] == ["get_weather", "get_time"]
    named = parse_tool_request([fn(parameters=OK_PARAMS), fn("get_time")],
                               {"type": "function", "function": {"name": "get_time"}}, False)
    assert named.mode == "named" and [t.name for t in named.callable_tools] == ["get_time"] and not named.parallel
    assert parse_tool_request([fn()], "none").mode == "none"
    assert parse_tool_request(None, None) is None and parse_tool_request(None, "none") is None
    assert req.tools[1].schema == {"type": "object", "properties": {}}   # omitted parameters: no arguments


def test_the_template_sees_each_tool_as_the_request_gave_it() -> None:
    """Key order and `strict` kept: transformers' apply_chat_template hands the template the tools unchanged."""
    fn = {"name": "get_weather", "strict": True, "parameters": OK_PARAMS, "description": "Weather"}
    shown = parse_tool_request([{"type": "function", "function": fn}]).tools[0].to_openai()
    assert shown == {"type": "function", "function": fn}
    assert list(shown["function"]) == ["name", "strict", "parameters", "description"]
