"""Hermes / Qwen2.5: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one call per tag.

Qwen2.5's chat template renders assistant tool calls exactly this way; several calls are several tags
separated by a newline.
"""
from haltwise.toolcalls.formats.base import ToolFormat

HERMES = ToolFormat(name="hermes", trigger="<tool_call>", prefix="\n", suffix="\n</tool_call>", separator=None,
                    args_key="arguments", section_gap="\n", template_marks=("<tool_call>",))
