"""Watchdog on the real server: a step stalled past the bound ends its requests with error
(stream: error event then [DONE]; non-stream: 503 in the OpenAI shape), the server keeps answering
during the stall and serves normally after it, and nothing is leaked. A step that computes slowly (its
layers keep finishing) is never ended, however long it runs (docs/engine-steps.md)."""
from __future__ import annotations

import json

import httpx

from tests.resilience.conftest import PLAIN, assert_idle, complete, fault_server
from tests.server.http_helpers import metric

WATCHDOG_S = 1.0
STALL_S = 6.0  # far past the watchdog bound; the test never measures it
SLOW_WATCHDOG_S = 2.0
SLOW_LAYER_S = 1.3  # < the bound (0.7 s spare for the watchdog's 0.25 s polls), 2 layers > the bound


def _events(lines) -> list:
    out = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
            if data == "[DONE]":
                break
    return out


def test_stalled_stream_gets_error_event_then_done(monkeypatch) -> None:
    # steps 1 and 2 (prefill, one decode) run; step 3 stalls
    with fault_server(monkeypatch, f"stall@3:{STALL_S}", watchdog_s=WATCHDOG_S) as s:
        body = {**PLAIN, "prompt": "hello world", "max_tokens": 16, "stream": True}
        with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            events = _events(r.iter_lines())
        texts = [e for e in events if isinstance(e, dict) and "choices" in e]
        errors = [e for e in events if isinstance(e, dict) and "error" in e]
        assert events[-1] == "[DONE]" and len(errors) == 1 and events[-2] is errors[0], events
        assert errors[0]["error"]["code"] == "engine_error" and "watchdog" in errors[0]["error"]["message"]
        assert set(errors[0]["error"]) == {"message", "type", "param", "code"}
        assert 1 <= len(texts) <= 2 and all(c["choices"][0]["finish_reason"] is None for c in texts)
        # the engine thread may still be inside the stalled step: this request waits for it, then runs
        after = complete(s.url, max_tokens=3)
        assert after.status_code == 200 and after.json()["choices"][0]["termination"]["reason"] == "max_tokens"
        assert metric(s.url, "haltwise_engine_breaker_state") == 0  # one hung step < threshold
        assert_idle(s.url)


def test_server_answers_during_stall_and_nonstream_gets_503(monkeypatch) -> None:
    with fault_server(monkeypatch, f"stall@2:{STALL_S}", watchdog_s=WATCHDOG_S) as s:
        with httpx.stream("POST", f"{s.url}/v1/completions", timeout=120,
                          json={**PLAIN, "prompt": "abc", "max_tokens": 16, "stream": True}) as r:
            lines = (line for line in r.iter_lines() if line)
            first = json.loads(next(lines)[len("data: "):])
            assert first["choices"][0]["finish_reason"] is None
            # step 2 is now stalled (or about to be): the server still answers
            assert httpx.get(f"{s.url}/health", timeout=30).json() == {"status": "ok"}
            assert httpx.get(f"{s.url}/v1/models", timeout=30).status_code == 200
            assert "haltwise_requests_running" in httpx.get(f"{s.url}/metrics", timeout=30).text
            rest = _events(lines)
        assert rest[-1] == "[DONE]" and rest[-2]["error"]["code"] == "engine_error", rest
        assert_idle(s.url)

    with fault_server(monkeypatch, f"stall@1:{STALL_S}", watchdog_s=WATCHDOG_S) as s:
        r = complete(s.url, max_tokens=8)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "engine_error" and set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert complete(s.url, max_tokens=2).status_code == 200
        assert_idle(s.url)


def test_slow_step_that_computes_is_never_ended(monkeypatch) -> None:
    # Each of the tiny model's 2 layers takes SLOW_LAYER_S longer on the prompt's steps: every step runs
    # past the watchdog bound, but a layer finishes more often than the bound: slow, not stuck.
    with fault_server(monkeypatch, f"slow@1-3:{SLOW_LAYER_S}", watchdog_s=SLOW_WATCHDOG_S) as s:
        r = complete(s.url, prompt="hello world " * 30, max_tokens=3)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["termination"]["reason"] == "max_tokens"
        assert r.json()["usage"]["prompt_tokens"] > 100
        assert metric(s.url, "haltwise_engine_breaker_state") == 0
        assert_idle(s.url)


def test_step_stuck_inside_a_layer_is_ended(monkeypatch) -> None:
    # step 2's second layer never returns (within the test): the first layer moved the counter, then nothing
    with fault_server(monkeypatch, f"hang@2:{STALL_S}", watchdog_s=WATCHDOG_S) as s:
        body = {**PLAIN, "prompt": "hello world", "max_tokens": 16, "stream": True}
        with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=120) as r:
            events = _events(r.iter_lines())
        assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "engine_error", events
        assert "watchdog" in events[-2]["error"]["message"]
        assert complete(s.url, max_tokens=2).status_code == 200
        assert_idle(s.url)
