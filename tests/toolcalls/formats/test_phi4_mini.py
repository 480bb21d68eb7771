"""Phi-4-mini's tool calls: the format read from its real template, the conversation shaped for that template
(tools in the system message, calls as the model writes them), the section parsed, its tokens kept in the text."""
from __future__ import annotations

import json
from pathlib import Path

from haltwise.toolcalls.formats.phi4_mini import PHI4_MINI, shape_messages
from haltwise.toolcalls.formats.registry import format_for_template, get_format
from haltwise.toolcalls.parser import parse

TEMPLATE = (Path(__file__).parents[2] / "models" / "data" / "microsoft-Phi-4-mini-instruct.jinja").read_text()
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALLS = [{"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]


def test_the_real_template_picks_phi4_mini() -> None:
    assert format_for_template(TEMPLATE) is PHI4_MINI and get_format("phi4") is PHI4_MINI
    assert PHI4_MINI.marker_texts == ("<|tool_call|>", "<|/tool_call|>")


def test_tools_go_into_the_system_message() -> None:
    listed = json.dumps([TOOL["function"]])
    with_system = shape_messages([{"role": "system", "content": "S"}, {"role": "user", "content": "u"}], [TOOL])
    assert with_system == [{"role": "system", "content": "S", "tools": listed}, {"role": "user", "content": "u"}]
    without = shape_messages([{"role": "user", "content": "u"}], [TOOL])
    assert without == [{"role": "system", "content": "", "tools": listed}, {"role": "user", "content": "u"}]
    assert shape_messages([{"role": "user", "content": "u"}], None) == [{"role": "user", "content": "u"}]


def test_an_assistant_call_becomes_its_content_as_the_model_writes_it() -> None:
    (m,) = shape_messages([{"role": "assistant", "content": "", "tool_calls": CALLS}], None)
    assert m["content"] == '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>'
    result = parse(PHI4_MINI, m["content"])
    assert result.content is None and [(c.name, c.arguments) for c in result.calls] == [("get_weather",
                                                                                           '{"city": "Paris"}')]


def test_several_calls_in_one_section_and_text_before() -> None:
    text = 'Sure.<|tool_call|>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]<|/tool_call|>'
    result = parse(PHI4_MINI, text)
    assert result.content == "Sure." and [(c.name, c.arguments) for c in result.calls] == [("a", "{}"),
                                                                                            ("b", '{"x": 1}')]
