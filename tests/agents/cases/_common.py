"""What every agent-library case shares (runs in the agents venv, never imports haltwise).

A case is a function `(base_url, http) -> str` that calls the library exactly as its docs show and returns
a short description of what it got; it raises (AssertionError or the library's own error) when the
library did not get the answer. `http` is an httpx client that records every request body on the wire
(JSON lines in $HALTWISE_WIRE_LOG: {"path", "body"}), handed to the library as its HTTP client.

    python tests/agents/cases/<library>.py <case> <base_url>   -> one JSON line {"ok", "detail"}, exit 0 / 1
"""
from __future__ import annotations

import functools
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
# Every case asks for temperature 0 (a documented parameter of every library): the SDKs default to sampling at
# temperature 1, and a sampled answer would make a case pass or fail by chance.


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str
    age: int


CALLED: list[str] = []   # the cities get_weather was called for, in this process


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    CALLED.append(city)
    return WEATHER_RESULT if "paris" in city.lower() else f"{city}: unknown"


def check_person(p: Person) -> str:
    assert "john" in p.name.lower() and p.age == 31, f"wrong extraction: {p!r}"
    return f"{p.name}, {p.age}"


def check_weather_answer(text: str) -> str:
    assert text and "18" in text, f"the answer does not use the tool's result: {text!r}"
    return "answered: " + text.strip()[:100]


def loop_case(case: Callable[..., str]) -> Callable[..., str]:
    """A tool-loop case: its outcome through tool_loop_outcome."""
    @functools.wraps(case)
    def run(*args: object) -> str:
        return tool_loop_outcome(lambda: case(*args))
    return run


def tool_loop_outcome(run: Callable[[], str]) -> str:
    """A tool loop's outcome: `answered: ...` from the tool's result, or `tool_loop: ...` when the model asked for
    the answered call again and the server ended that turn by name (termination.reason tool_loop, on the wire),
    whatever the library made of it. Anything else (no call for Paris, length, a 4xx) raises."""
    try:
        return run()
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    assert any("paris" in c.lower() for c in CALLED), f"get_weather was never called for Paris ({problem})"
    last = [t for t in TERMINATIONS if t is not None]
    if last and last[-1]["reason"] == "tool_loop":
        return f"tool_loop: {last[-1]['detail'][:80]} (library: {problem[:80]})"
    raise AssertionError(f"{problem}; last termination {last[-1] if last else None}")


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


TERMINATIONS: list = []   # haltwise's `termination` of each non-streamed answer, in order


def _termination(body: object) -> object:
    if not isinstance(body, dict):
        return None
    if "termination" in body:          # Responses and Messages carry it at the top
        return body["termination"]
    choices = body.get("choices") or [{}]
    return choices[0].get("termination") if isinstance(choices[0], dict) else None


def _seen(response: httpx.Response) -> None:
    if response.headers.get("content-type", "").startswith("application/json"):
        response.read()
        TERMINATIONS.append(_termination(json.loads(response.content or b"null")))


async def _aseen(response: httpx.Response) -> None:
    if response.headers.get("content-type", "").startswith("application/json"):
        await response.aread()
        TERMINATIONS.append(_termination(json.loads(response.content or b"null")))


async def _arecord(request: httpx.Request) -> None:
    _record(request)


def http_client() -> httpx.Client:
    return httpx.Client(event_hooks={"request": [_record], "response": [_seen]}, timeout=600)


def async_http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(event_hooks={"request": [_arecord], "response": [_aseen]}, timeout=600)


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
