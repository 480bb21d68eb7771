"""Black box: `haltwise serve` with default flags answers the same greedy request with the same text.

The probe a user runs (issue 22): the same completion request 4 times in a row, then beside 1, 3 and 7
concurrent requests (different prompts and lengths, so the target's steps carry other rows, other
prefills and cache hits). Every answer must be identical, and end for the same reason.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest

from tests.server.browser_helpers import serve

pytestmark = pytest.mark.slow

TARGET = {"prompt": "Once upon a time, in a small harbour town, there lived", "max_tokens": 48,
          "temperature": 0, "seed": 1}
OTHERS = ["The capital of France is", "def fibonacci(n):", "List three colours:\n1.", "Water boils at",
          "My favourite food is", "In 1492, Columbus", "The quick brown fox jumps"]


@pytest.fixture(scope="module")
def default_server() -> Iterator[str]:
    yield from serve("--kv-cache-memory", "256MiB", "--max-model-len", "1024")


def complete(url: str, body: dict) -> tuple[str, str, dict]:
    choice = httpx.post(url + "/v1/completions", json=body, timeout=600).json()["choices"][0]
    return choice["text"], choice["finish_reason"], choice["termination"]["reason"]


def test_same_request_same_text_alone_and_beside_others(default_server) -> None:
    answers = [complete(default_server, TARGET) for _ in range(4)]
    assert len(set(answers)) == 1, answers
    for k in (1, 3, 7):
        bodies = [TARGET] + [{"prompt": p, "max_tokens": 16 + 8 * i, "temperature": 0} for i, p in enumerate(OTHERS[:k])]
        with ThreadPoolExecutor(len(bodies)) as pool:
            got = list(pool.map(lambda b: complete(default_server, b), bodies))
        assert got[0] == answers[0], f"beside {k} others: {got[0][0]!r} != {answers[0][0]!r}"
