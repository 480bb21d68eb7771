"""The KV pool: one preallocated tensor pair per layer, sized from a byte budget.

`--kv-cache-memory auto` (the CLI default) sizes the pool to the host, as vLLM's
gpu_memory_utilization does for a GPU: KV_AUTO_FRACTION of the RAM available at start
(MemAvailable), raised to hold at least one max-model-len sequence when that still fits in
KV_AUTO_MAX_FRACTION of it, and never more than max_num_seqs full-length sequences need.
A pool that cannot hold one sequence of an explicitly asked max_model_len is refused at start,
with the numbers (a prompt that long could never run).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from haltwise.config import KV_AUTO_FRACTION, KV_AUTO_MAX_FRACTION, EngineConfig, ModelConfig
from haltwise.engine.page_commit import committed_zeros
from haltwise.engine.window_blocks import window_pool_blocks
from haltwise.models.kv_codec import KV_DTYPES, cache_tensor



@dataclass(frozen=True)
class KVBudget:
    """How a byte budget turns into blocks: the main pool's, after the sliding layers' own pool (if any).

    bytes_per_token = 2 x layers x kv_heads x row bytes, over the layers of the main pool: all of them, or
    only the full-context ones when the sliding layers keep their window in window_blocks blocks of their
    own (engine/window_blocks.py; a fixed cost, whatever the main pool holds)."""

    bytes_per_token: int
    block_size: int
    num_blocks: int
    window_blocks: int = 0
    window_bytes_per_token: int = 0

    @classmethod
    def from_memory(cls, config: ModelConfig, dtype: str, block_size: int, memory_bytes: int,
                    window_blocks: int = 0) -> "KVBudget":
        """window_blocks > 0 offers the sliding layers a pool of their own; it is taken only where the main
        pool then holds more tokens than one pool for every layer would (a small budget, many sequences)."""
        shared = cls(config.kv_bytes_per_token(dtype), block_size,
                     memory_bytes // (config.kv_bytes_per_token(dtype) * block_size))
        if not window_blocks:
            return shared
        sliding = config.num_sliding_layers
        per_token = config.kv_bytes_per_token(dtype, config.num_layers - sliding)
        window_per_token = config.kv_bytes_per_token(dtype, sliding)
        main = max(0, memory_bytes - window_blocks * block_size * window_per_token)
        own = cls(per_token, block_size, main // (per_token * block_size), window_blocks, window_per_token)
        return own if own.num_blocks > shared.num_blocks else shared

    @classmethod
    def of_engine(cls, model_config: ModelConfig, engine_config: EngineConfig, max_model_len: int) -> "KVBudget":
        """The pool an engine of this config holds (kv_cache_memory already resolved to bytes)."""
        return cls.from_memory(model_config, engine_config.kv_dtype, engine_config.block_size,
                               engine_config.kv_cache_memory,
                               window_pool_blocks(model_config, engine_config, max_model_len))

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def window_bytes(self) -> int:
        return self.window_blocks * self.block_size * self.window_bytes_per_token

    @property
    def num_bytes(self) -> int:
        return self.num_tokens * self.bytes_per_token + self.window_bytes

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def check_fits(self, max_model_len: int) -> None:
        """Raise ValueError when one sequence of max_model_len tokens cannot fit the pool."""
        need = self.blocks_for(max_model_len)
        if need > self.num_blocks:
            raise ValueError(
                f"--max-model-len {max_model_len} cannot fit the KV pool: one such sequence needs {need} blocks "
                f"({need * self.block_size * self.bytes_per_token / 2**20:.1f} MiB at {self.bytes_per_token} "
                f"bytes/token), the pool holds {self.num_blocks} blocks = {self.num_tokens} tokens "
                f"({self.num_bytes / 2**20:.1f} MiB{self._window_share()}). Raise --kv-cache-memory or lower "
                "--max-model-len.")

    def _window_share(self) -> str:
        return (f", of which the sliding layers' own pool takes {self.window_bytes / 2**20:.1f} MiB for "
                f"--max-num-seqs sequences" if self.window_blocks else "")

    def describe(self) -> str:
        text = (f"KV cache: {self.num_blocks} blocks x {self.block_size} tokens = {self.num_tokens} tokens, "
                f"{self.num_bytes} bytes ({self.num_bytes / 2**20:.1f} MiB; {self.bytes_per_token} bytes/token")
        if self.window_blocks:
            text += (f" in the full-context layers; the sliding layers keep their window in {self.window_blocks} "
                     f"blocks of their own, {self.window_bytes / 2**20:.1f} MiB, prefix caching off (--swa-full "
                     "keeps every position)")
        return text + ")"


def available_ram() -> int:
    """MemAvailable from /proc/meminfo (bytes), else total physical RAM."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def auto_kv_memory(bytes_per_token: int, block_size: int, max_model_len: int, max_num_seqs: int = 64,
                   available: int | None = None) -> int:
    """The auto pool in bytes: KV_AUTO_FRACTION of available RAM, or one full sequence if that is more
    and stays within KV_AUTO_MAX_FRACTION; at most max_num_seqs full sequences."""
    available = available_ram() if available is None else available
    one_sequence = math.ceil(max_model_len / block_size) * block_size * bytes_per_token
    share = min(int(KV_AUTO_FRACTION * available), max_num_seqs * one_sequence)
    return max(share, one_sequence) if one_sequence <= KV_AUTO_MAX_FRACTION * available else share


def auto_pool_memory(config: ModelConfig, dtype: str, block_size: int, max_model_len: int, max_num_seqs: int,
                     window_blocks: int = 0, available: int | None = None) -> int:
    """`--kv-cache-memory auto` in bytes: the sliding layers' own pool when one is offered (window_blocks),
    plus auto_kv_memory's share for the layers of the main pool (of `available` bytes; None: MemAvailable)."""
    sliding = config.num_sliding_layers if window_blocks else 0
    per_token = config.kv_bytes_per_token(dtype, config.num_layers - sliding)
    window_bytes = window_blocks * block_size * config.kv_bytes_per_token(dtype, sliding)
    return window_bytes + auto_kv_memory(per_token, block_size, max_model_len, max_num_seqs, available)


def allocate_kv_caches(config: ModelConfig, budget: KVBudget, dtype: str, zeros=committed_zeros
                       ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (K, V), each (num_blocks, block_size, kv_heads, row width) in the KV dtype's storage
    (models/kv_codec.py), zero-filled by zeros(shape, dtype) (committed_zeros: its pages committed on return;
    a PageCommit's zeros: committed once it is waited for); a sliding layer has budget.window_blocks blocks
    when its pool is its own."""
    assert dtype in KV_DTYPES, dtype

    def one(layer: int) -> torch.Tensor:
        blocks = budget.window_blocks if budget.window_blocks and config.is_sliding(layer) else budget.num_blocks
        return cache_tensor(dtype, blocks, budget.block_size, config.num_kv_heads, config.head_dim, zeros)

    return [(one(i), one(i)) for i in range(config.num_layers)]
