"""Two tiny-model replicas on a loopback Ray cluster behind the one app: the single server's promises hold.

Test order matters only for the last test, which SIGKILLs a replica.
"""
from __future__ import annotations

import asyncio
import collections
import os
import signal
import time

import httpx
import pytest

from tests.server.http_helpers import metric, sse_events, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
PLAIN = {"model": "tiny", "temperature": 0.0, "repetition_detection": {"enabled": False}}
LONG = {**PLAIN, "prompt": "a long one", "max_tokens": 1000, "ignore_eos": True, "stream": True}
HEADER = "x-haltwise-replica"


def replicas(url: str) -> dict[str, dict]:
    return {r["id"]: r for r in httpx.get(f"{url}/cluster", timeout=30).json()["replicas"]}


def post(url: str, body: dict, path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=120)


def test_cluster_endpoint_and_readiness(cluster) -> None:
    assert httpx.get(f"{cluster.url}/ready").status_code == 200      # one running replica is enough to serve
    deadline = time.monotonic() + 300          # the second may still be starting on a loaded host
    rows = replicas(cluster.url)
    while any(r["state"] == "starting" for r in rows.values()) and time.monotonic() < deadline:
        time.sleep(1.0)
        rows = replicas(cluster.url)
    assert len(rows) == 2
    for row in rows.values():
        assert set(row) == {"id", "pid", "node", "state", "running", "waiting", "kv_blocks_used", "kv_blocks_total"}
        assert row["state"] == "running" and row["node"] == "127.0.0.1" and row["pid"] != os.getpid()
        assert row["kv_blocks_total"] > 0


async def _spread(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:
        return await asyncio.gather(*(client.post(f"{url}/v1/completions", json={
            **PLAIN, "prompt": f"spread {i}", "max_tokens": 24, "ignore_eos": True}) for i in range(n)))


def test_requests_land_on_both_replicas(cluster) -> None:
    ids = set(replicas(cluster.url))
    before = {i: metric(cluster.url, "haltwise_replica_requests_finished_total", replica=i) for i in ids}
    served: collections.Counter[str] = collections.Counter()
    for _ in range(8):  # bursts (within Serve's queue of 4) until both replicas have served
        for r in asyncio.run(_spread(cluster.url, 4)):
            assert r.status_code == 200, r.text
            served[r.headers[HEADER]] += 1
        if len(served) == 2:
            break
    assert set(served) == ids, served

    def counted() -> bool:
        return all(metric(cluster.url, "haltwise_replica_requests_finished_total", replica=i) - before[i]
                   == served[i] for i in ids)
    assert wait_until(counted, 15), (served, before)


def test_outputs_equal_the_in_process_server(cluster, single) -> None:
    for prompt, n_tokens in (("The quick brown fox", 12), ("1, 2, 3,", 30), ("x" * 70, 5)):
        body = {**PLAIN, "prompt": prompt, "max_tokens": n_tokens}
        here, there = post(single.url, body).json(), post(cluster.url, body).json()
        assert here["choices"] == there["choices"] and here["usage"] == there["usage"]
        with httpx.stream("POST", f"{single.url}/v1/completions", json={**body, "stream": True}) as a:
            local = sse_events(a)
        with httpx.stream("POST", f"{cluster.url}/v1/completions", json={**body, "stream": True}) as b:
            assert HEADER in b.headers
            remote = sse_events(b)
        # one chunk per engine step on both sides: the same number of events, the same text
        assert len(local) == len(remote) == n_tokens + 1
        assert [e["choices"] for e in local[:-1]] == [e["choices"] for e in remote[:-1]]
    chat = {**PLAIN, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    assert (post(single.url, chat, "/v1/chat/completions").json()["choices"]
            == post(cluster.url, chat, "/v1/chat/completions").json()["choices"])


def test_validation_errors_are_4xx(cluster) -> None:
    bad = post(cluster.url, {**PLAIN, "prompt": "x", "max_tokens": -1})      # at the ingress
    assert bad.status_code == 400 and HEADER not in bad.headers
    too_long = post(cluster.url, {**PLAIN, "prompt": "word " * 600, "max_tokens": 600})  # at the replica
    assert too_long.status_code == 400, too_long.text
    assert too_long.json()["error"]["code"] == "context_length_exceeded"
    assert post(cluster.url, {**PLAIN, "prompt": [10**7], "max_tokens": 2}).status_code == 400


def test_client_disconnect_frees_blocks_on_the_owning_replica(cluster) -> None:
    with httpx.stream("POST", f"{cluster.url}/v1/completions", json=LONG, timeout=120) as r:
        owner = r.headers[HEADER]
        lines = r.iter_lines()
        next(lines)
        before = metric(cluster.url, "haltwise_replica_requests_cancelled_total", replica=owner)
        assert wait_until(lambda: replicas(cluster.url)[owner]["kv_blocks_used"] > 0, 15)
    # the response is closed mid-stream: the replica aborts the request and frees its blocks
    assert wait_until(lambda: replicas(cluster.url)[owner]["kv_blocks_used"] == 0
                      and replicas(cluster.url)[owner]["running"] == 0, 30)
    assert wait_until(lambda: metric(cluster.url, "haltwise_replica_requests_cancelled_total", replica=owner)
                      == before + 1, 15)


def test_prefix_routing_sends_a_shared_system_prompt_to_one_replica(cluster) -> None:
    for topic in ("sailing", "baking", "chess"):  # by chance alone, three pairs all match 1 time in 8
        system = f"You are an expert on {topic}. " + " ".join(f"Rule {i}: be precise about {topic}." for i in range(12))
        owners = []
        for question in ("What is the first thing to learn?", "Name a common mistake."):
            body = {**PLAIN, "max_tokens": 4, "messages": [{"role": "system", "content": system},
                                                           {"role": "user", "content": question}]}
            r = post(cluster.url, body, "/v1/chat/completions")
            assert r.status_code == 200, r.text
            owners.append(r.headers[HEADER])
        assert owners[0] == owners[1], (topic, owners)
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def _overload(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=n + 2)) as client:
        return await asyncio.gather(*(client.post(f"{url}/v1/completions", json={
            **PLAIN, "prompt": f"burst {i}", "max_tokens": 60, "ignore_eos": True, "stream": i % 2 == 0})
            for i in range(n)))


def test_overload_gives_200_or_503_with_retry_after(cluster) -> None:
    statuses: collections.Counter[int] = collections.Counter()
    for r in asyncio.run(_overload(cluster.url, 48)):
        statuses[r.status_code] += 1
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "overloaded" and int(r.headers["retry-after"]) >= 1
        elif r.headers["content-type"].startswith("text/event-stream"):
            assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text
    assert statuses[200] > 0 and statuses[503] > 0, statuses
    assert wait_until(lambda: all(row["running"] == row["waiting"] == row["kv_blocks_used"] == 0
                                  for row in replicas(cluster.url).values()), 30)


async def _streams_during_a_kill(url: str, n: int) -> list[tuple[int, list]]:
    """n long streams; the replica of the first one is SIGKILLed once it has streamed a few tokens."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(90)) as client:
        first_owner: asyncio.Future = asyncio.get_running_loop().create_future()

        async def one(i: int) -> tuple[int, list]:
            async with client.stream("POST", f"{url}/v1/completions", json={**LONG, "prompt": f"kill {i}"}) as r:
                if r.status_code != 200:
                    return r.status_code, [await r.aread()]
                events = []
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        if i == 0 and len(events) == 3 and not first_owner.done():
                            first_owner.set_result(r.headers[HEADER])
                return 200, events

        async def kill() -> None:
            owner = await first_owner
            pid = (await client.get(f"{url}/cluster")).json()["replicas"]
            os.kill(next(row["pid"] for row in pid if row["id"] == owner), signal.SIGKILL)

        results = await asyncio.gather(*(one(i) for i in range(n)), kill())
        return results[:n]


def test_a_killed_replica_loses_no_request_silently_and_is_replaced(cluster) -> None:
    before = set(replicas(cluster.url))
    results = asyncio.run(_streams_during_a_kill(cluster.url, 4))
    errored = 0
    for status, events in results:
        assert status in (200, 503), (status, events)
        if status == 200:
            assert events[-1] == "[DONE]"
            last = events[-2]
            if '"error"' in last:
                errored += 1
                assert '"code": "engine_error"' in last
            else:
                assert '"finish_reason": "length"' in last
    assert errored >= 1  # the stream whose replica died ended with an error event, not a hang
    started = time.monotonic()

    def replaced() -> bool:
        rows = replicas(cluster.url)
        return len(rows) == 2 and set(rows) != before and all(r["state"] == "running" for r in rows.values())
    assert wait_until(replaced, 60), replicas(cluster.url)
    new = (set(replicas(cluster.url)) - before).pop()
    seen: set[str] = set()
    while new not in seen and time.monotonic() - started < 90:
        for r in asyncio.run(_spread(cluster.url, 4)):
            assert r.status_code in (200, 503), r.text
            if r.status_code == 200:
                seen.add(r.headers[HEADER])
    assert new in seen, (new, seen)
