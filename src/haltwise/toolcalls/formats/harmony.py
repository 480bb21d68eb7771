"""Harmony (gpt-oss): one call per reply, a commentary message addressed to the tool.

    model:     <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{"city": "Paris"}<|call|>

The engine's harmony section (stopping/harmony.py) reads the header: the answer's `recipient` is
"functions.NAME" and its text the arguments. The call's name is therefore not in the answer text, so the
tool-call layer reads the pair as this format's text, which exists only between haltwise's parts:

    call_text: <|message|>{"name": "NAME", "arguments": {"city": "Paris"}}<|call|>

and the existing parser, settle rule and stream deltas take it from there (streamed: the head once the
recipient is known, then the arguments as they come, then the tail). An answer without a recipient is
content and is never parsed. The call grammar cannot reach the header (it is not answer text), so this
format takes tool_choice "auto" and "none" only (toolcalls/plan.py).
"""
from haltwise.toolcalls.formats.base import ToolFormat

HARMONY = ToolFormat(name="harmony", trigger="<|message|>", prefix="", suffix="<|call|>", separator=None,
                     args_key="arguments", section_gap="", template_marks=("<|call|>",),
                     markers_in_text=False)
FUNCTIONS = "functions."


def call_name(recipient: str | None) -> str | None:
    """The function a recipient names ("functions.NAME" -> NAME), None for any other recipient."""
    if recipient is None or not recipient.startswith(FUNCTIONS) or len(recipient) == len(FUNCTIONS):
        return None
    return recipient[len(FUNCTIONS):]


def call_head(recipient: str) -> str:
    """The call text before the arguments ("" when the recipient is not a function)."""
    name = call_name(recipient)
    return "" if name is None else HARMONY.trigger + HARMONY.prefix + HARMONY.body_head(name)


def call_tail(recipient: str) -> str:
    return "" if call_name(recipient) is None else "}" + HARMONY.suffix


def call_text(recipient: str, arguments: str) -> str:
    """A harmony answer addressed to `recipient`, as this format's text (unchanged when not a function call)."""
    return call_head(recipient) + arguments + call_tail(recipient)


def answer_text(recipient: str | None, answer: str) -> str | None:
    """What the call parser reads of a whole harmony answer: a function call's text, or None (content)."""
    return None if call_name(recipient) is None else call_text(recipient, answer)  # type: ignore[arg-type]


class CallTextStream:
    """One harmony reply's answer deltas -> the parser's text: the call head once (the recipient is known
    before the first argument), the arguments as they come, the tail at the end; so the text concatenates
    to answer_text() of the whole answer. None: the answer is content (nothing to parse)."""

    def __init__(self) -> None:
        self._recipient: str | None = None

    def feed(self, recipient: str | None, delta: str) -> str | None:
        if call_name(recipient) is None:
            return None
        assert recipient is not None
        head = "" if self._recipient is not None else call_head(recipient)
        self._recipient = recipient
        return head + delta

    def tail(self) -> str:
        return call_tail(self._recipient) if self._recipient is not None else ""
