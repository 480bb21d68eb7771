"""RemoteEngine: the AsyncEngine interface the app uses (generate, abort, stats, ready, describe, start,
shutdown, tokenizer, max_model_len), served by the EngineReplica deployment through a streaming handle.

    generate(id, prompt, params) ──handle.options(stream=True).generate──> one replica (the router's pick)
        <── ("replica", rid), RequestOutput per engine step ..., or ("error", fields)

Failures map to the errors the app already answers for:
    Ray's BackPressureError (Serve's queue full)           -> Overloaded      503 + Retry-After
    an error the replica's engine raised                    -> the same HaltwiseError (4xx / 503)
    the replica died or failed before its first update      -> retried once on another replica
    the replica died or failed after it                     -> EngineFailure   (SSE error event, or 503)
Closing the stream early (client gone) cancels the Serve call; the replica's generator aborts the
request in its finally, freeing its KV blocks there.

Optional methods the app looks for: replica_of(ids) for the x-haltwise-replica header and
cluster_state() for GET /cluster.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any, AsyncIterator

from ray.serve.exceptions import BackPressureError, RequestCancelledError

from haltwise.cluster import directory
from haltwise.cluster.wire import ERROR, REPLICA, decode_error, is_marker
from haltwise.engine.engine_stats import EngineStats
from haltwise.errors import EngineFailure, HaltwiseError, Overloaded
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import SamplingParams

log = logging.getLogger("haltwise.cluster")
STALE_AFTER_S = 5.0            # a replica whose last report is older than this shows as "unresponsive"
BACKPRESSURE_RETRY_AFTER = 1.0
_REMEMBERED = 4096             # request id -> replica entries kept for the response header


class RemoteEngine:
    def __init__(self, handle: Any, tokenizer: Any, info: dict[str, Any], deployment: str):
        self._stream = handle.options(stream=True)
        self.tokenizer = tokenizer
        self.max_model_len: int = info["max_model_len"]
        self.block_size: int = info["block_size"]
        self._describe: str = info["describe"]
        self._deployment = self.deployment = deployment
        self._accepting = False
        self._responses: dict[str, Any] = {}                      # request id -> its Serve stream
        self._aborted: set[str] = set()                           # aborted here: end quietly, never retry
        self._replica_of: OrderedDict[str, str] = OrderedDict()   # request id -> replica id

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._accepting = True

    async def shutdown(self, grace: float = 10.0) -> None:
        """Stop admitting; let streams finish for up to `grace` seconds, then cancel the rest."""
        self._accepting = False
        deadline = time.monotonic() + grace
        while self._responses and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for response in list(self._responses.values()):
            response.cancel()

    # ---- the replicas' state -----------------------------------------------------------------------------------
    def replicas(self) -> list[dict[str, Any]]:
        """One dict per running replica (its latest routing stats), with `state` judged here."""
        router = directory.find(self._deployment)
        rows = router.replica_stats() if router is not None else []
        now = time.time()
        for row in rows:
            if "reported_at" not in row:
                row["state"] = "starting"
            elif now - row["reported_at"] > STALE_AFTER_S:
                row["state"] = "unresponsive"
        return sorted(rows, key=lambda r: r["id"])

    @property
    def ready(self) -> bool:
        return self._accepting and any(r.get("state") == "running" for r in self.replicas())

    def describe(self) -> str:
        return f"{len(self.replicas())} replicas, each: {self._describe}"

    def stats(self) -> EngineStats:
        """The sum over replicas; breaker_state is the best one (the cluster is open only if every one is)."""
        rows = self.replicas()
        total = lambda k: sum(int(r.get(k, 0)) for r in rows)  # noqa: E731
        return EngineStats(total("running"), total("waiting"), total("kv_blocks_used"), total("kv_blocks_total"),
                           0.0, total("preemptions"), total("prefix_cache_hit_tokens"),
                           min((int(r.get("breaker_state", 0)) for r in rows), default=0))

    def metric_collectors(self) -> list[Any]:
        """Registered on the app's metrics registry by build_app: per-replica metrics."""
        from haltwise.cluster.metrics import ReplicaCollector

        return [ReplicaCollector(self.replicas)]

    async def cluster_state(self) -> dict[str, Any]:
        keys = ("id", "pid", "node", "state", "running", "waiting", "kv_blocks_used", "kv_blocks_total")
        return {"replicas": [{k: r.get(k) for k in keys} for r in self.replicas()]}

    def replica_of(self, request_ids: list[str]) -> str | None:
        """The replica(s) that served these requests, comma-separated, or None if unknown."""
        ids = list(dict.fromkeys(self._replica_of[i] for i in request_ids if i in self._replica_of))
        return ",".join(ids) or None

    # ---- requests ----------------------------------------------------------------------------------------------
    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                       route: dict[str, Any] | None = None) -> AsyncIterator[RequestOutput]:
        """route: with several models (ModelsReplica), {"model", "keep_alive", "wait_s"}."""
        if not self._accepting:
            raise Overloaded("The server is shutting down.", retry_after=5.0)
        call = (request_id, list(prompt_token_ids), params) + ((route,) if route is not None else ())
        for attempt in (1, 2):
            response = self._stream.generate.remote(*call)
            self._responses[request_id] = response
            yielded = finished = False
            try:
                async for item in response:
                    if is_marker(item, REPLICA):
                        self._remember(request_id, item[1])
                        continue
                    if is_marker(item, ERROR):
                        finished = True
                        raise decode_error(item[1])
                    finished = item.finished
                    yielded = True
                    yield item
                    if finished:
                        return
                if request_id in self._aborted:
                    return  # cancelled by abort(): the consumer is closing this stream
                raise EngineFailure("The replica ended the stream before the request finished.")
            except BackPressureError:
                finished = True
                raise Overloaded("All replicas are busy (Serve's request queue is full); retry later.",
                                 retry_after=BACKPRESSURE_RETRY_AFTER) from None
            except HaltwiseError:
                raise
            except Exception as exc:  # the replica died or its call failed: never a hang, never silent
                if request_id in self._aborted or isinstance(exc, RequestCancelledError):
                    self._aborted.discard(request_id)
                    return  # abort() cancelled the call: the consumer is closing this stream
                replica = self._replica_of.get(request_id, "?")
                if yielded or attempt == 2:
                    raise EngineFailure(f"Replica {replica} failed during the request: {type(exc).__name__}.") from None
                log.warning("replica %s failed before its first update (%s); retrying elsewhere",
                            replica, type(exc).__name__)
            finally:
                self._responses.pop(request_id, None)
                if not finished:
                    response.cancel()
                    self._aborted.discard(request_id)

    def abort(self, request_id: str) -> None:
        response = self._responses.get(request_id)
        if response is not None:
            self._aborted.add(request_id)
            response.cancel()

    def _remember(self, request_id: str, replica_id: str) -> None:
        self._replica_of[request_id] = replica_id
        self._replica_of.move_to_end(request_id)
        while len(self._replica_of) > _REMEMBERED:
            self._replica_of.popitem(last=False)
