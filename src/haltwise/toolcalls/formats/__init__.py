"""Tool-call formats: one file per model family, chosen through registry.py."""
from haltwise.toolcalls.formats.base import ToolFormat
from haltwise.toolcalls.formats.registry import FORMATS, format_for_template, get_format

__all__ = ["FORMATS", "ToolFormat", "format_for_template", "get_format"]
