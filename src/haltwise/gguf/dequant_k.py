"""GGML 256-weight super-block formats ("K-quants") and IQ4_XS -> float32, vectorised over blocks.

Each super-block holds 256 weights in sub-blocks that carry their own small integer scale (and for
Q2_K/Q4_K/Q5_K a min), multiplied by the block's float16 `d` (and `dmin`):

    Q2_K  84 bytes: [scales: 16 (4-bit scale | 4-bit min)][qs: 64, 2 bits][d][dmin]   16 x 16 weights
                    w = (d * sc) * q - (dmin * m)
    Q3_K 110 bytes: [hmask: 32, 3rd bit][qs: 64, 2 bits][scales: 12, 6-bit signed][d]  16 x 16
                    w = (d * (sc - 32)) * (q - 4 * (1 - h))
    Q4_K 144 bytes: [d][dmin][scales: 12, 6-bit scale + 6-bit min][qs: 128, 4 bits]  8 x 32
                    w = (d * sc) * q - (dmin * m)
    Q5_K 176 bytes: Q4_K's header, [qh: 32, 5th bit][qs: 128]                          8 x 32
    Q6_K 210 bytes: [ql: 128, 4 bits][qh: 64, 2 bits][scales: 16 x int8][d]           16 x 16
                    w = (d * sc) * (q - 32)
    IQ4_XS 136 bytes: [d][scales_h: u16, 2 bits each][scales_l: 4, nibbles][qs: 128]   8 x 32
                    w = (d * (sc - 32)) * KVALUES[q]

Products are formed in the order gguf.quants forms them, so results are bit-identical.
"""
from __future__ import annotations

from typing import Callable

import torch
from gguf import GGMLQuantizationType as Q

from haltwise.gguf.dequant_bits import f16_column, split_bits

IQ4_KVALUES = torch.tensor([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                           dtype=torch.float32)


def _scale_min_6bit(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K's 12 packed bytes -> (scales, mins), each (n, 8) uint8 in 0..63.

    Bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for
    mins; bytes 8-11 the low 4 bits of scale 4+i (low nibble) and min 4+i (high nibble).
    """
    s = scales.view(-1, 3, 4)
    sc_lo, mn_lo, mixed = s[:, 0], s[:, 1], s[:, 2]                             # (n, 4) each
    sc = torch.cat([sc_lo & 0x3F, (mixed & 0x0F) | ((sc_lo >> 2) & 0x30)], dim=1)
    mn = torch.cat([mn_lo & 0x3F, (mixed >> 4) | ((mn_lo >> 2) & 0x30)], dim=1)
    return sc, mn


def _q2_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    scales, qs = b[:, :16], b[:, 16:80]
    d, dmin = f16_column(b, 80), f16_column(b, 82)                             # (n, 1)
    dl = (d * (scales & 0x0F).float()).view(n, 16, 1)
    ml = (dmin * (scales >> 4).float()).view(n, 16, 1)
    q = split_bits(qs.reshape(n, 2, 32), 2).reshape(n, 16, 16).float()        # (n, 16 sub-blocks, 16)
    return (dl * q - ml).reshape(n, 256)


def _q3_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    hmask, qs, scales, d = b[:, :32], b[:, 32:96], b[:, 96:108], f16_column(b, 108)
    low = split_bits(scales[:, :8], 4).reshape(n, 16)                          # low 4 bits of the 16 scales
    high = split_bits(scales[:, 8:], 2).reshape(n, 16)                         # their top 2 bits
    sc = (low | (high << 4)).float() - 32.0
    dl = (d * sc).view(n, 16, 1)
    ql = split_bits(qs.reshape(n, 2, 32), 2).reshape(n, 16, 16).float()
    qh = split_bits(hmask.reshape(n, 1, 32), 1).reshape(n, 16, 16).float()    # 1 = no offset
    return (dl * (ql - 4.0 * (1.0 - qh))).reshape(n, 256)


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mn = _scale_min_6bit(b[:, 4:16])
    dd = (f16_column(b, 0) * sc.float()).view(n, 8, 1)
    dm = (f16_column(b, 2) * mn.float()).view(n, 8, 1)
    q = split_bits(b[:, 16:].reshape(n, 4, 32), 4).reshape(n, 8, 32).float()   # (n, 8 sub-blocks, 32)
    return (dd * q - dm).reshape(n, 256)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mn = _scale_min_6bit(b[:, 4:16])
    dd = (f16_column(b, 0) * sc.float()).view(n, 8, 1)
    dm = (f16_column(b, 2) * mn.float()).view(n, 8, 1)
    ql = split_bits(b[:, 48:].reshape(n, 4, 32), 4).reshape(n, 8, 32)
    qh = split_bits(b[:, 16:48].reshape(n, 1, 32), 1).reshape(n, 8, 32)
    return (dd * (ql | (qh << 4)).float() - dm).reshape(n, 256)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    ql, qh, scales = b[:, :128], b[:, 128:192], b[:, 192:208]
    dd = (f16_column(b, 208) * scales.contiguous().view(torch.int8).float()).view(n, 16, 1)
    low = split_bits(ql.reshape(n, 2, 64), 4).reshape(n, 8, 32)
    high = split_bits(qh.reshape(n, 2, 32), 2).reshape(n, 8, 32)
    q = ((low | (high << 4)).float() - 32.0).reshape(n, 16, 16)
    return (dd * q).reshape(n, 256)


def _iq4_xs(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    scales_l = split_bits(b[:, 4:8], 4).transpose(1, 2).reshape(n, 8)          # byte i: sub-blocks 2i, 2i+1
    word = b[:, 2].int() | (b[:, 3].int() << 8)                                # (n,) 16 bits, 2 per sub-block
    scales_h = (word[:, None] >> torch.arange(0, 16, 2, dtype=torch.int32)) & 3  # (n, 8)
    sc = (scales_l.int() | (scales_h << 4)).float() - 32.0
    dl = (f16_column(b, 0) * sc).view(n, 8, 1)
    q = split_bits(b[:, 8:].reshape(n, 8, 16), 4).reshape(n, 8, 32)
    return (dl * IQ4_KVALUES[q.long()]).reshape(n, 256)


DECODERS: dict[Q, Callable[[torch.Tensor], torch.Tensor]] = {
    Q.Q2_K: _q2_k, Q.Q3_K: _q3_k, Q.Q4_K: _q4_k, Q.Q5_K: _q5_k, Q.Q6_K: _q6_k, Q.IQ4_XS: _iq4_xs,
}
