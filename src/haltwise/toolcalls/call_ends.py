"""Where the answer's complete tool calls end: the place a loop inside a run of calls is cut.

A small model that makes several calls may keep going (Paris, London, Berlin, Madrid, ...) until a loop
detector fires inside the next call. That call is not the model's to finish: the complete calls before it
are the answer. CallEnds tells the stopper where they end, and holds back what follows the last one, so
the cut never retracts streamed text:

    text:  <tool_call>\\n{...Paris...}\\n</tool_call>\\n<tool_call>\\n{...London...}\\n</tool_call>\\n<tool_call>\\n{"na
                                   ^ end  ^ section_end                  ^ end    ^ section_end  [ held back ...
    candidates (ascending): each complete call's end (the body's "}") and its section's end (after the
    suffix), for the calls made since the last content: text between calls is only call syntax. A cut may
    fall inside a token (Qwen writes `"}}\n` as one token after a bare `{"name": ...}` body), as a stop
    string's may: the text ends at the cut, the token counts.

Content (non-blank text outside calls) after a call clears the candidates: a cut there would drop the
model's words. With no candidate the loop ends the request as it does anywhere else. The text is fed to its
own parser one character at a time, so every position is exact (answers are short; the cost is a parser
step per character).
"""
from __future__ import annotations

from typing import Callable

from haltwise.stopping.stop_strings import Match
from haltwise.stopping.termination import Reason, Termination
from haltwise.toolcalls.formats.base import ToolFormat
from haltwise.toolcalls.parser import Content, ParsedCall, ToolCallParser


class CallEnds:
    """A text watcher (stop_strings.TextStop interface) that never fires: it only holds back and points."""

    def __init__(self, fmt: ToolFormat):
        self._parser = ToolCallParser(fmt)
        self._first = 0          # index of the first call made since the last content
        self._fed = 0

    def feed(self, chars: str) -> list[Match]:
        self._fed += len(chars)
        for ch in chars:
            if any(isinstance(e, Content) for e in self._parser.feed(ch)):
                self._first = len(self._parser.calls)
        return []

    def _complete(self) -> list[ParsedCall]:
        return [c for c in self._parser.calls[self._first:] if c.complete]

    def pending(self) -> int:
        """Everything after the last complete call's body (while no content followed it)."""
        done = self._complete()
        return self._fed - done[-1].end if done else 0

    def candidates(self) -> list[tuple[int, bool]]:
        """(offset, the section is closed there) for each place the text may be cut after a complete call,
        ascending (module docstring)."""
        out: list[tuple[int, bool]] = []
        for call in self._complete():
            out.append((call.end, call.section_end == call.end))
            if call.section_end > call.end:
                out.append((call.section_end, True))
        return out

    def cut(self, limit: int, released: int, tokens: Callable[[int], tuple[int, bool]]) -> tuple[int, int] | None:
        """The last candidate at or before `limit` (the loop's own cut) and not before the text already
        released: (offset, answer tokens kept). tokens(offset): (the answer tokens through the one that holds
        the character before offset, whether one ends exactly there). A cut inside a token is taken only where
        the section is closed: an open one is closed through the grammar, which needs a token boundary.
        None: no such place (the loop ends the request as anywhere else)."""
        for offset, closed in reversed(self.candidates()):
            if offset > limit:
                continue
            if offset < released:
                return None
            kept, exact = tokens(offset)
            if exact or closed:
                return offset, kept
        return None

    def termination(self, loop: Termination, offset: int, token_index: int) -> Termination:
        """The loop's record, as a tool_loop cut at offset: the complete calls before it are the answer."""
        names = [c.name for c in self._parser.calls if c.complete and c.end <= offset]
        return Termination(Reason.TOOL_LOOP, f"{loop.detail}; inside a run of tool calls: cut after the last "
                           f"complete call (char {offset}; {len(names)} kept: {', '.join(names)}), the call the "
                           f"loop was in is withheld", token_index=token_index, char_offset=offset)
