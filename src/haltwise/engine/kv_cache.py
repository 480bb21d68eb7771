"""The KV pool: one preallocated tensor pair per layer, sized from a byte budget."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from haltwise.config import DTYPE_BYTES, ModelConfig


@dataclass(frozen=True)
class KVBudget:
    """How a byte budget turns into blocks. bytes_per_token = 2 x layers x kv_heads x head_dim x dtype_bytes."""

    bytes_per_token: int
    block_size: int
    num_blocks: int

    @classmethod
    def from_memory(cls, config: ModelConfig, dtype: str, block_size: int, memory_bytes: int) -> "KVBudget":
        per_token = config.kv_bytes_per_token(dtype)
        return cls(per_token, block_size, memory_bytes // (per_token * block_size))

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def num_bytes(self) -> int:
        return self.num_tokens * self.bytes_per_token

    def describe(self) -> str:
        return (f"KV cache: {self.num_blocks} blocks x {self.block_size} tokens = {self.num_tokens} tokens, "
                f"{self.num_bytes} bytes ({self.num_bytes / 2**20:.1f} MiB; {self.bytes_per_token} bytes/token)")


def parse_memory(text: str | int | float, total_ram: int | None = None) -> int:
    """'512MiB', '2GB', '1000000' (bytes) or '0.1' (a fraction of RAM) -> bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    s = str(text).strip()
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "k": 2**10,
             "m": 2**20, "g": 2**30, "b": 1}
    for unit in sorted(units, key=len, reverse=True):
        if s.lower().endswith(unit):
            return int(float(s[: -len(unit)]) * units[unit])
    value = float(s)
    if 0 < value < 1:
        if total_ram is None:
            import os
            total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(value * total_ram)
    return int(value)


def allocate_kv_caches(config: ModelConfig, budget: KVBudget, dtype: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (K, V), each (num_blocks, block_size, kv_heads, head_dim), zero-filled (touches the memory now)."""
    assert dtype in DTYPE_BYTES
    shape = (budget.num_blocks, budget.block_size, config.num_kv_heads, config.head_dim)
    torch_dtype = getattr(torch, dtype)
    return [(torch.zeros(shape, dtype=torch_dtype), torch.zeros(shape, dtype=torch_dtype))
            for _ in range(config.num_layers)]
