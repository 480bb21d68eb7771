"""Bounded schemathesis runs on /v1/messages and /v1/responses: never a 5xx, errors in each surface's shape."""
from __future__ import annotations

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MAX_EXAMPLES = 40


def _fuzz(server, path: str, cap_field: str, error_keys: set[str]) -> None:
    schema = schemathesis.openapi.from_dict(httpx.get(server.url + "/openapi.json").json())
    operation = schema[path]["POST"]
    seen: list[int] = []

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(), cap=st.integers(1, 8))
    def check(case, cap: int) -> None:
        body = case.body
        if isinstance(body, dict):
            if isinstance(body.get(cap_field), int):
                body[cap_field] = min(body[cap_field], cap)   # short examples; validity unchanged
            body.setdefault("timeout", 5.0)
        r = httpx.post(server.url + path, json=body, timeout=60)
        seen.append(r.status_code)
        assert r.status_code < 500, (body, r.text)
        if r.status_code >= 400:
            assert set(r.json()) >= error_keys, r.text

    check()
    assert len(seen) >= MAX_EXAMPLES // 2 and any(s == 400 for s in seen)


def test_messages_fuzz(tiny_server) -> None:
    _fuzz(tiny_server, "/v1/messages", "max_tokens", {"type", "error"})


def test_responses_fuzz(tiny_server) -> None:
    _fuzz(tiny_server, "/v1/responses", "max_output_tokens", {"error"})
