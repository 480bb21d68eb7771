"""The tool-call formats by name, and the choice of one for a model (from its chat template).

`--tool-call-parser NAME` overrides the choice. Without it: the first format whose mark appears in the
chat template (Qwen2.5 -> hermes, Llama 3.x -> llama3_json, Mistral -> mistral, gpt-oss -> harmony,
Phi-4-mini -> phi4_mini); a template that shows
no tool format (SmolLM2's ChatML) gets hermes, the most common one -- the grammar still forces valid calls
for required / named, but such a model has not been told about the tools by its template.
"""
from __future__ import annotations

from haltwise.toolcalls.formats.base import ToolFormat
from haltwise.toolcalls.formats.harmony import HARMONY
from haltwise.toolcalls.formats.hermes import HERMES
from haltwise.toolcalls.formats.llama3_json import LLAMA3
from haltwise.toolcalls.formats.mistral import MISTRAL
from haltwise.toolcalls.formats.phi4_mini import PHI4_MINI

FORMATS: dict[str, ToolFormat] = {f.name: f for f in (HERMES, LLAMA3, MISTRAL, HARMONY, PHI4_MINI)}
ALIASES = {"qwen": "hermes", "qwen2.5": "hermes", "llama3": "llama3_json", "llama": "llama3_json",
           "openai": "harmony", "gpt-oss": "harmony", "phi4": "phi4_mini"}
DEFAULT = HERMES


def get_format(name: str) -> ToolFormat:
    """A format by name or alias; ValueError listing the known ones."""
    key = ALIASES.get(name, name)
    if key not in FORMATS:
        raise ValueError(f"unknown tool-call parser {name!r}; known: {', '.join(sorted(FORMATS))}")
    return FORMATS[key]


def format_for_template(template_source: str | None) -> ToolFormat:
    """The format a chat template writes tool calls in (see the module docstring)."""
    for fmt in FORMATS.values():
        if template_source and any(mark in template_source for mark in fmt.template_marks):
            return fmt
    return DEFAULT
