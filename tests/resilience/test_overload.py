"""Graceful overload: a small KV pool and a queue of 2 under a burst give fast 503/429 with Retry-After
and preemptions (never another 5xx, never an OOM), and everything returns to idle afterwards."""
from __future__ import annotations

import asyncio
import collections

import httpx

from tests.resilience.conftest import PLAIN, assert_idle, fault_server
from tests.server.http_helpers import metric

BLOCK_BYTES = 2 * 2 * 2 * 16 * 4 * 16   # tiny model: 2 x layers x kv_heads x head_dim x fp32 x block of 16
POOL_BLOCKS = 10                        # 160 tokens; each request below may grow to 4 blocks
BURST = 16


async def _burst(url: str, round_: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=BURST + 2)) as client:
        async def one(i: int) -> httpx.Response:
            body = {**PLAIN, "prompt": f"request {i} of round {round_}: " + "lorem ipsum " * 4,
                    "max_tokens": 40, "stream": i % 2 == 0}
            return await client.post(f"{url}/v1/completions", json=body)
        return await asyncio.gather(*(one(i) for i in range(BURST)))


def test_burst_on_small_pool_degrades_gracefully(monkeypatch) -> None:
    with fault_server(monkeypatch, "", kv_cache_memory=POOL_BLOCKS * BLOCK_BYTES, max_queue=2,
                      max_model_len=POOL_BLOCKS * 16) as s:  # a window the pool can hold (else refused at start)
        assert metric(s.url, "haltwise_kv_blocks_total") == POOL_BLOCKS
        statuses: collections.Counter[int] = collections.Counter()
        for round_ in range(6):  # a few bursts until both a rejection and a preemption were seen
            for r in asyncio.run(_burst(s.url, round_)):
                statuses[r.status_code] += 1
                assert r.status_code in (200, 429, 503), (r.status_code, r.text)
                if r.status_code != 200:
                    assert r.json()["error"]["code"] == "overloaded" and int(r.headers["retry-after"]) >= 1
                elif r.headers["content-type"].startswith("text/event-stream"):
                    assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text
                else:
                    assert r.json()["choices"][0]["termination"]["reason"] == "max_tokens"
            assert_idle(s.url)
            if statuses[503] + statuses[429] and metric(s.url, "haltwise_preemptions_total") > 0:
                break
        assert statuses[200] > 0 and statuses[503] + statuses[429] > 0, statuses
        assert metric(s.url, "haltwise_preemptions_total") > 0
        assert metric(s.url, "haltwise_requests_rejected_total", reason="overloaded") == statuses[503] + statuses[429]
        assert metric(s.url, "haltwise_engine_breaker_state") == 0  # overload is not an engine failure
        after = httpx.post(f"{s.url}/v1/completions", json={**PLAIN, "prompt": "calm", "max_tokens": 3}, timeout=120)
        assert after.status_code == 200
        assert_idle(s.url)
