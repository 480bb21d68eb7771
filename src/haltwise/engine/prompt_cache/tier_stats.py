"""Counters a tier keeps for /metrics (read without a lock: each is one int, a scrape may be a step late)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TierStats:
    saved_bytes: int = 0        # payload bytes stored (RAM) or written (disk)
    evictions: int = 0          # entries dropped to stay within the budget
    write_drops: int = 0        # disk: writes dropped (queue full, no room, I/O error)
    corrupt_skipped: int = 0    # disk: corrupt, truncated or foreign entries skipped and removed
    untrusted_skipped: int = 0  # disk: files another user owns or others can write, never read
