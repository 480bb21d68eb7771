"""Phi-4-mini: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|>` -- one section, a JSON array.

Phi-4-mini's chat template (its tokenizer_config.json) never reads the `tools` variable: it shows tools only
through a system message's `tools` string, `<|system|>...<|tool|>[...]<|/tool|><|end|>`, and renders every
message as `<|role|>content<|end|>` (tool calls and tool results included). So the conversation is shaped
for it before rendering (`shape_messages`): the tools, as a JSON list of their function objects, go into the
system message (one with empty content is added where the conversation has none), and an assistant's calls
become its content in the model's own output syntax. The call tokens are special tokens of Phi-4-mini's
vocabulary; the detokenizer keeps a format's markers in the answer text while a tool request parses it.
(vLLM's phi4_mini_json parser reads `functools[...]`, the syntax of vLLM's own example template, not this one.)
"""
from __future__ import annotations

import json
from typing import Any

from haltwise.toolcalls.formats.base import ToolFormat

PHI4_MINI = ToolFormat(name="phi4_mini", trigger="<|tool_call|>", prefix="[", suffix="]<|/tool_call|>",
                       separator=", ", args_key="arguments", section_gap="", template_marks=("<|tool|>",))


def shape_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Template messages (toolcalls/messages.py shapes) as Phi-4-mini's template takes them; tools: OpenAI tool
    objects shown to the model, or None."""
    out = [_with_calls(m) if m.get("tool_calls") else m for m in messages]
    if not tools:
        return out
    listed = json.dumps([t["function"] for t in tools], ensure_ascii=False)
    if out and out[0].get("role") == "system":
        return [{**out[0], "tools": listed}, *out[1:]]
    return [{"role": "system", "content": "", "tools": listed}, *out]


def _with_calls(m: dict[str, Any]) -> dict[str, Any]:
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
    text = PHI4_MINI.trigger + json.dumps(calls, ensure_ascii=False) + PHI4_MINI.suffix[len("]"):]
    return {**m, "content": (m.get("content") or "") + text}

