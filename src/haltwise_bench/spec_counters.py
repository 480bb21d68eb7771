"""haltwise's speculation counters, read from a running server's /metrics, so a run's acceptance is reported.

`haltwise serve` exports (server/metrics.py) haltwise_spec_draft_tokens / _accepted_tokens (every draft token
verified / accepted: prompt lookup and the draft model together) and haltwise_spec_draft_model_draft_tokens /
_accepted_tokens (the draft model's part). A run's figures are the difference between a scrape before it and
one after: acceptance = accepted / drafted, None when nothing was drafted (speculation off, or every step
held more decodes than --speculative-max-batch).
"""
from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {"haltwise_spec_draft_tokens": "drafted", "haltwise_spec_accepted_tokens": "accepted",
            "haltwise_spec_draft_model_draft_tokens": "model_drafted",
            "haltwise_spec_draft_model_accepted_tokens": "model_accepted"}


@dataclass(frozen=True, slots=True)
class SpecCounters:
    drafted: int = 0
    accepted: int = 0
    model_drafted: int = 0           # of drafted: proposed by the draft model (--draft-model)
    model_accepted: int = 0

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        return SpecCounters(self.drafted - earlier.drafted, self.accepted - earlier.accepted,
                            self.model_drafted - earlier.model_drafted, self.model_accepted - earlier.model_accepted)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def parse(text: str) -> SpecCounters:
    """The counters in a Prometheus exposition (missing ones read 0)."""
    values = {}
    for family in text_string_to_metric_families(text):
        if family.name in COUNTERS:
            values[COUNTERS[family.name]] = int(sum(s.value for s in family.samples if s.name.endswith("_total")))
    return SpecCounters(**values)


def scrape(base_url: str, timeout_s: float = 10.0) -> SpecCounters:
    response = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s)
    response.raise_for_status()
    return parse(response.text)
