"""Hermes / Qwen2.5: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one call per tag.

Qwen2.5's chat template renders assistant tool calls exactly this way; several calls are several tags
separated by a newline. Also read (tool_choice auto): a ```json fence holding the same body, which
Qwen2.5-Coder-0.5B writes instead of the tag; in auto mode a ```json fence therefore opens a call.
"""
from haltwise.toolcalls.formats.base import ToolFormat

HERMES = ToolFormat(name="hermes", trigger="<tool_call>", prefix="\n", suffix="\n</tool_call>", separator=None,
                    args_key="arguments", section_gap="\n", template_marks=("<tool_call>",),
                    alternates=(("```json\n", "", "\n```"),))
