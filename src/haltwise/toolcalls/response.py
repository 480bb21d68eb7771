"""OpenAI chat shapes for tool calls: the answer's message, and the stream's deltas (same parser).

    message: {"role": "assistant", "content": <text outside calls> | None, "tool_calls": [
                 {"id", "type": "function", "function": {"name", "arguments": <JSON text>}}]}
    deltas:  per call: {"tool_calls": [{"index", "id", "type", "function": {"name", "arguments": ""}}]} first,
             then {"tool_calls": [{"index", "function": {"arguments": <fragment>}}]}; content as {"content"}.
Call ids are derived from the response id, the choice and the call's index, so the streamed and the
non-streamed answer to a request name their calls alike.
"""
from __future__ import annotations

import hashlib
from typing import Any

from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.formats import harmony
from haltwise.toolcalls.parser import Arguments, CallStart, Content, Event, ParseResult


def call_id(response_id: str, choice: int, index: int) -> str:
    return "call_" + hashlib.sha256(f"{response_id}:{choice}:{index}".encode()).hexdigest()[:24]


def openai_tool_calls(result: ParseResult, response_id: str, choice: int) -> list[dict[str, Any]]:
    return [{"id": call_id(response_id, choice, i), "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(result.calls)]


def chat_message(constraint: ToolCallConstraint | None, text: str, response_id: str, choice: int,
                 recipient: str | None = None) -> dict[str, Any]:
    """The assistant message of a non-streamed answer (recipient: CompletionOutput.recipient, harmony)."""
    parsed = harmony.answer_text(recipient, text) if _harmony(constraint) else text
    if constraint is None or parsed is None:
        return {"role": "assistant", "content": text}
    result = constraint.parse(parsed)
    message: dict[str, Any] = {"role": "assistant", "content": result.content}
    if result.calls:
        message["tool_calls"] = openai_tool_calls(result, response_id, choice)
    return message


def _harmony(constraint: ToolCallConstraint | None) -> bool:
    """gpt-oss: calls come from the answer's recipient and its text (toolcalls/formats/harmony.py)."""
    return constraint is not None and constraint.format_name == harmony.HARMONY.name


class ToolDeltaStream:
    """One choice's stream: text deltas in, OpenAI delta dicts out (one dict per event)."""

    def __init__(self, constraint: ToolCallConstraint, response_id: str, choice: int):
        self._parser = constraint.parser()
        self._rid, self._choice = response_id, choice
        self._harmony = harmony.CallTextStream() if _harmony(constraint) else None

    def feed(self, text: str, recipient: str | None = None) -> list[dict[str, Any]]:
        """Deltas for new answer text (recipient: the update's CompletionOutput.recipient, harmony)."""
        if self._harmony is not None:
            parsed = self._harmony.feed(recipient, text)
            if parsed is None:                # a harmony answer without a call: content as it comes
                return [{"content": text}] if text else []
            text = parsed
        return [self._delta(e) for e in self._parser.feed(text)] if text else []

    def finish(self) -> list[dict[str, Any]]:
        tail = self._harmony.tail() if self._harmony is not None else ""
        return [self._delta(e) for e in (self._parser.feed(tail) if tail else []) + self._parser.finish()]

    def _delta(self, e: Event) -> dict[str, Any]:
        if isinstance(e, Content):
            return {"content": e.text}
        if isinstance(e, CallStart):
            return {"tool_calls": [{"index": e.index, "id": call_id(self._rid, self._choice, e.index),
                                    "type": "function", "function": {"name": e.name, "arguments": ""}}]}
        assert isinstance(e, Arguments)
        return {"tool_calls": [{"index": e.index, "function": {"arguments": e.text}}]}
