"""NaN logits on the real server end the request with termination reason error — never a garbage token."""
from __future__ import annotations

import httpx

from tests.resilience.conftest import PLAIN, assert_idle, complete, fault_server
from tests.server.http_helpers import metric, sse_events


def test_nan_logits_end_request_with_error(monkeypatch) -> None:
    # step 1: a non-stream request (prefill) gets NaN; steps 2-3: a stream's prefill is fine, its first decode is NaN
    with fault_server(monkeypatch, "nan@1;nan@3") as s:
        r = complete(s.url, prompt="the cat", max_tokens=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_error", r.text
        assert "NaN" in r.json()["error"]["message"]
        assert metric(s.url, "haltwise_requests_finished_total", finish_reason="error", termination_reason="error") == 1

        body = {**PLAIN, "prompt": "the cat", "max_tokens": 5, "stream": True}
        with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=120) as stream:
            assert stream.status_code == 200
            events = sse_events(stream)
        assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "engine_error", events
        chunks = events[:-2]
        assert len(chunks) == 1 and chunks[0]["choices"][0]["finish_reason"] is None  # only the healthy step's token

        clean = complete(s.url, prompt="the cat", max_tokens=5)  # no more faults: the same greedy request
        assert clean.status_code == 200
        assert clean.json()["choices"][0]["text"].startswith(chunks[0]["choices"][0]["text"])
        assert metric(s.url, "haltwise_requests_finished_total", finish_reason="error", termination_reason="error") == 2
        assert metric(s.url, "haltwise_engine_breaker_state") == 0  # a NaN is the request's failure, not the engine's
        assert_idle(s.url)
