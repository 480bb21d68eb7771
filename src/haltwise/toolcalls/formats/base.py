"""What a tool-call format is: the text around the JSON call bodies, nothing else.

Every format writes its calls as one or more *sections* in the output text:

    section := trigger prefix body (separator body)* suffix          (separator None: one body per section)
    body    := {"name": "<tool name>", "<args_key>": <arguments JSON object>}

`trigger` is the text (often a single special token) by which the model opens a section; in
tool_choice "auto" it is what switches from free text to the call grammar. A format may accept other
openers too (`alternates`: trigger, prefix, suffix), read and constrained only in "auto" (required and
named write the first form): small models often wrap a call their own way (Qwen2.5 0.5B writes a
```json fence instead of <tool_call>; llama.cpp's Hermes handler accepts the same). `start_openers` are
read the same way but only as the answer's very first characters (Llama 3.x's bare `{"name": ...}`). The body's spelling is
fixed by the grammar (toolcalls/grammar.py: compact separators ", " and ": "), so the parser
(toolcalls/parser.py) can read it exactly and stream it. A format is plain data: adding one is a file
with one ToolFormat and a line in registry.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = re.compile(r"<[^<>\s]+>|\[[A-Z_]+\]")   # text that may be one added token


@dataclass(frozen=True)
class ToolFormat:
    name: str
    trigger: str               # opens a section, e.g. "<tool_call>"
    prefix: str                # after the trigger, before the first body
    suffix: str                # closes a section
    separator: str | None      # between bodies of one section; None = one body per section
    args_key: str = "arguments"
    section_gap: str = "\n"    # between sections (separator None) when the grammar writes several
    template_marks: tuple[str, ...] = ()   # chat-template text that identifies this format
    alternates: tuple[tuple[str, str | None, str], ...] = ()   # more (trigger, prefix, suffix) openers, auto
                                                               # only; prefix None: the trigger begins the body
    start_openers: tuple[tuple[str, str | None, str], ...] = ()   # the same, at the start of the answer only
    markers_in_text: bool = True   # special tokens spelled in openers stay in the answer text (harmony: its
                                   # call text is haltwise's own, formats/harmony.py)

    @property
    def openers(self) -> tuple[tuple[str, str | None, str], ...]:
        """Every (trigger, prefix, suffix), the format's own first."""
        return ((self.trigger, self.prefix, self.suffix),) + self.alternates

    @property
    def marker_texts(self) -> tuple[str, ...]:
        """Pieces of the openers that may be one added token each (`<|tool_call|>`, `[TOOL_CALLS]`): the
        detokenizer keeps them in the answer text, special or not, so the parser sees the call's frame."""
        if not self.markers_in_text:
            return ()
        texts = [t for opener in self.openers + self.start_openers for t in opener if t]
        return tuple(dict.fromkeys(m.group() for t in texts for m in MARKER.finditer(t)))

    def body_head(self, name: str) -> str:
        """The fixed text of a body up to its arguments."""
        return '{"name": "' + name + '", "' + self.args_key + '": '
