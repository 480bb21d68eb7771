"""Tool-call loops: a call identical to one already answered in the conversation, or to one made earlier in
the same answer, is withheld and ends the request (termination reason tool_loop, business layer).

Identical = the same name and the same arguments after JSON normalisation (keys sorted, no whitespace).
"Answered" = an assistant message's tool call followed, later in the messages, by a `tool` message with its
tool_call_id (a call without an id counts once any tool message follows it).

ToolLoopWatch has the stop-string interface (stopping/stop_strings.TextStop), so the per-sequence stopper
runs it with the stop strings, in the same step:

    text:   Sure.<tool_call>\\n{"name": "get_weather", "arguments": {"city": "Paris"}}\\n</tool_call>
                 ^ section_at                                                   ^ the call completes here
    held back while a call is open whose name could repeat one (answered or made): nothing of a
    withheld call is ever streamed. Fires with Match(start=section_at): the text is cut before the call.

A repeat inside one multi-call section (formats with a separator) is not withheld (the cut would break
the section); the model's later sections are.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from haltwise.stopping.stop_strings import Match
from haltwise.toolcalls.formats.base import ToolFormat
from haltwise.toolcalls.parser import ToolCallParser

PRESET = "tool_loop"


def call_key(name: str, arguments: Any) -> tuple[str, str] | None:
    """(name, normalised arguments JSON), or None when the arguments are not JSON text / an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return None
    return name, json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def answered_calls(messages: Iterable[dict[str, Any]]) -> frozenset[tuple[str, str]]:
    """The calls of assistant messages that a later tool message answers (module docstring)."""
    pending: list[tuple[str | None, tuple[str, str]]] = []
    answered: set[tuple[str, str]] = set()
    for m in messages:
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or ():
                fn = c.get("function") or {}
                key = call_key(fn.get("name", ""), fn.get("arguments", "{}"))
                if key is not None:
                    pending.append((c.get("id"), key))
        elif m.get("role") == "tool":
            tid = m.get("tool_call_id")
            for call_id, key in pending:
                if call_id is None or call_id == tid:
                    answered.add(key)
    return frozenset(answered)


class ToolLoopWatch:
    """Feed the answer's text; a completed call that repeats an answered (or earlier) one is a Match."""

    def __init__(self, fmt: ToolFormat, answered: frozenset[tuple[str, str]]):
        self._parser = ToolCallParser(fmt)
        self._answered = answered
        self._made: set[tuple[str, str]] = set()
        self._watch_names = {name for name, _ in answered}
        self._text = ""
        self._section_at: int | None = None   # where the open section's trigger starts
        self._section_calls = 0               # calls read in the open section
        self._done = 0                        # completed calls so far
        self._fired = False

    def feed(self, chars: str) -> list[Match]:
        if self._fired or not chars:
            return []
        was_open = self._parser.in_call
        self._text += chars
        self._parser.feed(chars)
        if self._parser.in_call and not was_open:
            self._section_at, self._section_calls = self._text.rfind(self._parser.opener[0]), 0
        matches: list[Match] = []
        calls = self._parser.calls
        while self._done < len(calls) and calls[self._done].complete:
            call = calls[self._done]
            self._done += 1
            self._section_calls += 1
            key = call_key(call.name, call.arguments)
            if key is None:
                continue
            repeat = "already answered in this conversation" if key in self._answered else \
                "already made in this answer" if key in self._made else ""
            self._made.add(key)
            self._watch_names.add(call.name)
            if repeat and self._section_calls == 1 and self._section_at is not None and not matches:
                self._fired = True
                what = f"withheld call {call.name}({key[1]}): {repeat}"
                matches.append(Match(self._section_at, len(self._text), what, PRESET))
        if not self._parser.in_call:
            self._section_at = None
        return matches

    def pending(self) -> int:
        """Hold back an open call that could repeat one (its name is unread or watched), and any text
        that may still grow into a trigger."""
        if self._fired:
            return 0
        if not self._parser.in_call:
            return self._parser.held
        calls = self._parser.calls
        reading = calls[-1] if calls and not calls[-1].complete else None
        if self._section_at is None or (reading is not None and reading.name not in self._watch_names):
            return 0
        return len(self._text) - self._section_at
