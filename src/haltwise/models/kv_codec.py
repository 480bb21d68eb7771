"""How the paged KV cache stores one (position, kv head) row of head_dim values, per KV dtype.

    float32   D float32                         exact
    bfloat16  D bfloat16 (round to nearest even) 2 bytes a value, relative error <= 2^-9
    int8      D int8, then the row's float32 scale as 4 bytes (D + 4 bytes a row, one int8 tensor):
              scale = max|x| / 127, q = round-half-even(x / scale) (0 when the row is all zero), x ~ q * scale

The native layer stack (kernels/native/csrc: KVFormat, store_kv, attend) writes and reads the same bytes
in place; this module is the torch side for the Python layers. A row is encoded from its own values
only, so what a sequence's cache holds never depends on its batch (the determinism contract).
"""
from __future__ import annotations

import torch

KV_DTYPES = ("float32", "bfloat16", "int8")
_STORAGE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": torch.int8}
_SCALE_BYTES = 4


def row_bytes(kv_dtype: str, head_dim: int) -> int:
    """Bytes of one stored row of head_dim values."""
    if kv_dtype == "int8":
        return head_dim + _SCALE_BYTES
    return head_dim * (4 if kv_dtype == "float32" else 2)


def cache_tensor(kv_dtype: str, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 zeros=torch.zeros) -> torch.Tensor:
    """One zero-filled cache (K or V) of a layer: (num_blocks, block_size, kv_heads, row width).
    zeros(shape, dtype=...) allocates it (engine/kv_cache.py commits the pool's pages at once)."""
    width = head_dim + _SCALE_BYTES if kv_dtype == "int8" else head_dim
    return zeros((num_blocks, block_size, kv_heads, width), dtype=_STORAGE[kv_dtype])


def kv_dtype_of(cache: torch.Tensor) -> str:
    return {v: k for k, v in _STORAGE.items()}[cache.dtype]


def head_dim_of(cache: torch.Tensor) -> int:
    return cache.shape[-1] - _SCALE_BYTES if cache.dtype == torch.int8 else cache.shape[-1]


def encode(x: torch.Tensor, kv_dtype: str) -> torch.Tensor:
    """Rows (..., D) of any float dtype -> their stored form (..., row width)."""
    if kv_dtype != "int8":
        return x.to(_STORAGE[kv_dtype])
    x = x.float()
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    q = torch.where(scale == 0, torch.zeros_like(x), torch.round(x / scale)).to(torch.int8)
    return torch.cat([q, scale.contiguous().view(torch.int8)], dim=-1)


def decode(stored: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Stored rows (..., row width) -> values (..., D) in `dtype`."""
    if stored.dtype != torch.int8:
        return stored.to(dtype)
    scale = stored[..., -_SCALE_BYTES:].contiguous().view(torch.float32)       # (..., 1)
    return (stored[..., :-_SCALE_BYTES].float() * scale).to(dtype)


def is_lossless(cache: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether values of `dtype` read back from this cache exactly as written."""
    return cache.dtype == dtype
