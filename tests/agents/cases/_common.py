"""What every agent-library case shares (runs in the agents venv, never imports haltwise).

A case is a function `(base_url, http) -> str` that calls the library exactly as its docs show and returns
a short description of what it got; it raises (AssertionError or the library's own error) when the
library did not get the answer. `http` is an httpx client that records every request body on the wire
(JSON lines in $HALTWISE_WIRE_LOG: {"path", "body"}), handed to the library as its HTTP client.

    python tests/agents/cases/<library>.py <case> <base_url>   -> one JSON line {"ok", "detail"}, exit 0 / 1
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Callable

try:            # the SDKs of late 2026 speak httpx2 (the same API); older ones httpx
    import httpx2 as httpx
except ImportError:
    import httpx
from pydantic import BaseModel

PROSE = "John Smith is 31 years old and lives in Lyon."
EXTRACT = f"Extract the person's name and age from this text: {PROSE}"
ASK_WEATHER = "What is the weather like in Paris? Use the get_weather tool."
WEATHER_RESULT = "Paris: 18 degrees celsius, sunny"
MAX_TOKENS = 200     # small: the 0.5B answers these in far fewer; a run-away answer fails fast


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str
    age: int


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return WEATHER_RESULT if "paris" in city.lower() else f"{city}: unknown"


def check_person(p: Person) -> str:
    assert "john" in p.name.lower() and p.age == 31, f"wrong extraction: {p!r}"
    return f"{p.name}, {p.age}"


def check_weather_answer(text: str) -> str:
    assert text and "18" in text, f"the answer does not use the tool's result: {text!r}"
    return text.strip()[:120]


def _record(request: httpx.Request) -> None:
    path = os.environ.get("HALTWISE_WIRE_LOG")
    if not path:
        return
    request.read()
    try:
        body = json.loads(request.content or b"null")
    except ValueError:
        body = None
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"path": request.url.path, "body": body}) + "\n")


async def _arecord(request: httpx.Request) -> None:
    _record(request)


def http_client() -> httpx.Client:
    return httpx.Client(event_hooks={"request": [_record]}, timeout=600)


def async_http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(event_hooks={"request": [_arecord]}, timeout=600)


def main(cases: dict[str, Callable[[str], str]]) -> None:
    """Run the case named in argv[1] against the server at argv[2]; print {"ok", "detail"}; exit 0 / 1."""
    name, base_url = sys.argv[1], sys.argv[2]
    try:
        detail, ok = cases[name](base_url), True
    except Exception as exc:   # the library's own error is the finding: report it whole
        detail, ok = f"{type(exc).__name__}: {exc}"[:2000], False
        traceback.print_exc()
    print(json.dumps({"ok": ok, "detail": detail}))
    sys.exit(0 if ok else 1)
