"""Circuit breaker on the real server: K failed steps open it (fast 503 + Retry-After, /ready 503),
the cool-down half-opens it, and one successful step closes it again."""
from __future__ import annotations

import httpx

from tests.resilience.conftest import assert_idle, complete, fault_server
from tests.server.http_helpers import metric, wait_until

K = 3


def _state(url: str) -> float:
    return metric(url, "haltwise_engine_breaker_state")


def test_breaker_opens_after_k_failures_and_closes_after_recovery(monkeypatch) -> None:
    with fault_server(monkeypatch, f"raise@1-{K}", breaker_threshold=K, breaker_cooldown_s=1.0) as s:
        for i in range(K):
            assert _state(s.url) == 0 and httpx.get(f"{s.url}/ready").status_code == 200
            r = complete(s.url)
            assert r.status_code == 503 and r.json()["error"]["code"] == "engine_error", r.text
        assert _state(s.url) == 2
        ready = httpx.get(f"{s.url}/ready")
        assert ready.status_code == 503 and ready.json()["reason"] == "breaker open"
        # while open: refused at once, before the engine sees it, with a Retry-After
        refused = complete(s.url)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "overloaded"
        assert int(refused.headers["retry-after"]) >= 1
        assert httpx.get(f"{s.url}/health").status_code == 200
        assert_idle(s.url)

        assert wait_until(lambda: _state(s.url) == 1, 60)  # cool-down passed: half-open
        assert httpx.get(f"{s.url}/ready").status_code == 200
        ok = complete(s.url, max_tokens=3)
        assert ok.status_code == 200 and ok.json()["choices"][0]["termination"]["reason"] == "max_tokens"
        assert _state(s.url) == 0 and httpx.get(f"{s.url}/ready").status_code == 200
        assert_idle(s.url)


def test_rejected_request_in_half_open_does_not_reopen(monkeypatch) -> None:
    """A request the engine refuses (no step runs) is not a step failure: half-open stays half-open."""
    with fault_server(monkeypatch, f"raise@1-{K}", breaker_threshold=K, breaker_cooldown_s=0.5) as s:
        for _ in range(K):
            assert complete(s.url).status_code == 503
        assert wait_until(lambda: _state(s.url) == 1, 60)
        bad = complete(s.url, prompt=[10**7])  # out of vocabulary: refused by the engine's add_request
        assert bad.status_code == 400, bad.text
        too_long = complete(s.url, prompt="word " * 400)
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
        assert _state(s.url) == 1
        assert complete(s.url).status_code == 200 and _state(s.url) == 0
        assert_idle(s.url)


def test_failures_below_threshold_keep_serving(monkeypatch) -> None:
    """K-1 failures then a success: the breaker never opens and the count starts again."""
    with fault_server(monkeypatch, f"raise@1-{K - 1}", breaker_threshold=K, breaker_cooldown_s=60.0) as s:
        for _ in range(K - 1):
            assert complete(s.url).status_code == 503
        assert complete(s.url, max_tokens=2).status_code == 200
        assert _state(s.url) == 0 and httpx.get(f"{s.url}/ready").status_code == 200
        assert_idle(s.url)
