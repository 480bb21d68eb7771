"""ModelAwareRouter: send a request for model M to a replica that has M loaded (or is loading it), the least
loaded of those; else to the replica with the fewest models loaded and the most free budget, which loads M
on demand. Built on Ray Serve's public request-router API, beside router.py (the one-model router).

Which replica has M is known two ways, as router.py knows prefixes:
  reported  every replica's routing stats list its loaded and loading models (every stats period)
  routed    requests for M this router sent to a replica since that replica's last report (the replica is
            loading M: a burst of first requests for M goes to one replica and waits for its one load)

    ranks  [holders of M]                                 Serve takes the shortest queue among them
           [holders of M] [best other] [next other] ...   when every holder's queue is known to be full, or
           [best other] [next other] ...                   none holds M (Serve goes down the ranks)
Calls: generate(request_id, prompt, params, route) and load(model, wait_s) are routed by their model;
unload(model, replica) goes to that replica (any other, if it is gone: it answers "skipped"); the rest
(info) to any two.
"""
from __future__ import annotations

import random
import time
from typing import Any, Callable

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from haltwise.cluster import directory

ROUTED_GRACE_S = 2.0     # a report this soon after routing may predate the load the request started
HOLDING = ("loaded", "loading")


def model_of(pending_request: PendingRequest | None) -> str | None:
    """The model a generate or load call is for, else None."""
    if pending_request is None:
        return None
    method, args = pending_request.metadata.call_method, pending_request.args
    if method == "generate":
        route = args[3] if len(args) > 3 else pending_request.kwargs.get("route")
        return route.get("model") if isinstance(route, dict) else None
    if method == "load":
        return args[0] if args else pending_request.kwargs.get("model")
    return None


def target_of(pending_request: PendingRequest | None) -> str | None:
    """The replica an unload(model, replica) call is for, else None."""
    if pending_request is None or pending_request.metadata.call_method != "unload":
        return None
    args = pending_request.args
    return args[1] if len(args) > 1 else pending_request.kwargs.get("replica")


def holds(stats: dict[str, Any], routed_at: float | None, model: str) -> bool:
    """Whether a replica with these routing stats has `model` loaded or loading, or was just sent it."""
    row = (stats.get("models") or {}).get(model)
    if row is not None and row["status"]["value"] in HOLDING:
        return True
    return routed_at is not None and routed_at >= stats.get("reported_at", 0.0) - ROUTED_GRACE_S


def rank_for_model(model: str, replicas: list[Any], routed: dict[str, float],
                   full: Callable[[Any], bool] = lambda r: False) -> list[list[Any]]:
    """Ranks of replicas for a request for `model` (see the module docstring). replicas: RunningReplicas;
    routed: replica id -> when a request for `model` was last routed there; full(replica): its queue is known
    to be full. Other replicas are ranked only when no holder can take the request: a holder slow to answer
    Serve's queue probe (a busy host) is waited for, never passed over for a replica that would load the
    model again."""
    holders, others = [], []
    for r in replicas:
        rid = r.replica_id.unique_id
        (holders if holds(r.routing_stats or {}, routed.get(rid), model) else others).append(r)
    if holders and not all(full(r) for r in holders):
        return [holders]

    def roomiest(r: Any) -> tuple[int, int, str]:
        stats = r.routing_stats or {}
        return len(stats.get("models") or {}), -int(stats.get("free_bytes", 0)), r.replica_id.unique_id
    return ([holders] if holders else []) + [[r] for r in sorted(others, key=roomiest)]


class ModelAwareRouter(RequestRouter):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._routed: dict[str, dict[str, float]] = {}     # model -> replica id -> last routed at
        directory.register(self._deployment_id.name, self)

    def initialize_state(self, **_: Any) -> None:
        """Serve passes RequestRouterConfig.request_router_kwargs here (none are used)."""

    def replica_stats(self) -> list[dict[str, Any]]:
        """The latest routing stats of every replica Serve reports as running (may be {} at first)."""
        return [dict(r.routing_stats or {}, id=r.replica_id.unique_id) for r in list(self.curr_replicas.values())]

    def holders(self, model: str) -> list[str]:
        """The ids of the replicas that have `model` loaded or loading, or were just sent it."""
        routed = self._routed.get(model, {})
        return sorted(r.replica_id.unique_id for r in list(self.curr_replicas.values())
                      if holds(r.routing_stats or {}, routed.get(r.replica_id.unique_id), model))

    def forget(self, model: str) -> None:
        """Drop what this router routed for `model` (it was unloaded everywhere): the reports decide again."""
        self._routed.pop(model, None)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        target = target_of(pending_request)
        if target is not None:
            chosen = [r for r in candidate_replicas if r.replica_id.unique_id == target]
            return [chosen or candidate_replicas]
        model = model_of(pending_request)
        if model is None:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        return rank_for_model(model, candidate_replicas, self._routed.get(model, {}), self._full)

    def _full(self, replica: RunningReplica) -> bool:
        queue = self.replica_queue_len_cache.get(replica.replica_id)
        return queue is not None and queue >= replica.max_ongoing_requests

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        model = model_of(pending_request)
        if model is not None:
            self._routed.setdefault(model, {})[replica_id.unique_id] = time.time()
