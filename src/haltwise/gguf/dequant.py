"""GGML block formats -> float32 torch tensors, vectorised over all blocks at once.

Legacy blocks (32 weights each, little-endian; `d`, `m` are float16):

    Q8_0  34 bytes: [d][q: 32 x int8]                        w = d * q
    Q4_0  18 bytes: [d][q: 16 bytes, two nibbles each]         w = d * (q - 8)
    Q4_1  20 bytes: [d][m][q: 16 bytes]                         w = d * q + m
    Q5_0  22 bytes: [d][qh: 32 bits][q: 16 bytes]              w = d * ((q | h << 4) - 16)
    Q5_1  24 bytes: [d][m][qh: 32 bits][q: 16 bytes]           w = d * (q | h << 4) + m
    IQ4_NL 18 bytes: [d][q: 16 bytes]                          w = d * KVALUES[q]
    MXFP4 17 bytes: [e: e8m0][q: 16 bytes]                     w = 2^(e - 128) * E2M1[q]  (gpt-oss experts;
          e < 2 are the subnormal halves as ggml's e8m0_to_fp32_half; E2M1 doubled: 0 1 2 3 4 6 8 12, signed)
    nibbles: byte i holds weight i (low 4 bits) and weight i + 16 (high 4 bits); bit i of qh is weight i's 5th bit.

The 256-weight "K" super-blocks and IQ4_XS live in dequant_k.py. The arithmetic is done in float32
in the same order as gguf.quants (scale products first, then x q, then the offset), so results are
bit-identical to its dequantize.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from haltwise.gguf import dequant_k
from haltwise.gguf.dequant_bits import bits_of_words, f16_column, nibbles

BLOCK_SIZE = 32
# Weights a chunk of ops decodes: its temporaries (4 MB a float32 op) stay in the last-level cache, and op
# dispatch stays small (2^16 took 1.6x as long: 94M weights of the 1.5B 0.35 s -> 0.23 s).
_CHUNK_WEIGHTS = 1 << 20
# IQ4_NL's non-linear 4-bit codebook (shared with IQ4_XS).
IQ4_KVALUES = dequant_k.IQ4_KVALUES


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return f16_column(b, 0) * b[:, 2:].view(torch.int8).float()


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    return f16_column(b, 0) * (nibbles(b[:, 2:]).float() - 8.0)


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    return f16_column(b, 0) * nibbles(b[:, 4:]).float() + f16_column(b, 2)


def _five_bit(qh: torch.Tensor, qs: torch.Tensor) -> torch.Tensor:
    """qh (n, 4) bytes = 32 high bits, qs (n, 16) nibble bytes -> (n, 32) uint8 values 0..31."""
    return nibbles(qs) | (bits_of_words(qh) << 4)


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    return f16_column(b, 0) * (_five_bit(b[:, 2:6], b[:, 6:]).float() - 16.0)


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    return f16_column(b, 0) * _five_bit(b[:, 4:8], b[:, 8:]).float() + f16_column(b, 2)


def _iq4_nl(b: torch.Tensor) -> torch.Tensor:
    return f16_column(b, 0) * IQ4_KVALUES[nibbles(b[:, 2:]).long()]


# MXFP4's e2m1 values, doubled (the half goes into the scale), by 4-bit code.
MXFP4_VALUES = torch.tensor([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=torch.float32)


def _mxfp4(b: torch.Tensor) -> torch.Tensor:
    e = b[:, :1].to(torch.int32)                                            # (n, 1)
    bits = torch.where(e < 2, torch.tensor(0x00200000, dtype=torch.int32) << e, (e - 1) << 23)
    return bits.view(torch.float32) * MXFP4_VALUES[nibbles(b[:, 1:]).long()]


# qtype -> decoder of (n_blocks, type_size) uint8 -> (n_blocks, block_elems) float32
_DECODERS: dict[Q, Callable[[torch.Tensor], torch.Tensor]] = {
    Q.Q8_0: _q8_0, Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q5_0: _q5_0, Q.Q5_1: _q5_1, Q.IQ4_NL: _iq4_nl, Q.MXFP4: _mxfp4,
    **dequant_k.DECODERS,
}
_PLAIN = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}
SUPPORTED_TYPES = frozenset(_PLAIN) | frozenset(_DECODERS)


class UnsupportedQuantization(ValueError):
    """A GGML type this module cannot decode; the message names the type (callers add the tensor)."""


def row_bytes(qtype: Q, row_elems: int) -> int:
    """Bytes one row of `row_elems` weights takes in `qtype` (row_elems a multiple of the block size)."""
    block, size = GGML_QUANT_SIZES[qtype]
    if row_elems % block:
        raise UnsupportedQuantization(f"{qtype.name} rows must hold a multiple of {block} weights, got {row_elems}")
    return row_elems // block * size


def dequantize_blocks(blocks: torch.Tensor, qtype: Q) -> torch.Tensor:
    """(n_blocks, type_size) uint8 -> (n_blocks, block_elems) float32."""
    if qtype not in _DECODERS:
        raise UnsupportedQuantization(f"unsupported GGML type {qtype.name} (supported: "
                                      f"{', '.join(sorted(t.name for t in SUPPORTED_TYPES))})")
    return _DECODERS[qtype](blocks)


def dequantize(raw: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> torch.Tensor:
    """Decode one tensor's data into a float32 tensor of `shape` (numpy / torch order).

    raw: the tensor's bytes as the file stores them (any dtype; only the bytes are used).
    Raises UnsupportedQuantization (a ValueError) for types outside SUPPORTED_TYPES.
    """
    data = torch.from_numpy(np.ascontiguousarray(raw).reshape(-1).view(np.uint8).copy())  # (nbytes,)
    if qtype in _PLAIN:
        return data.view(_PLAIN[qtype]).float().reshape(shape)
    if qtype not in _DECODERS:
        dequantize_blocks(data[:0].view(0, 1), qtype)                   # raises, naming the type
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = data.view(-1, size)                                        # (n_blocks, bytes)
    out = torch.empty(blocks.shape[0], block)                           # (n_blocks, block_elems)
    step = max(1, _CHUNK_WEIGHTS // block)
    for start in range(0, blocks.shape[0], step):
        out[start:start + step] = dequantize_blocks(blocks[start:start + step], qtype)
    return out.reshape(shape)
