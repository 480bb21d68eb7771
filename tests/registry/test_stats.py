"""The engine gauges over several loaded models (registry/stats.py)."""
from __future__ import annotations

from types import SimpleNamespace

from haltwise.engine.engine_stats import EngineStats
from haltwise.registry.stats import summed_stats


def _engine(running: int, breaker: int, tiers: dict | None) -> SimpleNamespace:
    stats = EngineStats(running, 1, 10, 100, 0.1, 0, 5, breaker_state=breaker, prompt_cache=tiers)
    return SimpleNamespace(stats=lambda: stats)


def test_two_models_sum_and_their_shared_prompt_cache_counts_once() -> None:
    tiers = {"ram_bytes": 4096.0, "hits": 3.0}          # one RAM tier for every model of the server
    total = summed_stats([_engine(2, 0, tiers), _engine(3, 2, tiers)])
    assert (total.num_running, total.num_waiting, total.kv_blocks_total) == (5, 2, 200)
    assert total.breaker_state == 2 and total.prompt_cache == tiers
    assert summed_stats([_engine(1, 0, None), _engine(1, 0, None)]).prompt_cache is None
    assert summed_stats([]) is None
