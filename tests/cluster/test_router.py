"""PrefixAwareRouter's policy on stand-in replicas (Ray's router base class, no cluster)."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.serve", reason="the cluster extra is not installed")

from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata  # noqa: E402
from ray.serve.request_router import PendingRequest, ReplicaID  # noqa: E402

from haltwise.cluster.prefix import prompt_block_keys  # noqa: E402
from haltwise.cluster.router import PrefixAwareRouter  # noqa: E402

DEPLOYMENT = DeploymentID(name="EngineReplica", app_name="test")
PROMPT = list(range(1, 70))  # 4 full blocks of 16


def _replica(name: str, blocks: list[int] = ()) -> SimpleNamespace:
    stats = {"prefix_blocks": list(blocks), "reported_at": time.time()} if blocks else {}
    return SimpleNamespace(replica_id=ReplicaID(unique_id=name, deployment_id=DEPLOYMENT), routing_stats=stats)


def _choose(router: PrefixAwareRouter, replicas: list, prompt: list[int], method: str = "generate") -> list:
    async def go() -> list:
        request = PendingRequest(args=["rid", prompt, None], kwargs={},
                                 metadata=RequestMetadata(request_id="r", internal_request_id="i", call_method=method))
        return await router.choose_replicas(replicas, request)
    return [[r.replica_id.unique_id for r in rank] for rank in asyncio.run(go())]


def _router() -> PrefixAwareRouter:
    router = PrefixAwareRouter(DEPLOYMENT, DeploymentHandleSource.UNKNOWN)
    router.initialize_state(block_size=16, imbalance=4)
    return router


def test_no_full_block_or_other_methods_use_power_of_two_choices() -> None:
    a, b, c = _replica("a"), _replica("b"), _replica("c")
    for prompt, method in (([], "generate"), ([1, 2, 3], "generate"), (PROMPT, "info")):
        ranks = _choose(_router(), [a, b, c], prompt, method)
        assert len(ranks) == 1 and len(ranks[0]) == 2 and len(set(ranks[0])) == 2


def test_the_replica_reporting_the_longest_prefix_comes_first() -> None:
    keys = prompt_block_keys(PROMPT, 16)
    a, b = _replica("a", keys[:1]), _replica("b", keys[:3])
    for _ in range(10):
        assert _choose(_router(), [a, b, _replica("c")], PROMPT)[0] == ["b"]


def test_an_overloaded_holder_loses_its_affinity() -> None:
    router = _router()
    a, b = _replica("a"), _replica("b", prompt_block_keys(PROMPT, 16))
    router.replica_queue_len_cache.update(a.replica_id, 0)
    router.replica_queue_len_cache.update(b.replica_id, 9)
    ranks = _choose(router, [a, b], PROMPT)
    assert len(ranks) == 1 and sorted(ranks[0]) == ["a", "b"]


def test_a_routed_prefix_sticks_before_any_report() -> None:
    router = _router()
    a, b = _replica("a"), _replica("b")

    async def routed() -> None:
        request = PendingRequest(args=["rid", PROMPT, None], kwargs={},
                                 metadata=RequestMetadata(request_id="r", internal_request_id="i",
                                                          call_method="generate"))
        router.on_request_routed(request, a.replica_id, None)
    asyncio.run(routed())
    follow_up = PROMPT[:48] + [99, 98, 97]  # shares the first 3 blocks
    assert _choose(router, [a, b], follow_up)[0] == ["a"]
