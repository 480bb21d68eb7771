"""haltwise_models_* on /metrics: what is loaded, loads and unloads by reason, and how long loads take."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from haltwise.registry.entry import ModelEntry

UNLOAD_REASONS = ("lru", "idle", "request", "memory")
_LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class RegistryMetrics(Collector):
    """Counters kept here; registered on the app's registry by register()."""

    def __init__(self, registry: Any):
        self.registry = registry
        self.own = CollectorRegistry(auto_describe=True)
        self.loads = Counter("haltwise_model_loads", "Model loads.", ["model"], registry=self.own)
        self.unloads = Counter("haltwise_model_unloads", "Model unloads by reason (lru, idle, request, memory).",
                               ["model", "reason"], registry=self.own)
        self.load_seconds = Histogram("haltwise_model_load_seconds", "Time to load a model, engine started.",
                                      ["model"], buckets=_LOAD_BUCKETS, registry=self.own)

    def loaded(self, entry: "ModelEntry") -> None:
        self.loads.labels(model=entry.name).inc()
        self.load_seconds.labels(model=entry.name).observe(entry.load_seconds or 0.0)

    def unloaded(self, entry: "ModelEntry", reason: str) -> None:
        self.unloads.labels(model=entry.name, reason=reason).inc()

    def collect(self) -> Iterable[Any]:
        loaded = self.registry.loaded()
        yield GaugeMetricFamily("haltwise_models_loaded", "Models loaded now.", value=len(loaded))
        resident = GaugeMetricFamily("haltwise_model_resident_bytes", "Resident memory a model's load added.",
                                     labels=["model"])
        for e in loaded:
            resident.add_metric([e.name], float(e.resident_delta or 0))
        yield resident
        yield from self.own.collect()
