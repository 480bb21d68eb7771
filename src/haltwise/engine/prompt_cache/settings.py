"""The prompt cache's sizes and directory, as the server resolves them at start (picklable: Ray replicas
receive them and open their own tiers).

Defaults, and why:
  RAM   min(RAM_DEFAULT_CAP, RAM_DEFAULT_SHARE x MemAvailable at start). The KV pool takes 10% of available
        RAM by default (engine/kv_cache.py); the tier keeps what the pool evicts, so twice the pool's share
        holds about two more pools' worth of prompts (a 2k-token SmolLM2 prompt is ~24 MiB of int8 blocks,
        an 8k Qwen2.5-Coder-0.5B one ~51 MiB), capped at llama-server's --cache-ram default of 8 GiB. It is a
        bound, not a reservation: bytes are held only as blocks are evicted into it.
  disk  off unless --prompt-cache-dir; then min(DISK_DEFAULT_CAP, half the free space of its filesystem).

Replicas (--replicas N on one host): each replica gets its own subdirectory `replica-<k>` (claimed with an
exclusive lock, so a restart finds the same ones) and 1/N of both budgets: every directory has one writer,
whose index is the truth, so the budget holds exactly and no replica reads a file another is replacing; the
prefix-aware router already sends a repeated prefix to the replica that served it.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from haltwise.engine.kv_cache import available_ram
from haltwise.engine.prompt_cache.disk_tier import DiskTier
from haltwise.engine.prompt_cache.prompt_cache import PromptTiers
from haltwise.engine.prompt_cache.ram_tier import RamTier

RAM_DEFAULT_SHARE = 0.20
RAM_DEFAULT_CAP = 8 * 2**30
DISK_DEFAULT_CAP = 10 * 2**30
MAX_REPLICA_SLOTS = 256
_held_locks: list[int] = []      # slot lock fds, held for the life of the process


def default_ram_bytes(available: int | None = None) -> int:
    available = available_ram() if available is None else available
    return int(min(RAM_DEFAULT_CAP, RAM_DEFAULT_SHARE * available))


def default_disk_bytes(root: Path) -> int:
    probe = root if root.exists() else next((p for p in root.parents if p.exists()), Path("/"))
    return int(min(DISK_DEFAULT_CAP, shutil.disk_usage(probe).free // 2))


@dataclass(frozen=True)
class PromptCacheSettings:
    ram_bytes: int               # 0 = no RAM tier
    dir: str | None = None       # None = no disk tier
    disk_bytes: int = 0
    replicas: int = 1            # > 1: each process claims a replica-<k> subdirectory and 1/replicas of each budget

    def open(self) -> PromptTiers:
        """The tiers of this process (raises disk_tier.UntrustedCacheDir for a directory it must refuse)."""
        share = max(1, self.replicas)
        ram = RamTier(self.ram_bytes // share) if self.ram_bytes > 0 else None
        disk = None
        if self.dir is not None and self.disk_bytes > 0:
            root = Path(self.dir).expanduser()
            DiskTier.check_root(root)
            disk = DiskTier(claim_replica_dir(root) if share > 1 else root, self.disk_bytes // share)
        return PromptTiers(ram, disk)

    def describe(self) -> str:
        ram = f"RAM {self.ram_bytes / 2**30:.2f} GiB" if self.ram_bytes else "RAM off"
        disk = (f"disk {self.disk_bytes / 2**30:.2f} GiB in {self.dir}" if self.dir and self.disk_bytes
                else "disk off (--prompt-cache-dir)")
        each = f", split over {self.replicas} replicas" if self.replicas > 1 else ""
        return f"prompt cache: {ram}, {disk}{each}"


def claim_replica_dir(root: Path) -> Path:
    """The first `replica-<k>` subdirectory of root no live process holds, locked for this process's life."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    for k in range(MAX_REPLICA_SLOTS):
        fd = os.open(root / f"replica-{k}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held_locks.append(fd)
        return root / f"replica-{k}"
    raise RuntimeError(f"{root}: all {MAX_REPLICA_SLOTS} replica prompt-cache directories are in use")
