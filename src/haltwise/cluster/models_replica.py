"""ModelsReplica: one Ray Serve replica running a ModelRegistry over the same models as every other replica
(`haltwise serve --models-dir DIR --replicas N`); each replica loads, evicts and unloads on its own.

Memory: every replica has its own budget. Replicas that share a host split it: a replica's --models-memory
is the host's budget (--models-memory, else MemAvailable at its start less --memory-reserve and the prompt
cache's RAM tier) divided by the number of this deployment's replicas that can sit on its node (at most
`replicas`, at most the node's CPUs / --replica-cpus). Each registry also keeps its own live check against
MemAvailable, so replicas on one host never take more than the host has, whatever each one loads.

Its routing stats say what the ingress routes by (model_router.py) and lists (remote_models.py): each
model's row as the registry lists it (loaded or loading ones), the bytes a new load may take, its load and
unload counters, and the summed engine figures of EngineReplica's stats.
Every method that reads the registry is async: Serve runs those on the replica's event loop, where the
registry changes state, never on a worker thread beside it (as it would a plain method).
"""
from __future__ import annotations

import logging
import math
import os
import time
from contextlib import aclosing
from typing import Any, AsyncIterator

from haltwise.cluster.replica import new_counters, stream_request
from haltwise.cluster.wire import REPLICA, encode_error
from haltwise.errors import HaltwiseError
from haltwise.registry.entry import Status
from haltwise.registry.memory import mib
from haltwise.sampling_params import SamplingParams

log = logging.getLogger("haltwise.cluster")


def replicas_on_this_node(replicas: int, replica_cpus: float) -> int:
    """How many of the deployment's replicas can share this replica's node: the budget's divisor."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    cpus = next((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["NodeID"] == node), 0.0)
    fit = math.floor(cpus / replica_cpus) if replica_cpus > 0 else replicas
    return max(1, min(replicas, fit))


def replica_share(spec: Any, tiers: Any, sharing: int) -> int | None:
    """This replica's --models-memory: the host's budget / `sharing` (None: one replica, the host's own rule)."""
    if sharing <= 1:
        return spec.models_memory
    from haltwise.engine.kv_cache import available_ram

    tier = tiers.budget_bytes if tiers is not None else 0
    host = spec.models_memory if spec.models_memory is not None else (
        available_ram() - spec.memory_reserve - sharing * tier)
    return max(0, host) // sharing


class ModelsReplica:
    """The Serve deployment body; `build`: {"spec": RegistrySpec, "prompt_cache": settings | None,
    "replicas": N, "replica_cpus": C}."""

    async def __init__(self, build: dict[str, Any]):
        import ray
        from ray import serve

        from haltwise.registry.spec import registry_from

        spec, settings = build["spec"], build.get("prompt_cache")
        tiers = settings.open() if settings is not None else None   # each replica its own tiers
        self.sharing = replicas_on_this_node(build["replicas"], build["replica_cpus"])
        self.budget = replica_share(spec, tiers, self.sharing)
        self.registry = registry_from(spec, tiers, models_memory=self.budget, preload=False)  # the ingress preloads
        await self.registry.start()
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.node = ray.util.get_node_ip_address()
        self.block_size = spec.config.block_size
        self.counters = new_counters()
        log.info("replica %s (pid %d): %d models, budget %s (the host's / %d)", self.replica_id, os.getpid(),
                 len(self.registry.entries), "host's" if self.budget is None else mib(self.budget), self.sharing)

    def info(self) -> dict[str, Any]:
        """What the ingress needs once (RemoteEngine's fields; the window is each model's own)."""
        return {"max_model_len": 0, "block_size": self.block_size, "vocab_size": 0, "replica": self.replica_id,
                "describe": f"{len(self.registry.entries)} models, at most {self.registry.max_loaded} loaded"}

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       route: dict[str, Any]) -> AsyncIterator[Any]:
        """("replica", id), then the model's RequestOutputs, or ("error", ...) last. route: {"model",
        "keep_alive", "wait_s"}; the model is loaded here first if it is not (every concurrent request for it
        waits for that one load), and not unloaded before the stream ends."""
        yield REPLICA, self.replica_id
        try:
            lease = await self.registry.acquire(route["model"], route.get("keep_alive"),
                                                time.monotonic() + route["wait_s"])
        except HaltwiseError as exc:
            self.counters["requests_failed"] += 1
            yield encode_error(exc)
            return
        try:
            async with aclosing(stream_request(lease.engine, request_id, prompt_token_ids, params,
                                               self.counters)) as items:
                async for item in items:
                    yield item
        finally:
            lease.release()

    async def load(self, model: str, wait_s: float) -> dict[str, Any]:
        """Load `model` here now (POST /models/load); its listing row, or {"error": fields}."""
        try:
            entry = await self.registry.load(model, time.monotonic() + wait_s)
        except HaltwiseError as exc:
            return {"error": encode_error(exc)[1]}
        return self._row(entry.name)

    async def unload(self, model: str, replica: str) -> dict[str, Any]:
        """Unload `model` here (the router sends this to `replica`; another one answers {"skipped": True})."""
        if replica != self.replica_id:
            return {"skipped": True}
        entry = self.registry.resolve(model)
        if entry.status is Status.LOADED and entry.in_flight:
            return {"busy": entry.in_flight}
        await self.registry.unload(model, "request")
        return self._row(model)

    async def abort(self, request_id: str) -> None:
        for entry in self.registry.loaded():
            entry.engine.abort(request_id)

    def state(self) -> str:
        """running | wedged (a model's step past its watchdog: Serve replaces the replica)."""
        wedged = any(e.engine.step_running_for() > e.engine.watchdog_s for e in self.registry.loaded())
        return "wedged" if wedged else "running"

    async def check_health(self) -> None:
        if self.state() != "running":
            raise RuntimeError(f"replica {self.replica_id} is {self.state()}")

    def _row(self, name: str) -> dict[str, Any]:
        return next(r for r in self.registry.listing() if r["id"] == name)

    async def record_routing_stats(self) -> dict[str, Any]:
        s = self.registry.stats()
        engine = {"running": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 0} if s is None else {
            "running": s.num_running, "waiting": s.num_waiting, "kv_blocks_used": s.kv_blocks_used,
            "kv_blocks_total": s.kv_blocks_total, "breaker_state": s.breaker_state,
            "preemptions": s.preemptions_total, "prefix_cache_hit_tokens": s.prefix_cache_hit_tokens}
        models = {r["id"]: r for r in self.registry.listing() if r["status"]["value"] != "unloaded"}
        return {"id": self.replica_id, "pid": os.getpid(), "node": self.node, "state": self.state(),
                **engine, **self.counters, "models": models, "free_bytes": self.registry.free_bytes(),
                "model_events": model_events(self.registry.metrics.own), "reported_at": time.time()}


def model_events(own: Any) -> list[list[Any]]:
    """[name, labels, value] of the registry's load and unload counters (registry/metrics.py), for /metrics."""
    return [[s.name, dict(s.labels), s.value] for family in own.collect() for s in family.samples
            if s.name in ("haltwise_model_loads_total", "haltwise_model_unloads_total")]
