"""Bit-unpacking helpers shared by the GGML block decoders (dequant.py, dequant_k.py)."""
from __future__ import annotations

import torch


def f16_column(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """Two bytes at `start` of every block, read as float16 -> (n_blocks, 1) float32."""
    return blocks[:, start:start + 2].contiguous().view(torch.float16).float()


def split_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., k) uint8 -> (..., 8 // bits, k) uint8: [..., s, j] = (x[..., j] >> (s * bits)) & (2^bits - 1).

    The shift axis comes before the byte axis, the order every GGML format packs its low bits in:
    the lowest `bits` of bytes 0..k-1 are weights 0..k-1, the next `bits` are weights k..2k-1, ...
    """
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8).view(-1, 1)          # (8 / bits, 1)
    return (x.unsqueeze(-2) >> shifts) & ((1 << bits) - 1)


def nibbles(qs: torch.Tensor) -> torch.Tensor:
    """(..., k) uint8 -> (..., 2k) uint8: the k low nibbles, then the k high nibbles."""
    return split_bits(qs, 4).flatten(-2)


def bits_of_words(qh: torch.Tensor) -> torch.Tensor:
    """(n, k) uint8 holding little-endian bit fields -> (n, 8k) uint8: bit i of the field, in order."""
    return split_bits(qh, 1).transpose(-1, -2).reshape(qh.shape[0], -1)
