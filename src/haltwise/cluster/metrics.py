"""Per-replica metrics on the app's registry: each replica's own numbers with a `replica` label.

The app's unlabelled haltwise_* metrics stay as they are (counted at the ingress; engine gauges summed
over replicas). These come from every replica's routing stats at scrape time.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_GAUGES = (("running", "haltwise_replica_requests_running", "Requests being generated on the replica."),
           ("waiting", "haltwise_replica_requests_waiting", "Requests queued on the replica."),
           ("kv_blocks_used", "haltwise_replica_kv_blocks_used", "KV cache blocks in use on the replica."),
           ("kv_blocks_total", "haltwise_replica_kv_blocks_total", "KV cache blocks in the replica's pool."),
           ("breaker_state", "haltwise_replica_breaker_state", "Replica breaker: 0 closed, 1 half-open, 2 open."))
_COUNTERS = (("requests_finished", "haltwise_replica_requests_finished", "Requests the replica finished."),
             ("requests_failed", "haltwise_replica_requests_failed", "Requests the replica refused or failed."),
             ("requests_cancelled", "haltwise_replica_requests_cancelled", "Requests aborted on the replica."),
             ("generation_tokens", "haltwise_replica_generation_tokens", "Tokens the replica generated."),
             ("prefix_cache_hit_tokens", "haltwise_replica_prefix_cache_hit_tokens",
              "Prompt tokens the replica served from its prefix cache."),
             ("preemptions", "haltwise_replica_preemptions", "Sequences the replica preempted."))


class ReplicaCollector(Collector):
    """Reads `replicas()` (RemoteEngine.replicas) once per scrape."""

    def __init__(self, replicas: Callable[[], list[dict[str, Any]]]):
        self._replicas = replicas

    def collect(self) -> Iterable[Any]:
        rows = self._replicas()
        up = GaugeMetricFamily("haltwise_replica_up", "1 while the replica reports state running.",
                               labels=["replica"])
        for row in rows:
            up.add_metric([row["id"]], 1.0 if row.get("state") == "running" else 0.0)
        yield up
        for key, name, doc in _GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["replica"])
            for row in rows:
                family.add_metric([row["id"]], float(row.get(key, 0) or 0))
            yield family
        for key, name, doc in _COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["replica"])
            for row in rows:
                family.add_metric([row["id"]], float(row.get(key, 0) or 0))
            yield family


class ClusterModelMetrics(Collector):
    """Several models on replicas (remote_models.py): the per-replica metrics above, plus which replica has
    which model loaded and each replica's model loads and unloads (its registry's counters, by reason)."""

    def __init__(self, replicas: Callable[[], list[dict[str, Any]]]):
        self._replicas = replicas
        self._per_replica = ReplicaCollector(replicas)

    def collect(self) -> Iterable[Any]:
        yield from self._per_replica.collect()
        rows = self._replicas()
        loaded = {(r["id"], n) for r in rows for n, m in (r.get("models") or {}).items()
                  if m["status"]["value"] == "loaded"}
        yield GaugeMetricFamily("haltwise_models_loaded", "Models loaded on at least one replica.",
                                value=len({n for _, n in loaded}))
        per = GaugeMetricFamily("haltwise_replica_model_loaded", "1 while the replica has the model loaded.",
                                labels=["replica", "model"])
        for rid, name in sorted(loaded):
            per.add_metric([rid, name], 1.0)
        yield per
        loads = CounterMetricFamily("haltwise_model_loads", "Model loads, by replica.", labels=["model", "replica"])
        unloads = CounterMetricFamily("haltwise_model_unloads", "Model unloads by reason (lru, idle, request, "
                                      "memory), by replica.", labels=["model", "reason", "replica"])
        for row in rows:
            for name, labels, value in row.get("model_events") or ():
                if name == "haltwise_model_loads_total":
                    loads.add_metric([labels["model"], row["id"]], value)
                else:
                    unloads.add_metric([labels["model"], labels["reason"], row["id"]], value)
        yield loads
        yield unloads
