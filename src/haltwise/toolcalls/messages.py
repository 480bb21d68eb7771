"""Chat history with tool calls, checked and put in the shape chat templates expect (transformers' way).

- an assistant message may carry `tool_calls` ([{id, type "function", function {name, arguments}}]) and no
  content; OpenAI sends `arguments` as JSON text, templates (Qwen2.5's `tool_call.arguments | tojson`)
  want the object, so it is parsed here -- text that is not a JSON object is a 400;
- a `tool` message needs `tool_call_id` (400 otherwise) and content.
An assistant message with only calls gets content "" (falsy for templates that test it, readable for
templates that do not know tool calls).
ToolError carries the `param` (messages[i]....).
"""
from __future__ import annotations

import json
from typing import Any

from haltwise.toolcalls.spec import ToolError


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checked copies of OpenAI chat messages for the chat template (None-valued keys dropped)."""
    return [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]


def _message(m: dict[str, Any], param: str) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if v is not None}
    role = m.get("role")
    if role == "tool" and not m.get("tool_call_id"):
        raise ToolError(f"{param}.tool_call_id", "a tool message needs the tool_call_id it answers")
    if m.get("tool_calls") is not None:
        if role != "assistant":
            raise ToolError(f"{param}.tool_calls", "only assistant messages carry tool_calls")
        out["tool_calls"] = [_call(c, f"{param}.tool_calls[{j}]") for j, c in enumerate(m["tool_calls"])]
        if not out["tool_calls"]:
            del out["tool_calls"]
        out.setdefault("content", "")   # templates without tool support read message.content unguarded
    return out


def _call(c: Any, param: str) -> dict[str, Any]:
    if not isinstance(c, dict) or c.get("type", "function") != "function" or not isinstance(c.get("function"), dict):
        raise ToolError(param, 'a tool call is {"id", "type": "function", "function": {"name", "arguments"}}')
    fn = c["function"]
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ToolError(f"{param}.function.name", "a tool call needs a function name")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError as e:
            raise ToolError(f"{param}.function.arguments", f"arguments must be JSON text: {e}") from None
    if not isinstance(args, dict):
        raise ToolError(f"{param}.function.arguments", "arguments must encode a JSON object")
    out = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
    if c.get("id") is not None:
        out["id"] = c["id"]
    return out
