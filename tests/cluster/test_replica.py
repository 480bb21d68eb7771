"""EngineReplica's own logic, on a real tiny engine, without Ray: health, routing stats, abort in finally."""
from __future__ import annotations

import asyncio
import time

import pytest

from haltwise.cluster.prefix import prompt_block_keys
from haltwise.cluster.replica import EngineReplica
from haltwise.cluster.wire import ERROR, REPLICA, is_marker
from haltwise.config import EngineConfig
from haltwise.engine.async_engine import AsyncEngine
from tests.conftest import greedy

CONFIG = EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=512, num_threads=1)


def _replica(watchdog_s: float = 30.0) -> EngineReplica:
    """The deployment body with its engine, as Serve's async __init__ would leave it (minus Serve)."""
    replica = EngineReplica.__new__(EngineReplica)
    replica.engine = AsyncEngine.build(engine_config=CONFIG, tiny=True, watchdog_s=watchdog_s)
    replica.replica_id, replica.node = "r0", "127.0.0.1"
    replica.counters = {"requests_finished": 0, "requests_failed": 0, "requests_cancelled": 0,
                        "generation_tokens": 0}
    return replica


def test_closing_the_stream_early_aborts_and_frees_blocks() -> None:
    replica = _replica()

    async def go() -> None:
        await replica.engine.start()
        stream = replica.generate("a", list(range(1, 40)), greedy(400, ignore_eos=True))
        assert is_marker(await stream.__anext__(), REPLICA)
        await stream.__anext__()
        assert replica.engine.stats().kv_blocks_used > 0 or replica.engine.engine.requests
        await stream.aclose()  # what Serve does when the ingress cancels the call
        deadline = time.monotonic() + 10
        while replica.engine.engine.requests and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        assert not replica.engine.engine.requests and replica.engine.engine.allocator.num_used_blocks == 0
        assert replica.counters["requests_cancelled"] == 1
        await replica.engine.shutdown(1.0)
    asyncio.run(go())


def test_engine_errors_travel_as_error_items_and_stats_list_cached_blocks() -> None:
    replica = _replica()
    prompt = list(range(1, 50))  # 3 full blocks of 16

    async def go() -> None:
        await replica.engine.start()
        items = [item async for item in replica.generate("b", prompt, greedy(4))]
        assert items[-1].finished and replica.counters["requests_finished"] == 1
        refused = [item async for item in replica.generate("c", [5] * 600, greedy(4))]
        assert is_marker(refused[-1], ERROR) and refused[-1][1]["kind"] == "ContextLengthExceeded"
        await replica.engine.shutdown(1.0)
    asyncio.run(go())
    stats = replica.record_routing_stats()
    assert set(prompt_block_keys(prompt, CONFIG.block_size)) <= set(stats["prefix_blocks"])
    assert stats["state"] == "stopped" and stats["requests_failed"] == 1


def test_health_fails_while_the_breaker_is_open() -> None:
    replica = _replica()

    async def go() -> None:
        await replica.engine.start()
        replica.check_health()
        for _ in range(replica.engine.breaker.failure_threshold):
            replica.engine.breaker.record_failure()
        assert replica.state() == "breaker_open"
        with pytest.raises(RuntimeError, match="breaker_open"):
            replica.check_health()
        await replica.engine.shutdown(1.0)
    asyncio.run(go())


def test_health_fails_while_a_step_is_wedged(monkeypatch) -> None:
    monkeypatch.setenv("HALTWISE_FAULTS", "stall@1:3")
    replica = _replica(watchdog_s=0.5)

    async def go() -> None:
        await replica.engine.start()
        stream = replica.generate("d", [1, 2, 3], greedy(4))
        await stream.__anext__()
        seen = set()
        deadline = time.monotonic() + 10
        consume = asyncio.create_task(asyncio.wait_for(_drain(stream), 15))
        while time.monotonic() < deadline and "wedged" not in seen:
            seen.add(replica.state())
            await asyncio.sleep(0.05)
        assert "wedged" in seen
        await consume  # the watchdog failed the request; the stalled step itself runs on
        while replica.engine.step_running_for() > 0 and time.monotonic() < deadline + 10:
            await asyncio.sleep(0.05)  # let it end before this loop closes (it delivers into the loop)
        assert replica.state() == "running"
        await replica.engine.shutdown(1.0)
    asyncio.run(go())


async def _drain(stream) -> None:
    async for _ in stream:
        pass
