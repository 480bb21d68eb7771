"""One pool block as bytes: every layer's K then V rows of the block, exactly as the pool stores them.

    layer 0 K[block] | layer 0 V[block] | layer 1 K[block] | ... each (block_size, kv_heads, row width)

A row is the KV dtype's stored form (models/kv_codec.py: int8 values then their float32 scale, or float32 /
bfloat16 values), so reading and writing back copies bits and never re-quantizes. Every layer must live in
the main pool (no sliding layers' pool of their own: prefix caching is off there, and so is this cache).
"""
from __future__ import annotations

import torch

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]


def block_nbytes(kv_caches: KVCaches) -> int:
    """Bytes of one block's payload."""
    return sum(t[0].numel() * t.element_size() for pair in kv_caches for t in pair)


def read_block(kv_caches: KVCaches, block_id: int) -> bytes:
    """The block's payload (a copy: the pool may overwrite the block right after)."""
    parts = [t[block_id].contiguous().view(torch.uint8).reshape(-1) for pair in kv_caches for t in pair]
    return torch.cat(parts).numpy().tobytes()


def write_block(kv_caches: KVCaches, block_id: int, payload: bytes) -> None:
    """Copy a payload from read_block (same pool layout) into the block."""
    if len(payload) != block_nbytes(kv_caches):
        raise ValueError(f"block payload of {len(payload)} bytes, the pool's blocks hold {block_nbytes(kv_caches)}")
    flat = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    offset = 0
    for pair in kv_caches:
        for t in pair:
            dst = t[block_id]
            n = dst.numel() * t.element_size()
            dst.view(torch.uint8).reshape(-1).copy_(flat[offset:offset + n])
            offset += n
