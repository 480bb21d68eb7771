"""The host-RAM tier: block payloads evicted from the pool, LRU within a byte budget. Shared by engines.

One RamTier per server (the server makes it, every engine it builds gets it: package docstring); keys are
(namespace, chain hash), so models never see each other's blocks. `used_bytes` counts payload bytes only
(a few hundred KiB a block); the dict's own overhead is ~200 bytes an entry.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from haltwise.engine.prompt_cache.tier_stats import TierStats

Key = tuple[bytes, bytes]     # (namespace, chain hash)


class RamTier:
    """LRU map key -> payload bytes, never holding more than budget_bytes of payload."""

    name = "ram"

    def __init__(self, budget_bytes: int):
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self._budget = budget_bytes
        self._entries: OrderedDict[Key, bytes] = OrderedDict()   # least recently used first
        self._used = 0
        self._lock = threading.Lock()
        self.stats = TierStats()

    @property
    def budget_bytes(self) -> int:
        return self._budget

    @property
    def used_bytes(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._entries)

    def save(self, key: Key, payload: bytes) -> bool:
        """Keep payload under key (most recently used), evicting LRU entries to fit; False if it never fits."""
        size = len(payload)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._used -= len(old)
            if size > self._budget:
                return False
            while self._used + size > self._budget:
                _, dropped = self._entries.popitem(last=False)
                self._used -= len(dropped)
                self.stats.evictions += 1
            self._entries[key] = payload
            self._used += size
            self.stats.saved_bytes += size
            return True

    def contains(self, key: Key) -> bool:
        with self._lock:
            return key in self._entries

    def load(self, key: Key) -> bytes | None:
        """The payload (now most recently used), or None."""
        with self._lock:
            payload = self._entries.get(key)
            if payload is not None:
                self._entries.move_to_end(key)
            return payload
