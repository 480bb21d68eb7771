"""The load client: SSE parsing, and real streaming runs against `haltwise serve --tiny`."""
import asyncio

import pytest

from haltwise_bench.load_client import RequestResult, run_load, sse_events
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd


async def _collect(lines):
    async def gen():
        for line in lines:
            yield line
    return [e async for e in sse_events(gen())]


def test_sse_parsing_joins_data_lines_and_skips_comments():
    lines = [": keep-alive", "", 'data: {"a":', 'data: 1}', "", "event: x", 'data: {"b": 2}', "", "data: [DONE]", ""]
    assert asyncio.run(_collect(lines)) == [{"a": 1}, {"b": 2}, None]
    assert asyncio.run(_collect(['data: {"c": 3}'])) == [{"c": 3}]  # an unterminated last event still counts


@pytest.fixture(scope="module")
def tiny_server():
    port = free_port()
    with ServerProcess(haltwise_server_cmd(port, tiny=True), port, "haltwise-tiny", "/ready") as server:
        yield server


def test_concurrent_streams_count_tokens_and_ttft(tiny_server):
    load = asyncio.run(run_load(tiny_server.base_url, ["Hello there", "The quick brown fox"], concurrency=3,
                                max_tokens=5, extra_body={"ignore_eos": True}, rounds=2))
    assert len(load.results) == 6 and len(load.ok) == 6
    for r in load.results:
        assert r.completion_tokens == 5 and r.finish_reason == "length"
        assert 0 < r.ttft_s <= r.latency_s <= load.wall_s
    s = load.summary()
    assert s["completion_tokens"] == 30 and s["errors"] == []
    assert s["ttft_p50_s"] <= s["ttft_p95_s"]


@pytest.mark.parametrize("fault", ["cut_streams", None])
def test_a_stream_that_does_not_run_its_length_is_failed(fault):
    """Named fault: a server that ends streams early with finish_reason "stop" (as llama-cpp-python's
    interrupt_requests does). The old client counted those as ok throughput; now they fail, and the
    faithful fake (runs to length) still passes."""
    from tests.haltwise_bench.fake_openai_server import fake_app
    from tests.server.http_helpers import ServerThread

    with ServerThread(fake_app(fault)) as server:
        load = asyncio.run(run_load(server.url, ["a", "b"], concurrency=2, max_tokens=6, model="fake"))
    if fault is None:
        assert len(load.ok) == 2 and load.failed == 0 and load.completion_tokens == 12
    else:
        assert load.ok == [] and load.failed == 2 and load.tokens_per_s == 0.0
        assert all("finish_reason stop, 2 of 6 tokens" in r.error for r in load.results)
        assert load.summary()["failed"] == 2


def test_errors_are_results_not_exceptions(tiny_server):
    load = asyncio.run(run_load(tiny_server.base_url, ["x"], concurrency=1, max_tokens=0))  # max_tokens < 1: 400
    (r,) = load.results
    assert isinstance(r, RequestResult) and not r.ok and r.status == 400 and "HTTP 400" in r.error
    dead = asyncio.run(run_load(f"http://127.0.0.1:{free_port()}", ["x"], concurrency=1, max_tokens=2))
    assert not dead.results[0].ok and dead.results[0].status == 0 and dead.tokens_per_s == 0.0
