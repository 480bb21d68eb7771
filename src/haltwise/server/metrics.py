"""Prometheus metrics on a per-app registry; engine gauges are read from engine.stats() at scrape time."""
from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _EngineStatsCollector(Collector):
    """Reads `stats()` once per scrape; an engine that is not started yet reports zeros."""

    def __init__(self, stats: Callable[[], Any]):
        self._stats = stats

    def collect(self) -> Iterable[Any]:
        try:
            s = self._stats()
        except Exception:  # a scrape must never fail because the engine is down
            s = None

        def value(name: str) -> float:
            return float(getattr(s, name, 0) or 0) if s is not None else 0.0

        used, total = value("kv_blocks_used"), value("kv_blocks_total")
        committed = total if getattr(s, "kv_blocks_committed", None) is None else value("kv_blocks_committed")
        gauges = [
            ("haltwise_requests_running", "Requests being generated.", value("num_running")),
            ("haltwise_requests_waiting", "Requests queued for admission.", value("num_waiting")),
            ("haltwise_kv_blocks_used", "KV cache blocks in use.", used),
            ("haltwise_kv_blocks_total", "KV cache blocks in the pool.", total),
            ("haltwise_kv_blocks_committed", "KV cache blocks whose pages are committed (the pool grows to "
             "total within seconds of start).", committed),
            ("haltwise_kv_blocks_free", "KV cache blocks free (committed, not in use).", max(committed - used, 0.0)),
            ("haltwise_kv_fragmentation_ratio", "Unused slots / allocated slots in used blocks.",
             value("kv_fragmentation")),
            ("haltwise_engine_breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open.",
             value("breaker_state")),
        ]
        for name, doc, v in gauges:
            yield GaugeMetricFamily(name, doc, value=v)
        yield CounterMetricFamily("haltwise_preemptions", "Sequences preempted for recompute.",
                                  value=value("preemptions_total"))
        yield CounterMetricFamily("haltwise_prefix_cache_hit_tokens", "Prompt tokens served from the prefix cache.",
                                  value=value("prefix_cache_hit_tokens"))
        yield CounterMetricFamily("haltwise_spec_draft_tokens", "Speculative draft tokens verified.",
                                  value=value("spec_draft_tokens"))
        yield CounterMetricFamily("haltwise_spec_accepted_tokens", "Speculative draft tokens accepted.",
                                  value=value("spec_accepted_tokens"))
        yield CounterMetricFamily("haltwise_spec_draft_model_draft_tokens", "Speculative draft tokens verified that "
                                  "the draft model (--draft-model) proposed (part of haltwise_spec_draft_tokens).",
                                  value=value("spec_model_draft_tokens"))
        yield CounterMetricFamily("haltwise_spec_draft_model_accepted_tokens", "Draft-model draft tokens accepted "
                                  "(part of haltwise_spec_accepted_tokens).",
                                  value=value("spec_model_accepted_tokens"))
        yield from _prompt_cache_families(getattr(s, "prompt_cache", None) or {})


# The prompt cache beyond the pool (engine/prompt_cache): (name, kind, help, key per tier or a plain key).
_PROMPT_CACHE = [
    ("hit_blocks", CounterMetricFamily, "Prompt blocks restored from a tier instead of prefilled.", True),
    ("hit_bytes", CounterMetricFamily, "Bytes of prompt blocks restored from a tier.", True),
    ("saved_bytes", CounterMetricFamily, "Bytes of prompt blocks stored in a tier (RAM) or written (disk).", True),
    ("evictions", CounterMetricFamily, "Prompt-cache entries evicted to stay within the tier's budget.", True),
    ("used_bytes", GaugeMetricFamily, "Bytes the tier holds now.", True),
    ("budget_bytes", GaugeMetricFamily, "Bytes the tier may hold.", True),
    ("miss_blocks", CounterMetricFamily, "Prompt blocks looked up beyond the pool that no tier held.", False),
    ("disk_write_drops", CounterMetricFamily, "Disk writes dropped (queue full, no room, I/O error).", False),
    ("disk_corrupt_skipped", CounterMetricFamily, "Corrupt, truncated or foreign disk entries removed unread.",
     False),
    ("disk_untrusted_skipped", CounterMetricFamily, "Disk entries not ours or writable by others, removed unread.",
     False),
]


def _prompt_cache_families(stats: dict[str, float]) -> Iterable[Any]:
    if not stats:
        return
    for key, kind, doc, per_tier in _PROMPT_CACHE:
        name = "haltwise_prompt_cache_" + key.removeprefix("disk_")
        if per_tier:
            family = kind(name, doc, labels=["tier"])
            for tier in ("ram", "disk"):
                family.add_metric([tier], float(stats.get(f"{tier}_{key}", 0)))
            yield family
        else:
            yield kind(name, doc, value=float(stats.get(key, 0)))


class ServerMetrics:
    """All haltwise_* metrics of one app. Counters are updated by the server as requests finish."""

    def __init__(self, stats: Callable[[], Any]):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.finished = Counter("haltwise_requests_finished", "Finished requests (per choice).",
                                ["finish_reason", "termination_reason"], registry=r)
        self.rejected = Counter("haltwise_requests_rejected", "Requests answered with an error, by error code.",
                                ["reason"], registry=r)
        self.prompt_tokens = Counter("haltwise_prompt_tokens", "Prompt tokens processed.", registry=r)
        self.generation_tokens = Counter("haltwise_generation_tokens", "Tokens generated.", registry=r)
        self.ttft = Histogram("haltwise_time_to_first_token_seconds", "Arrival to first token.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("haltwise_inter_token_latency_seconds", "Time between generated tokens.",
                             buckets=_ITL_BUCKETS, registry=r)
        self.e2e = Histogram("haltwise_e2e_request_latency_seconds", "Arrival to finish.",
                             buckets=_LATENCY_BUCKETS, registry=r)
        r.register(_EngineStatsCollector(stats))

    def reject(self, reason: str | None) -> None:
        self.rejected.labels(reason=reason or "invalid_request_error").inc()

    def finish(self, finish_reason: str | None, termination_reason: str) -> None:
        self.finished.labels(finish_reason=finish_reason or "none", termination_reason=termination_reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
