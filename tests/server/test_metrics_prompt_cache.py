"""/metrics carries the prompt cache's counters per tier when the engine has one, nothing when it has none."""
from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import generate_latest

from haltwise.server.metrics import ServerMetrics


def scrape(prompt_cache) -> str:
    stats = SimpleNamespace(num_running=0, num_waiting=0, kv_blocks_used=0, kv_blocks_total=1,
                            prompt_cache=prompt_cache)
    return generate_latest(ServerMetrics(lambda: stats).registry).decode()


def test_prompt_cache_metrics_per_tier():
    text = scrape({"ram_hit_blocks": 3, "disk_hit_bytes": 7, "miss_blocks": 2, "disk_write_drops": 1,
                   "disk_corrupt_skipped": 4, "ram_used_bytes": 10, "disk_budget_bytes": 99})
    for line in ('haltwise_prompt_cache_hit_blocks_total{tier="ram"} 3.0',
                 'haltwise_prompt_cache_hit_bytes_total{tier="disk"} 7.0',
                 "haltwise_prompt_cache_miss_blocks_total 2.0", "haltwise_prompt_cache_write_drops_total 1.0",
                 "haltwise_prompt_cache_corrupt_skipped_total 4.0", 'haltwise_prompt_cache_used_bytes{tier="ram"} 10.0',
                 'haltwise_prompt_cache_budget_bytes{tier="disk"} 99.0'):
        assert line in text, line
    assert "haltwise_prompt_cache" not in scrape(None)
