"""GGML block formats -> float32 torch tensors, vectorised over all blocks at once.

Block layouts (32 weights per block, little-endian):

    Q8_0  34 bytes: [d: f16][q: 32 x int8]                 w = d * q
    Q4_0  18 bytes: [d: f16][q: 16 bytes, two nibbles each] w = d * (q - 8)
    Q4_1  20 bytes: [d: f16][m: f16][q: 16 bytes]            w = d * q + m
    nibbles: byte i holds weight i (low 4 bits) and weight i + 16 (high 4 bits)

The arithmetic is done in float32 in the same order as gguf.quants, so results are bit-identical.
"""
from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

SUPPORTED_TYPES = frozenset({Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1})
_BLOCK_BYTES = {Q.Q8_0: 34, Q.Q4_0: 18, Q.Q4_1: 20}
BLOCK_SIZE = 32


def _f16_column(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """Two bytes at `start` of every block, read as float16 -> (n_blocks, 1) float32."""
    return blocks[:, start:start + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """(n, 16) uint8 -> (n, 32) float32: low nibbles first, then high nibbles."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=1).float()


def dequantize(raw: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> torch.Tensor:
    """Decode one tensor's data into a float32 tensor of `shape` (numpy / torch order).

    raw: the tensor's bytes as GGUFReader exposes them (any dtype; only the bytes are used).
    Raises KeyError-free ValueError for types outside SUPPORTED_TYPES.
    """
    data = torch.from_numpy(np.ascontiguousarray(raw).reshape(-1).view(np.uint8).copy())  # (nbytes,)
    if qtype == Q.F32:
        return data.view(torch.float32).reshape(shape)
    if qtype == Q.F16:
        return data.view(torch.float16).float().reshape(shape)
    if qtype == Q.BF16:
        return data.view(torch.bfloat16).float().reshape(shape)
    if qtype not in _BLOCK_BYTES:
        raise ValueError(f"unsupported GGML type {qtype.name}")
    blocks = data.view(-1, _BLOCK_BYTES[qtype])                        # (n_blocks, bytes)
    d = _f16_column(blocks, 0)                                         # (n_blocks, 1)
    if qtype == Q.Q8_0:
        out = d * blocks[:, 2:].view(torch.int8).float()
    elif qtype == Q.Q4_0:
        out = d * (_nibbles(blocks[:, 2:]) - 8.0)
    else:  # Q4_1
        out = d * _nibbles(blocks[:, 4:]) + _f16_column(blocks, 2)
    return out.reshape(shape)                                          # (n_blocks, 32) -> shape
