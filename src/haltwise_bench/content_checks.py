"""Where an answer's content ends, judged from the text alone, per kind of prompt (eval-stops' yardstick).

A checker is independent of the stop strategies it judges (no stop preset code is used): it reads a
text and returns the character offset at which the answer asked for is complete, or None when the
text never completes it. The prompt set stores each prompt's check (`"check": {"type": ..., ...}`):

  type       content end
  sentence   after the first sentence ('.', '!' or '?' then whitespace or the end) or the first line
             end after some text, whichever comes first; a text with neither that the model ended
             itself (eos) ends where it ends
  items      after the n-th item line ("items": n): a non-empty line not ending in ':' (an
             introduction such as "Here are five fruits:" is not an item)
  json       after the first complete JSON value, decoded from the first '{' or '['; with "schema":
             the JSON Schema the prompt asks for, which that value is also validated against
             (json_value_valid; the end does not depend on it)
  code       after the closing fence of the first fenced (```) block
  turn       before the first line that opens another speaker's turn ("User:", "Customer:", ...);
             a reply the model ended itself (eos) with no such line ends where it ends
  reply      where the model ended the text itself (eos), else never; with "marker": w, before the
             first occurrence of w as a whole word (a regex \\b match, not the stop matcher), the
             marker the prompt asks the model to write. For the word-stop prompts, whose user stop
             words also occur inside other words ("end" in "weekend"): a cut before this end is a
             false cut, whichever matcher made it
  endless    never (loop prompts: the request itself has no end; judged by tokens spent)
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_FENCE = re.compile(r"^[ \t]*```", re.MULTILINE)
_SPEAKER = re.compile(r"\n[ \t]*(?:User|Customer|Human|Assistant|Shopkeeper|Me|You)[ \t]*:", re.IGNORECASE)


def _sentence(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    body = len(text) - len(text.lstrip())
    ends = []
    if m := _SENTENCE_END.search(text, body):
        ends.append(m.end())
    newline = text.find("\n", body)
    if newline >= 0:
        ends.append(newline)
    if ends:
        return min(ends)
    return len(text.rstrip()) if ended_by_eos and text.strip() else None


def _items(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    want, seen, pos = int(check["items"]), 0, 0
    for line in text.split("\n"):
        end = pos + len(line)
        if line.strip() and not line.rstrip().endswith(":"):
            seen += 1
            if seen == want:
                # the last item is complete once its line ends (or the model ended the text there)
                return end if end < len(text) or ended_by_eos else None
        pos = end + 1
    return None


def _first_json(text: str) -> tuple[Any, int] | None:
    """The first JSON value decoded from the first '{' or '[', and where it ends."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    try:
        return json.JSONDecoder().raw_decode(text, min(starts))
    except ValueError:
        return None


def _json(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    found = _first_json(text)
    return None if found is None else found[1]


def _code(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    fences = list(_FENCE.finditer(text))
    if len(fences) < 2:
        return None
    close = fences[1]
    return close.end()


def _turn(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    if m := _SPEAKER.search(text):
        return m.start() if text[:m.start()].strip() else None
    return len(text.rstrip()) if ended_by_eos and text.strip() else None


def _reply(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    marker = check.get("marker")
    if marker and (m := re.search(rf"(?<!\w){re.escape(marker)}(?!\w)", text)):
        return len(text[:m.start()].rstrip())
    return len(text.rstrip()) if ended_by_eos and text.strip() else None


def _endless(text: str, check: dict[str, Any], ended_by_eos: bool) -> int | None:
    return None


CHECKERS: dict[str, Callable[[str, dict[str, Any], bool], int | None]] = {
    "sentence": _sentence, "items": _items, "json": _json, "code": _code, "turn": _turn, "reply": _reply,
    "endless": _endless}


def content_end(check: dict[str, Any], text: str, ended_by_eos: bool) -> int | None:
    """The character offset where the content asked for is complete in `text`, or None."""
    return CHECKERS[check["type"]](text, check, ended_by_eos)


def json_value_ok(text: str) -> bool:
    """A client extracting JSON gets a value: decoded from the first '{' or '[' (text after it is ignored)."""
    return _first_json(text) is not None


def json_value_valid(text: str, schema: dict[str, Any]) -> bool:
    """The value json_value_ok finds also validates against `schema` (jsonschema, the schema's own draft)."""
    import jsonschema

    found = _first_json(text)
    return found is not None and jsonschema.validators.validator_for(schema)(schema).is_valid(found[0])
