"""Hermes / Qwen2.5: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one call per tag.

Qwen2.5's chat template renders assistant tool calls exactly this way; several calls are several tags
separated by a newline. Also read (tool_choice auto): a ```json fence holding the same body, or the bare
body `{"name": "...` -- Qwen2.5-Coder-0.5B writes either instead of the tag; in auto mode such text
therefore opens a call (as in llama.cpp's Hermes handler).
"""
from haltwise.toolcalls.formats.base import ToolFormat

HERMES = ToolFormat(name="hermes", trigger="<tool_call>", prefix="\n", suffix="\n</tool_call>", separator=None,
                    args_key="arguments", section_gap="\n", template_marks=("<tool_call>",),
                    alternates=(("```json\n", "", "\n```"), ('{"name": "', None, "")))
