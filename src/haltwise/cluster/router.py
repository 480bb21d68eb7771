"""PrefixAwareRouter: send a prompt to the replica that holds its leading KV blocks, else the less loaded
of two random replicas (power of two choices). Built on Ray Serve's public request-router API.

Which replica holds a block is known two ways:
  reported  every replica's routing stats list the keys of its prefix-cache blocks (every stats period)
  routed    blocks this router sent to a replica since that replica's last report (its prefill will
            cache them; this covers requests that follow each other within one stats period)
A replica's score is the number of leading prompt blocks it holds. The best-scoring replica is ranked
first unless its queue is `imbalance` requests longer than the shortest known queue; the power-of-two
pair comes next, and Serve takes the shorter queue within a rank (a full replica is skipped).

The router lives in the ingress process (one per deployment handle); it registers in `directory` so
that RemoteEngine can read the replicas' routing stats for /cluster, /ready and /metrics.
"""
from __future__ import annotations

import random
import time
from collections import OrderedDict
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from haltwise.cluster import directory
from haltwise.cluster.prefix import prompt_block_keys

DEFAULT_IMBALANCE = 4          # queued requests by which affinity may exceed the shortest queue
MAX_ROUTED_KEYS = 1 << 16      # bound on the routed-blocks memory (oldest forgotten first)
ROUTED_GRACE_S = 2.0           # a report this soon after routing may predate the prefill that caches it



def prompt_of(pending_request: PendingRequest | None) -> list[int] | None:
    """The prompt token ids of a `generate(request_id, prompt_token_ids, params)` call, else None."""
    if pending_request is None or pending_request.metadata.call_method != "generate":
        return None
    args = pending_request.args
    prompt = args[1] if len(args) > 1 else pending_request.kwargs.get("prompt_token_ids")
    return prompt if isinstance(prompt, list) else None


class PrefixAwareRouter(RequestRouter):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.block_size = 16
        self.imbalance = DEFAULT_IMBALANCE
        self._routed: OrderedDict[int, tuple[str, float]] = OrderedDict()  # key -> (replica id, routed at)
        directory.register(self._deployment_id.name, self)

    def initialize_state(self, block_size: int = 16, imbalance: int = DEFAULT_IMBALANCE, **_: Any) -> None:
        """Serve passes RequestRouterConfig.request_router_kwargs here."""
        self.block_size = block_size
        self.imbalance = imbalance

    def replica_stats(self) -> list[dict[str, Any]]:
        """The latest routing stats of every replica Serve reports as running (may be {} at first)."""
        return [dict(r.routing_stats or {}, id=r.replica_id.unique_id) for r in list(self.curr_replicas.values())]

    def _score(self, replica: RunningReplica, keys: list[int]) -> int:
        stats = replica.routing_stats or {}
        reported = set(stats.get("prefix_blocks", ()))
        reported_at = stats.get("reported_at", 0.0)
        rid = replica.replica_id.unique_id
        n = 0
        for key in keys:
            routed = self._routed.get(key)
            routed_here = routed is not None and routed[0] == rid and routed[1] >= reported_at - ROUTED_GRACE_S
            if key in reported or routed_here:
                n += 1
            else:
                break
        return n

    def _queue_len(self, replica: RunningReplica) -> int | None:
        return self.replica_queue_len_cache.get(replica.replica_id)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        pair = random.sample(candidate_replicas, min(2, len(candidate_replicas)))
        prompt = prompt_of(pending_request)
        if not prompt:
            return [pair]
        keys = prompt_block_keys(prompt, self.block_size)
        if not keys:
            return [pair]
        best = max(candidate_replicas, key=lambda r: self._score(r, keys))
        if self._score(best, keys) == 0:
            return [pair]
        known = [q for q in (self._queue_len(r) for r in candidate_replicas) if q is not None]
        best_queue = self._queue_len(best)
        if known and best_queue is not None and best_queue - min(known) > self.imbalance:
            return [pair]
        return [[best], [r for r in pair if r is not best] or pair]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        prompt = prompt_of(pending_request)
        if not prompt:
            return
        now = time.time()
        for key in prompt_block_keys(prompt, self.block_size):
            self._routed[key] = (replica_id.unique_id, now)
            self._routed.move_to_end(key)
        while len(self._routed) > MAX_ROUTED_KEYS:
            self._routed.popitem(last=False)
