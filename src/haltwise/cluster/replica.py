"""EngineReplica: one Ray Serve replica owning one AsyncEngine (its own torch thread, as in-process).

Its routing stats (record_routing_stats, pulled by Serve every `stats_period_s`) carry what the ingress
shows and routes by: load, KV blocks, health, counters and the keys of every block in its prefix cache.
Stopping: Serve's graceful shutdown lets in-flight streams finish (graceful_shutdown_timeout_s), then
ends the process, engine thread included; there is nothing else to release.
check_health fails while the engine is not ready (breaker open, a dead engine thread) or a step has
run past the watchdog (a wedged step Ray's default check cannot see); Serve then replaces the replica.
"""
from __future__ import annotations

import logging
from contextlib import aclosing
import os
import time
from typing import Any, AsyncIterator

from haltwise.cluster.prefix import block_key
from haltwise.cluster.wire import REPLICA, encode_error
from haltwise.errors import HaltwiseError
from haltwise.sampling_params import SamplingParams

log = logging.getLogger("haltwise.cluster")


class EngineReplica:
    """The Serve deployment body; `build` holds AsyncEngine.build keyword arguments."""

    async def __init__(self, build: dict[str, Any]):
        import ray
        from ray import serve

        from haltwise.engine.async_engine import AsyncEngine

        started = time.monotonic()
        build = dict(build)
        settings = build.pop("prompt_cache", None)   # each replica opens its own tiers (prompt_cache/settings.py)
        self.engine = AsyncEngine.build(**build, prompt_tiers=settings.open() if settings is not None else None)
        await self.engine.start()
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.node = ray.util.get_node_ip_address()
        self.load_s = time.monotonic() - started
        self.counters = new_counters()
        log.info("replica %s (pid %d) ready in %.1fs: %s", self.replica_id, os.getpid(), self.load_s,
                 self.engine.describe())

    def info(self) -> dict[str, Any]:
        """What the ingress needs once: window, block size, a description."""
        e = self.engine
        return {"max_model_len": e.max_model_len, "block_size": e.engine_config.block_size,
                "vocab_size": e.model_config.vocab_size, "describe": e.describe(), "replica": self.replica_id}

    async def generate(self, request_id: str, prompt_token_ids: list[int],
                       params: SamplingParams) -> AsyncIterator[Any]:
        """("replica", id), then one RequestOutput per engine step, or ("error", ...) last."""
        yield REPLICA, self.replica_id
        async with aclosing(stream_request(self.engine, request_id, prompt_token_ids, params, self.counters)) as s:
            async for item in s:   # closed with this generator (aclosing): the request is aborted there
                yield item

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def state(self) -> str:
        """running | breaker_open | wedged | stopped."""
        if self.engine.step_running_for() > self.engine.watchdog_s:
            return "wedged"
        if not self.engine.ready:
            return "breaker_open" if self.engine.breaker.state == 2 else "stopped"
        return "running"

    def check_health(self) -> None:
        state = self.state()
        if state != "running":
            raise RuntimeError(f"replica {self.replica_id} is {state}")

    def record_routing_stats(self) -> dict[str, Any]:
        s = self.engine.stats()
        allocator = self.engine.engine.allocator
        return {"id": self.replica_id, "pid": os.getpid(), "node": self.node, "state": self.state(),
                "running": s.num_running, "waiting": s.num_waiting, "kv_blocks_used": s.kv_blocks_used,
                "kv_blocks_total": s.kv_blocks_total, "breaker_state": s.breaker_state,
                "preemptions": s.preemptions_total, "prefix_cache_hit_tokens": s.prefix_cache_hit_tokens,
                **self.counters, "reported_at": time.time(),
                "prefix_blocks": [block_key(h) for h in allocator.cached_block_hashes()]}


def new_counters() -> dict[str, int]:
    return {"requests_finished": 0, "requests_failed": 0, "requests_cancelled": 0, "generation_tokens": 0}


async def stream_request(engine: Any, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                         counters: dict[str, int]) -> AsyncIterator[Any]:
    """One RequestOutput per engine step, or ("error", ...) last; counted in `counters`.

    However the stream ends early (the ingress cancelled it, the client went away), the finally closes the
    engine stream, which aborts the request and frees its KV blocks.
    """
    stream = engine.generate(request_id, prompt_token_ids, params)
    finished = False
    try:
        async for out in stream:
            finished = out.finished
            if finished:
                counters["requests_finished"] += 1
                counters["generation_tokens"] += sum(len(o.token_ids) for o in out.outputs)
            yield out
    except HaltwiseError as exc:
        finished = True
        counters["requests_failed"] += 1
        yield encode_error(exc)
    finally:
        await stream.aclose()
        if not finished:
            counters["requests_cancelled"] += 1
            engine.abort(request_id)
