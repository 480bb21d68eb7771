"""Random GGUF block matrices and their float32 values, for the native kernel tests.

Q4_0/Q4_1/Q5_0/Q8_0/MXFP4 come from gguf.quants.quantize (the reference converter). gguf-py cannot quantize
the k-quants, so Q4_K/Q6_K rows are random bytes with their f16 scale fields set to small finite
values: every bit pattern of the quantized fields is a valid block, and gguf.quants.dequantize gives
the reference values.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

BLOCK = {Q.Q4_0: (32, 18), Q.Q4_1: (32, 20), Q.Q5_0: (32, 22), Q.Q8_0: (32, 34), Q.Q4_K: (256, 144), Q.Q6_K: (256, 210),
         Q.MXFP4: (32, 17)}
# byte offsets of the f16 fields inside a k-quant block
_F16_FIELDS = {Q.Q4_K: (0, 2), Q.Q6_K: (208,)}


def random_blocks(qtype: Q, rows: int, cols: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(blocks (rows, bytes_per_row) uint8, values (rows, cols) float32 as gguf dequantizes them)."""
    per_block, nbytes = BLOCK[qtype]
    if qtype in _F16_FIELDS:
        nblk = cols // per_block
        raw = rng.integers(0, 256, size=(rows, nblk, nbytes), dtype=np.uint8)
        for off in _F16_FIELDS[qtype]:
            scales = rng.uniform(0.001, 0.02, size=(rows, nblk)).astype(np.float16)
            raw[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, nblk, 2)
        data = raw.reshape(rows, nblk * nbytes)
    else:
        w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
        data = quants.quantize(w, qtype)
    return data, quants.dequantize(data, qtype).astype(np.float32).reshape(rows, cols)


def quantize_q8(x: np.ndarray) -> np.ndarray:
    """The activations as the kernels see them: per 32 inputs, round(x * 127 / max|x|) * max|x| / 127."""
    rows, cols = x.shape
    b = x.reshape(rows, cols // 32, 32).astype(np.float32)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint(b * inv)
    return (q * (amax / np.float32(127))).reshape(rows, cols)
