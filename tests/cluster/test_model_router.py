"""ModelAwareRouter's policy on stand-in replicas (Ray's router base class, no cluster)."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Callable

import pytest

pytest.importorskip("ray.serve", reason="the cluster extra is not installed")

from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata  # noqa: E402
from ray.serve.request_router import PendingRequest, ReplicaID  # noqa: E402

from haltwise.cluster.model_router import ROUTED_GRACE_S, ModelAwareRouter  # noqa: E402

DEPLOYMENT = DeploymentID(name="EngineReplica", app_name="test-models")


def _replica(name: str, models: dict[str, str] | None = None, free: int = 0, at: float | None = None):
    stats = {} if models is None else {
        "models": {m: {"status": {"value": s}} for m, s in models.items()}, "free_bytes": free,
        "reported_at": time.time() if at is None else at}
    return SimpleNamespace(replica_id=ReplicaID(unique_id=name, deployment_id=DEPLOYMENT), routing_stats=stats,
                           max_ongoing_requests=8)


def _request(method: str, args: list) -> Callable[[], PendingRequest]:
    """A PendingRequest made inside the running loop (it holds a future)."""
    return lambda: PendingRequest(args=args, kwargs={}, metadata=RequestMetadata(
        request_id="r", internal_request_id="i", call_method=method))


def _generate(model: str) -> Callable[[], PendingRequest]:
    return _request("generate", ["rid", [1, 2, 3], None, {"model": model, "keep_alive": None, "wait_s": 9.0}])


def _choose(router: ModelAwareRouter, replicas: list, request: Callable[[], PendingRequest]) -> list[list[str]]:
    async def go() -> list:
        return await router.choose_replicas(replicas, request())
    return [[r.replica_id.unique_id for r in rank] for rank in asyncio.run(go())]


def _routed(router: ModelAwareRouter, request: Callable[[], PendingRequest], replica: SimpleNamespace) -> None:
    async def go() -> None:
        router.on_request_routed(request(), replica.replica_id, None)
    asyncio.run(go())


def _router() -> ModelAwareRouter:
    router = ModelAwareRouter(DEPLOYMENT, DeploymentHandleSource.UNKNOWN)
    router.initialize_state()
    return router


def test_the_replicas_holding_the_model_come_first() -> None:
    a = _replica("a", {"m": "loaded"}, free=1)
    b = _replica("b", {}, free=9)
    c = _replica("c", {"m": "loading", "n": "loaded"}, free=5)
    assert _choose(_router(), [a, b, c], _generate("m")) == [["a", "c"]]     # b only once both are full
    assert _choose(_router(), [a, b, c], _request("load", ["m", 60.0])) == [["a", "c"]]
    router = _router()
    router.replica_queue_len_cache.update(a.replica_id, 8)
    assert _choose(router, [a, b, c], _generate("m")) == [["a", "c"]]
    router.replica_queue_len_cache.update(c.replica_id, 9)
    assert _choose(router, [a, b, c], _generate("m")) == [["a", "c"], ["b"]]


def test_without_a_holder_the_roomiest_replica_comes_first() -> None:
    a = _replica("a", {"x": "loaded"}, free=9)
    b = _replica("b", {}, free=1)
    c = _replica("c", {}, free=5)
    assert _choose(_router(), [a, b, c], _generate("m")) == [["c"], ["b"], ["a"]]   # fewest models, most free
    assert _choose(_router(), [_replica("b"), _replica("a")], _generate("m")) == [["a"], ["b"]]  # none reported


def test_a_routed_model_sticks_until_a_later_report_says_otherwise() -> None:
    router = _router()
    a, b = _replica("a", {}), _replica("b", {})
    _routed(router, _generate("m"), b)       # b is loading it, not yet reported
    assert _choose(router, [a, b], _generate("m"))[0] == ["b"]
    assert router.holders("m") == []                                   # Serve has not told it of these replicas
    later = _replica("b", {}, at=time.time() + ROUTED_GRACE_S + 1)     # b reported since, without m (evicted)
    assert _choose(router, [a, later], _generate("m"))[0] == ["a"]
    _routed(router, _generate("m"), b)
    router.forget("m")                                                 # unloaded everywhere
    assert _choose(router, [a, b], _generate("m"))[0] == ["a"]


def test_unload_goes_to_its_replica_and_other_calls_to_any_two() -> None:
    a, b, c = _replica("a", {"m": "loaded"}), _replica("b", {"m": "loaded"}), _replica("c", {})
    assert _choose(_router(), [a, b, c], _request("unload", ["m", "b"])) == [["b"]]
    assert _choose(_router(), [a, c], _request("unload", ["m", "gone"])) == [["a", "c"]]   # it answers skipped
    ranks = _choose(_router(), [a, b, c], _request("info", []))
    assert len(ranks) == 1 and len(set(ranks[0])) == 2
