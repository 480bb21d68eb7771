"""Llama 3.x JSON tool calls: `<|python_tag|>{"name": ..., "parameters": {...}}`, several joined by "; ".

Llama 3.1/3.2 templates ask for a bare JSON object; haltwise opens the section with `<|python_tag|>`
(the model's own tool-call tag) so that tool_choice "auto" has a trigger to switch on. vLLM's
llama3_json parser reads both spellings.
"""
from haltwise.toolcalls.formats.base import ToolFormat

LLAMA3 = ToolFormat(name="llama3_json", trigger="<|python_tag|>", prefix="", suffix="", separator="; ",
                    args_key="parameters", section_gap="", template_marks=("<|python_tag|>", "ipython"))
