"""Memory: what this process holds, giving freed memory back to the OS, and whether a model fits.

A model's load takes (estimate_load): its weights as the plan runs them (the GGUF is mapped and each
planned linear's blocks are regrouped into records, a copy about the file's size: WEIGHT_FACTOR x the
file, plus the float32 embedding table, vocabulary x hidden x 4), its KV pool (sized at load from what is
free, as --kv-cache-memory auto does at start), and its tokenizer, kernel plan, calibration and heap kept
by the allocator (CACHE_BYTES + bytes per vocabulary entry). Measured resident growth of a load (64 MiB
KV pool): smollm2-135m (93 MiB file) 703 MiB, gemma3-270m (241 MiB) 1,597 MiB; the estimate gives 747
and 1,601 MiB. What is free
(MemoryBudget.free): MemAvailable minus a reserve minus what other server-wide holders reserve (the prompt
cache's RAM tier: `reserved_bytes`), and within --models-memory minus what loaded models are estimated to
hold.

Unloading returns memory (return_freed_memory): the model's maps (GGUF, record cache, KV pool) are
unmapped when their last reference goes; the cyclic collector runs over what factory.py froze; glibc's
heap (kept by engine/freed_memory.py for step speed) is trimmed with malloc_trim(0).
"""
from __future__ import annotations

import ctypes
import gc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from haltwise.engine.kv_cache import available_ram

log = logging.getLogger("haltwise.registry")
WEIGHT_FACTOR = 2.0         # resident weights / GGUF file size (mapped blocks + regrouped records)
CACHE_BYTES = 384 << 20     # tokenizer, plan and calibration, native stack, heap the allocator keeps
VOCAB_ENTRY_BYTES = 512     # tokenizer tables + chat encoder's plain-text vocabulary, per entry
DEFAULT_RESERVE = 512 << 20


def resident_bytes() -> int:
    """This process's resident memory (VmRSS), bytes; 0 where /proc is absent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def return_freed_memory() -> None:
    """Collect what an unloaded model left (including what factory.py froze) and trim glibc's heap."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True, slots=True)
class LoadEstimate:
    """What one model takes once loaded, bytes."""

    weights: int
    kv_pool: int
    caches: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_pool + self.caches

    def describe(self) -> str:
        return (f"{mib(self.total)} (weights {mib(self.weights)}, KV pool {mib(self.kv_pool)}, "
                f"tokenizer and plan {mib(self.caches)})")


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def weights_and_caches(path: Path, vocab_size: int, hidden_size: int, mapped: int = 0) -> tuple[int, int]:
    """(weights, caches) bytes of a model file, before its KV pool. mapped: bytes of it kept in mapped files
    (a MoE model's routed experts, engine/expert_weights.py): page cache the kernel reclaims, not counted."""
    size = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return (int((size - mapped) * WEIGHT_FACTOR) + vocab_size * hidden_size * 4,
            CACHE_BYTES + vocab_size * VOCAB_ENTRY_BYTES)


class MemoryBudget:
    """What loads may take: MemAvailable - reserve - reserved_bytes(), and within `limit` (--models-memory)
    minus what loaded models hold.

    reserved_bytes: HOOK for server-wide holders outside the models, e.g. the prompt cache's RAM tier
    (its `budget_bytes`): called at every check, so a tier that grows or shrinks is seen at once."""

    def __init__(self, limit: int | None = None, reserve: int = DEFAULT_RESERVE,
                 reserved_bytes: Callable[[], int] = lambda: 0, available: Callable[[], int] = available_ram):
        self.limit, self.reserve = limit, reserve
        self.reserved_bytes, self.available = reserved_bytes, available

    def free(self, held_by_models: int) -> int:
        """Bytes a new load may take now (never negative)."""
        free = self.available() - self.reserve - self.reserved_bytes()
        if self.limit is not None:
            free = min(free, self.limit - held_by_models)
        return max(0, free)

    def could_ever_fit(self, need: int, held_by_models: int) -> bool:
        """Whether unloading every other model could make room for `need` bytes."""
        room = self.available() - self.reserve - self.reserved_bytes() + held_by_models
        if self.limit is not None:
            room = min(room, self.limit)
        return need <= room
