"""The engine gauges of /metrics over several loaded models: one model's stats as they are, several summed
(breaker_state: the worst; the prompt cache's tiers are shared by every model: counted once), none: None
(the collector then reports zeros)."""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any


def summed_stats(engines: list[Any]) -> Any:
    if not engines:
        return None
    if len(engines) == 1:
        return engines[0].stats()
    rows = [e.stats() for e in engines]
    total = rows[0]
    for row in rows[1:]:
        values = {}
        for f in fields(total):
            a, b = getattr(total, f.name), getattr(row, f.name)
            if f.name == "breaker_state":
                values[f.name] = max(a, b)
            elif f.name == "kv_fragmentation":
                values[f.name] = max(a, b)
            elif f.name == "prompt_cache":    # the server's tiers, one for every model: the same figures
                values[f.name] = a if a is not None else b
            elif a is None or b is None:      # kv_blocks_committed None = all of kv_blocks_total
                values[f.name] = None if a is None and b is None else (
                    (a if a is not None else total.kv_blocks_total) + (b if b is not None else row.kv_blocks_total))
            else:
                values[f.name] = a + b
        total = replace(total, **values)
    return total
