"""One engine's view of the shared tiers: its namespace bound to the server's RamTier and DiskTier.

    find_prefix(chains) -> the tier holding each of the leading blocks any tier holds (RAM first)
    load(chain, tier)   -> payload bytes, or None (gone, or a bad disk entry: removed and counted)
    evicted(chain, payload)   -> RAM (the block leaves the pool)
    computed(chain, payload)  -> disk (queued; a full queue drops it)

It counts, per tier, the blocks and bytes it served (hits) and the blocks it looked for and no tier held
(misses: the blocks after a run, up to the prompt's last full block), for /metrics.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from haltwise.engine.prompt_cache.disk_tier import DiskTier
from haltwise.engine.prompt_cache.ram_tier import RamTier

TIERS = ("ram", "disk")


@dataclass(frozen=True)
class PromptTiers:
    """What the server makes once and hands to every engine it builds (package docstring)."""

    ram: RamTier | None = None
    disk: DiskTier | None = None

    @property
    def enabled(self) -> bool:
        # `is not None`, never truth: a tier defines __len__, and an empty one (every tier at start) is falsy
        return (self.ram is not None and self.ram.budget_bytes > 0) or self.disk is not None

    @property
    def budget_bytes(self) -> int:
        """Host RAM the tiers may hold (the RAM tier's budget; the disk tier holds none beyond its queue)."""
        return self.ram.budget_bytes if self.ram is not None else 0


@dataclass
class _Counts:
    hit_blocks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    hit_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    miss_blocks: int = 0


class PromptCache:
    def __init__(self, tiers: PromptTiers, namespace: bytes):
        self.tiers = tiers
        self.namespace = namespace
        self.ram = tiers.ram if tiers.ram is not None and tiers.ram.budget_bytes > 0 else None
        self.disk = tiers.disk
        self.counts = _Counts()

    def _key(self, chain: bytes) -> tuple[bytes, bytes]:
        return self.namespace, chain

    def find_prefix(self, chains: list[bytes]) -> list[str]:
        """The tier ("ram" or "disk") of each leading block some tier holds; stops at the first none holds."""
        found = []
        for chain in chains:
            key = self._key(chain)
            if self.ram is not None and self.ram.contains(key):
                found.append("ram")
            elif self.disk is not None and self.disk.contains(key):
                found.append("disk")
            else:
                break
        self.counts.miss_blocks += len(chains) - len(found)
        return found

    def load(self, chain: bytes, tier: str) -> bytes | None:
        store = self.ram if tier == "ram" else self.disk
        payload = store.load(self._key(chain)) if store is not None else None
        if payload is not None:
            self.counts.hit_blocks[tier] += 1
            self.counts.hit_bytes[tier] += len(payload)
        return payload

    def evicted(self, chain: bytes, read: Callable[[], bytes]) -> None:
        """A cached block leaves the pool: keep its bytes in RAM (read() copies them from the pool)."""
        if self.ram is not None:
            self.ram.save(self._key(chain), read())

    def computed(self, chain: bytes, read: Callable[[], bytes]) -> None:
        """A block was registered in the pool's prefix cache: queue it for the disk if the disk lacks it."""
        if self.disk is not None and self.disk.wants(self._key(chain)):
            self.disk.save(self._key(chain), read())

    def metrics(self) -> dict[str, float]:
        """Flat counters and gauges for EngineStats (server/metrics.py labels them by tier)."""
        out: dict[str, float] = {"miss_blocks": self.counts.miss_blocks}
        for name, store in (("ram", self.ram), ("disk", self.disk)):
            out[f"{name}_hit_blocks"] = self.counts.hit_blocks[name]
            out[f"{name}_hit_bytes"] = self.counts.hit_bytes[name]
            out[f"{name}_used_bytes"] = store.used_bytes if store is not None else 0
            out[f"{name}_budget_bytes"] = store.budget_bytes if store is not None else 0
            out[f"{name}_evictions"] = store.stats.evictions if store is not None else 0
            out[f"{name}_saved_bytes"] = store.stats.saved_bytes if store is not None else 0
        disk = self.disk.stats if self.disk is not None else None
        out["disk_write_drops"] = disk.write_drops if disk else 0
        out["disk_corrupt_skipped"] = disk.corrupt_skipped if disk else 0
        out["disk_untrusted_skipped"] = disk.untrusted_skipped if disk else 0
        return out
