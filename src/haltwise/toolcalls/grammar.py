"""The llguidance (Lark) grammar for tool calls of one request: a valid call from the token that opens it.

    required / named:   start: section                       (parallel: sections or bodies repeat, and
                                                              a last gap may end the answer)
    auto:               start: (TEXT section)* TEXT           (the section opens on the trigger)
                        | start_section ...                   (a format's start opener: a call as the
                                                               answer's first characters; the first TEXT
                                                               then may not begin with it)
    section:            trigger prefix body (separator body)* suffix
    body_i:             "{\"name\": \"<tool i>\", \"<args_key>\": " %json{<tool i's parameters>} "}"

TEXT is any text that does not spell the trigger; where the trigger is one added token of the model
(Qwen2.5's `<tool_call>`), the grammar names that token (`<[id]>`), which never matches TEXT (llguidance
keeps special tokens out of text regexes), so the model's own call token switches to the call grammar.
Otherwise the trigger is a lazy lexeme (it ends at the first occurrence). Arguments are compact JSON
(", " and ": ", no other whitespace, as the templates' `tojson` writes them) so a call never wanders in
whitespace and the parser reads it exactly.
"""
from __future__ import annotations

import json
from typing import Callable

from haltwise.toolcalls.formats.base import MARKER, ToolFormat
from haltwise.toolcalls.spec import ToolRequest

COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_TOKENISH = MARKER   # text pieces that may be one added token
_REGEX_META = set(r"\.^$*+?()[]{}|/-&~")


def tool_grammar(fmt: ToolFormat, request: ToolRequest, token_id: Callable[[str], int | None]) -> str:
    """The Lark grammar text; token_id(text) is the id of an added token spelled exactly `text`, else None."""
    tools = request.callable_tools
    lit = _Literal(token_id)
    rules = ["%llguidance {}"]
    for i, tool in enumerate(tools):
        schema = {**tool.schema, "x-guidance": COMPACT_JSON}
        rules.append(f"body_{i}: {json.dumps(fmt.body_head(tool.name))} %json {json.dumps(schema)} \"}}\"")
    rules.append("body: " + " | ".join(f"body_{i}" for i in range(len(tools))))
    more = request.parallel and request.mode != "none"
    bodies = f"body ({lit(fmt.separator)} body)*" if more and fmt.separator is not None else "body"

    def rest(prefix: str | None, suffix: str) -> str:
        return " ".join(x for x in (lit(prefix), bodies, lit(suffix)) if x)

    def rest_after(trigger: str, suffix: str, tag: str = "", repeat: bool = False) -> str:
        """The bodies when the trigger is the beginning of a body (an opener with prefix None): the first
        body's tail, and (repeat) more whole bodies after the separator where parallel calls are allowed."""
        for j, tool in enumerate(tools):
            head = fmt.body_head(tool.name)
            assert head.startswith(trigger), (head, trigger)
            schema = {**tool.schema, "x-guidance": COMPACT_JSON}
            rules.append(f"{tag}tail_{j}: {json.dumps(head[len(trigger):])} %json {json.dumps(schema)} \"}}\"")
        rules.append(f"{tag}tail: " + " | ".join(f"{tag}tail_{j}" for j in range(len(tools))))
        again = f"({lit(fmt.separator)} body)*" if more and fmt.separator is not None else ""
        return " ".join(x for x in (f"{tag}tail", again if repeat else "", lit(suffix)) if x)

    if request.mode in ("required", "named"):
        rules.append(f"section: {lit(fmt.trigger)} {rest(fmt.prefix, fmt.suffix)}")
        repeat = more and fmt.separator is None
        gap = lit(fmt.section_gap)
        # a trailing newline may end the answer: writing the gap must not force another call
        rules.append(f"start: section ({gap} section)* {gap}?" if repeat and gap else
                     "start: section+" if repeat else "start: section")
        return "\n".join(rules) + "\n"
    # auto: free text, and a section wherever the model writes one of the triggers
    triggers = "|".join(_regex(t) for t, _, _ in fmt.openers)
    any_text = f"/(.|\\n)*/ & ~/(.|\\n)*({triggers})(.|\\n)*/"
    rules.append(f"TEXT: {any_text}")
    texts = [("", "TEXT")]
    if fmt.start_openers:   # the answer's first text must not begin with a start opener (that opens a call)
        starts = "|".join(_regex(t) for t, _, _ in fmt.start_openers)
        rules.append(f"FIRST: {any_text} & ~/({starts})(.|\\n)*/")
        texts.append(("first_", "FIRST"))
    for tag, text in texts:
        for i, (trig, prefix, suffix) in enumerate(fmt.openers):
            trigger = lit(trig)
            if trigger.startswith("<[") and " " not in trigger:
                rules.append(f"{tag}section_{i}: {text} {trigger} {rest(prefix, suffix)}")
            else:
                rules.append(f"{tag}opener_{i}[lazy]: {text} {trigger}")
                body = rest(prefix, suffix) if prefix is not None else rest_after(trig, suffix, tag)
                rules.append(f"{tag}section_{i}: {tag}opener_{i} {body}")
        rules.append(f"{tag}section: " + " | ".join(f"{tag}section_{i}" for i in range(len(fmt.openers))))
    if not fmt.start_openers:
        rules.append("start: section* TEXT" if more else "start: section? TEXT")
        return "\n".join(rules) + "\n"
    # a call as the answer's first characters, or text (which may open sections later) from the start
    for k, (trig, prefix, suffix) in enumerate(fmt.start_openers):
        body = rest(prefix, suffix) if prefix is not None else rest_after(trig, suffix, f"start_{k}_", True)
        rules.append(f"start_section_{k}: {lit(trig)} {body}")
    firsts = " | ".join(f"start_section_{k}" for k in range(len(fmt.start_openers)))
    rules.append(f"start: {firsts} | first_section section* TEXT | FIRST" if more else
                 f"start: {firsts} | first_section TEXT | FIRST")
    return "\n".join(rules) + "\n"


class _Literal:
    """Lark for a literal text: quoted strings, with pieces that are one added token named by id."""

    def __init__(self, token_id: Callable[[str], int | None]):
        self._token_id = token_id

    def __call__(self, text: str | None) -> str:
        if not text:
            return ""
        parts, at = [], 0
        for m in _TOKENISH.finditer(text):
            tid = self._token_id(m.group())
            if tid is None:
                continue
            if m.start() > at:
                parts.append(json.dumps(text[at:m.start()]))
            parts.append(f"<[{tid}]>")
            at = m.end()
        if at < len(text):
            parts.append(json.dumps(text[at:]))
        return " ".join(parts)


def _regex(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_META else "\\n" if c == "\n" else c for c in text)
