"""Streaming extraction of tool calls from generated text: content deltas, call starts, argument fragments.

One ToolCallParser per choice; feed() it text in any pieces, then finish(). The events of any split of
the same text concatenate to the same result (tested by property), so the non-streamed answer is just
feed(text) + finish(), and streaming equals it by construction.

    text:   Sure.<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>
            ^content^ ^trigger^ ^prefix^ ^head with name^ ^arguments^ ^^ suffix
    events: Content("Sure.")  CallStart(0, "f")  Arguments(0, '{"x": 1}') ...

Invariants:
- no part of a call section ever reaches a Content event: text that could still grow into the trigger
  is held back (like a possible stop string), and released once it cannot; a format's start openers
  count only at the answer's first character (while the whole answer so far could be one, it is held);
- trailing whitespace of the content is held back until non-blank content follows; at finish it is
  released only if no call was made (so an answer of only calls has no content, streamed or not);
- argument fragments concatenate to the exact arguments text (a JSON object, tracked by a string-aware
  brace counter, so it ends exactly at its closing brace).
After the trigger the text is fixed by the grammar; text that departs from it marks the parser broken
(the structure is then reported incomplete, never as a call).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from haltwise.toolcalls.formats.base import ToolFormat


@dataclass(frozen=True)
class Content:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    name: str


@dataclass(frozen=True)
class Arguments:
    index: int
    text: str


Event = Content | CallStart | Arguments


@dataclass
class ParsedCall:
    name: str
    arguments: str = ""
    complete: bool = False      # the body closed (its arguments JSON and the body's "}")
    end: int = field(default=-1, compare=False)           # once complete: offset just after the body's "}"
    section_end: int = field(default=-1, compare=False)   # once its section closed: offset just after it


@dataclass
class ParseResult:
    content: str | None                       # None when only calls were made (or nothing at all)
    calls: list[ParsedCall] = field(default_factory=list)
    open: bool = False                        # the text ended inside a call section
    broken: bool = False                      # the text departed from the format (never under the grammar)


class ToolCallParser:
    def __init__(self, fmt: ToolFormat):
        self.fmt = fmt
        self.calls: list[ParsedCall] = []
        self._buf = ""                  # text taken in, not yet classified
        self._taken = 0                 # characters fed so far
        self._state = "text"            # text | lit | name | args | after | broken
        self._expect = ""               # the literal expected in state lit
        self._then = ""                 # the state after it
        self._blank = ""                # held-back whitespace-only content
        self._depth = 0                 # arguments: brace/bracket depth
        self._in_string = False
        self._escape = False
        self._content: list[str] = []
        self._opener = fmt.openers[0]   # (trigger, prefix, suffix) of the section being read
        self._at_start = bool(fmt.start_openers)   # nothing classified yet: start openers still apply

    @property
    def in_call(self) -> bool:
        """The text read so far ends inside a call section."""
        return self._state not in ("text", "broken")

    @property
    def opener(self) -> tuple[str, str | None, str]:
        """(trigger, prefix, suffix) of the section being read (or last read)."""
        return self._opener

    @property
    def held(self) -> int:
        """Characters taken in but not yet classified (in text: what may still grow into a trigger)."""
        return len(self._buf)

    # ---- feeding ----------------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        self._buf += text
        self._taken += len(text)
        events: list[Event] = []
        while self._step(events):
            pass
        return events

    def finish(self) -> list[Event]:
        """The end of the text: release held-back text that can no longer become a call."""
        events: list[Event] = []
        if self._state == "text":
            self._emit_content(self._buf, events)
            self._buf = ""
        elif self._state == "after" and self._opener[2] == "" and not self._buf.strip():
            self._state = "text"            # a section without a closing text ends with the text
            self.calls[-1].section_end = self.calls[-1].end
        if not self.calls and self._blank:
            events.append(Content(self._blank))
            self._content.append(self._blank)
            self._blank = ""
        return events

    def result(self) -> ParseResult:
        """The parse so far (call after finish())."""
        content = "".join(self._content)
        return ParseResult(content if content or not self.calls and self._state == "text" else None,
                           self.calls, open=self._state not in ("text", "broken"), broken=self._state == "broken")

    # ---- the state machine ------------------------------------------------------------------
    def _step(self, events: list[Event]) -> bool:
        """Consume what can be consumed from the buffer; False when it must wait for more text."""
        s = self._state
        if s == "text":
            return self._text(events)
        if s == "lit":
            return self._literal()
        if s == "name":
            end = self._buf.find('"')
            if end < 0:
                return False
            name, self._buf = self._buf[:end], self._buf[end:]
            self.calls.append(ParsedCall(name))
            events.append(CallStart(len(self.calls) - 1, name))
            self._lit('", "' + self.fmt.args_key + '": ', "args")
            return True
        if s == "args":
            return self._arguments(events)
        if s == "after":
            return self._after()
        return False

    def _text(self, events: list[Event]) -> bool:
        if self._at_start:
            held = self._start_of_answer()
            if held is not None:
                return held
        found = [(self._buf.find(o[0]), i) for i, o in enumerate(self.fmt.openers)]
        found = [(at, i) for at, i in found if at >= 0]
        if found:
            at, i = min(found)
            self._emit_content(self._buf[:at], events)
            self._open(self.fmt.openers[i], at)
            return True
        keep = max(_possible_start(self._buf, o[0]) for o in self.fmt.openers)
        self._emit_content(self._buf[:len(self._buf) - keep], events)
        self._buf = self._buf[len(self._buf) - keep:]
        return False

    def _start_of_answer(self) -> bool | None:
        """The format's start openers, read only while nothing of the answer has been classified.

        True: a section opened; False: the text so far could still be one (all of it held back);
        None: it cannot, and never will (from here on the answer is read as usual)."""
        for opener in self.fmt.start_openers:
            if self._buf.startswith(opener[0]):
                self._open(opener, 0)
                return True
            if opener[0].startswith(self._buf):
                return False
        self._at_start = False
        return None

    def _open(self, opener: tuple[str, str | None, str], at: int) -> None:
        """Start reading the section whose trigger begins at buffer position `at`."""
        self._opener = opener
        self._at_start = False
        if opener[1] is None:     # the trigger is the body's own beginning
            self._buf = self._buf[at:]
            self._lit('{"name": "', "name")
        else:
            self._buf = self._buf[at + len(opener[0]):]
            self._lit(opener[1], "head")

    def _lit(self, expect: str, then: str) -> None:
        self._state, self._expect, self._then = "lit", expect, then

    def _literal(self) -> bool:
        if self._buf.startswith(self._expect):
            self._buf = self._buf[len(self._expect):]
            if self._then == "head":         # every body starts with its fixed head up to the name
                self._lit('{"name": "', "name")
            else:
                self._state = self._then
            return True
        if not self._expect.startswith(self._buf):
            self._state = "broken"
        return False

    def _arguments(self, events: list[Event]) -> bool:
        call = self.calls[-1]
        for i, ch in enumerate(self._buf):
            if self._in_string:
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
                if self._depth == 0:            # the arguments object closed at ch
                    self._emit_args(call, self._buf[:i + 1], events)
                    self._buf = self._buf[i + 1:]
                    self._lit("}", "after")
                    return True
        self._emit_args(call, self._buf, events)
        self._buf = ""
        return False

    def _after(self) -> bool:
        """Between a closed body and what follows: the separator (another body) or the section's end."""
        call = self.calls[-1]
        if not call.complete:
            call.complete, call.end = True, self._taken - len(self._buf)
        sep, suffix = self.fmt.separator, self._opener[2]
        if sep is not None and self._buf.startswith(sep):
            self._buf = self._buf[len(sep):]
            self._lit('{"name": "', "name")
            return True
        if suffix and self._buf.startswith(suffix):
            self._buf = self._buf[len(suffix):]
            self._state, call.section_end = "text", self._taken - len(self._buf)
            return True
        if (sep is not None and sep.startswith(self._buf)) or (suffix and suffix.startswith(self._buf)):
            return False                        # too little text yet to tell (an empty buffer included)
        if not suffix:
            self._state, call.section_end = "text", call.end   # a section without closing text ends where
            return True                                         # other text starts
        self._state = "broken"
        return False

    # ---- output -----------------------------------------------------------------------------
    def _emit_content(self, text: str, events: list[Event]) -> None:
        """Content out, its trailing whitespace held back until more content follows (split-invariant)."""
        text = self._blank + text
        kept = text.rstrip()
        self._blank = text[len(kept):]
        if kept:
            self._content.append(kept)
            events.append(Content(kept))

    def _emit_args(self, call: ParsedCall, text: str, events: list[Event]) -> None:
        if text:
            call.arguments += text
            events.append(Arguments(len(self.calls) - 1, text))


def _possible_start(text: str, trigger: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of trigger (text to hold back)."""
    for k in range(min(len(text), len(trigger) - 1), 0, -1):
        if trigger.startswith(text[-k:]):
            return k
    return 0


def parse(fmt: ToolFormat, text: str) -> ParseResult:
    """The whole text at once (the non-streamed answer)."""
    p = ToolCallParser(fmt)
    p.feed(text)
    p.finish()
    return p.result()
