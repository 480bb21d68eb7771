"""Structural stop presets: stops defined by the shape of the text, not by a fixed string.

Each preset has the StopStringMatcher interface (`feed(chars) -> list[Match]`, `pending()`), so the
per-sequence stopper treats them alike. A Match's `start` is where the returned text is cut and
`end` where it is cut with include_stop_str_in_output. What each preset keeps:

  preset      fires on                                     returned text ends          marker
  json        first top-level {...} or [...] completes     right after the JSON        (none)
  line        the first "\\n"                               before the "\\n"             "\\n"
  paragraph   the first blank line: "\\n" [ \\t\\r]* "\\n"     before the first "\\n"       the blank line
  code_block  closing fence of the first fenced block      right after the fence       (none)
  turn        a next-turn marker (e.g. "<|im_start|>")     before the marker           the marker

Leading prose is always kept (text before the first "{"/"[" for json, before the opening fence for
code_block). Presets are one-shot in meaning but report every occurrence: after a match (which the
stopper may ignore while min_tokens is not reached) they look for the next one.
"""
from __future__ import annotations

from typing import Sequence

from haltwise.stopping.stop_strings import Match, StopStringMatcher, TextStop

# The turn markers (the one list; the engine's `turn` preset uses it): ChatML / Llama-3 control texts and the
# plain role prefixes small models write when they start the user's turn themselves.
# End-of-turn tokens (<|im_end|>, <|eot_id|>) are not here: they are eos, reported as such.
DEFAULT_TURN_MARKERS = ("<|im_start|>", "<|start_header_id|>",
                        "\nUser:", "\nuser:", "\nHuman:", "\n### User:", "\n### Human:", "\n### Instruction")


class JsonPreset:
    """Stops when the first top-level JSON object or array is complete.

    Everything before the first "{" or "[" is prose and kept. Brackets are counted outside strings
    ("..." with backslash escapes); they are not validated (a stray "]" inside an object still
    closes a level): the stop is about where the value ends, validation is the caller's.
    Top-level scalars (a bare number or string) are not detected.
    """

    __slots__ = ("_pos", "_depth", "_in_string", "_escape")

    def __init__(self) -> None:
        self._pos = 0
        self._depth = 0          # open brackets; 0 = in prose (before or between values)
        self._in_string = False  # inside a JSON string (only meaningful while depth > 0)
        self._escape = False     # previous char was a backslash inside a string

    def feed(self, chars: str) -> list[Match]:
        matches: list[Match] = []
        for ch in chars:
            self._pos += 1
            if self._depth == 0:
                if ch in "{[":
                    self._depth = 1
            elif self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    matches.append(Match(self._pos, self._pos, "", "json"))
        return matches

    def pending(self) -> int:
        return 0  # the JSON is kept and the cut is after its last char: nothing to retract


class LinePreset:
    """Stops at the first newline; the newline is not returned."""

    __slots__ = ("_pos",)

    def __init__(self) -> None:
        self._pos = 0

    def feed(self, chars: str) -> list[Match]:
        start, self._pos = self._pos, self._pos + len(chars)
        return [Match(start + i, start + i + 1, "\n", "line") for i, ch in enumerate(chars) if ch == "\n"]

    def pending(self) -> int:
        return 0


class ParagraphPreset:
    """Stops at the first blank line ("\\n", optional spaces/tabs/CR, "\\n"); it is not returned."""

    __slots__ = ("_pos", "_run_start")

    def __init__(self) -> None:
        self._pos = 0
        self._run_start: int | None = None  # offset of a "\n" followed so far only by blanks

    def feed(self, chars: str) -> list[Match]:
        matches: list[Match] = []
        for ch in chars:
            if ch == "\n":
                if self._run_start is not None:
                    matches.append(Match(self._run_start, self._pos + 1, "\n\n", "paragraph"))
                self._run_start = self._pos
            elif ch not in " \t\r":
                self._run_start = None
            self._pos += 1
        return matches

    def pending(self) -> int:
        return 0 if self._run_start is None else self._pos - self._run_start


class CodeBlockPreset:
    """Stops after the closing fence of the first fenced Markdown block; the fence is kept.

    A fence is a line of up to 3 spaces then >= 3 backticks or tildes. The block closes on a later
    line of the same fence char, at least as long, followed only by spaces; the line must end
    ("\\n") to be known as a closing fence. The cut is right after the fence chars, so the
    returned text ends with e.g. "```". Nothing is held back: the fence is kept either way.
    """

    __slots__ = ("_pos", "_line", "_open")

    def __init__(self) -> None:
        self._pos = 0
        self._line: list[str] = []        # the current line so far (lines are short)
        self._open: tuple[str, int] | None = None  # (fence char, fence length) while in a block

    def feed(self, chars: str) -> list[Match]:
        matches: list[Match] = []
        for ch in chars:
            if ch == "\n":
                line = "".join(self._line)
                self._line.clear()
                fence = _fence(line)
                if self._open is None:
                    if fence is not None and (fence[0] != "`" or "`" not in line.lstrip(" ").lstrip("`")):
                        self._open = fence
                elif fence is not None and fence[0] == self._open[0] and fence[1] >= self._open[1] \
                        and line.strip(" ") == fence[0] * fence[1]:
                    cut = self._pos - len(line) + len(line.rstrip(" "))
                    matches.append(Match(cut, cut, "", "code_block"))
                    self._open = None
            else:
                self._line.append(ch)
            self._pos += 1
        return matches

    def pending(self) -> int:
        return 0


def _fence(line: str) -> tuple[str, int] | None:
    """(fence char, run length) if the line starts with a code fence, else None."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3 or not body or body[0] not in "`~":
        return None
    run = len(body) - len(body.lstrip(body[0]))
    return (body[0], run) if run >= 3 else None


class TurnPreset:
    """Stops where the model starts the next chat turn; the marker is not returned.

    Markers are the chat template's turn openers as text (e.g. "<|im_start|>") and plain role
    prefixes (e.g. "\\nUser:"). A marker that is a special token's text is also a token stop (the
    stopper handles that, since special tokens are removed from the text).
    """

    __slots__ = ("_matcher",)

    def __init__(self, markers: Sequence[str] = DEFAULT_TURN_MARKERS):
        self._matcher = StopStringMatcher(markers)

    @property
    def markers(self) -> tuple[str, ...]:
        return self._matcher.stops

    def feed(self, chars: str) -> list[Match]:
        return [Match(m.start, m.end, m.stop, "turn") for m in self._matcher.feed(chars)]

    def pending(self) -> int:
        return self._matcher.pending()


def make_preset(name: str, turn_markers: Sequence[str] = ()) -> TextStop:
    """The preset called `name` (one of sampling_params.STOP_PRESETS)."""
    if name == "json":
        return JsonPreset()
    if name == "line":
        return LinePreset()
    if name == "paragraph":
        return ParagraphPreset()
    if name == "code_block":
        return CodeBlockPreset()
    if name == "turn":
        return TurnPreset(tuple(turn_markers) or DEFAULT_TURN_MARKERS)
    raise ValueError(f"unknown stop preset {name!r}")
