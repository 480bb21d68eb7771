"""Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, {...}]` -- one section holding a JSON array."""
from haltwise.toolcalls.formats.base import ToolFormat

MISTRAL = ToolFormat(name="mistral", trigger="[TOOL_CALLS]", prefix="[", suffix="]", separator=", ",
                     args_key="arguments", section_gap="", template_marks=("[TOOL_CALLS]",))
