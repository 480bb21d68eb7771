"""The VNNI paths compute the AVX2 path's bits (csrc/x8_records.inc, kx8_records.inc).

Both paths sum each lane's exact integer products (AVX2 in int16 then int32, VNNI straight into int32;
nothing saturates or wraps) and then run the same float instructions, so every output is the same bits,
for every X8 record format, every loop order (row counts crossing kSpanRows and kSpan) and ragged groups.
That is what lets the default path take the widest ISA the host has without changing a single token.
Each VNNI path runs where the CPU reports its flags (avx512vnni: avx512f, avx512vl, avx512_vnni;
avxvnni: avx_vnni); elsewhere its cases skip, saying so.
"""
import numpy as np
import pytest
import torch

from haltwise.kernels.native import build
from haltwise.kernels.native.repack import X8, repack_x8
from tests.kernels.native.blocks import BLOCK, random_blocks

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason=f"native kernels unavailable: {build.failure()}")
VNNI_PATHS = {"avx512vnni": "avx512f, avx512vl and avx512_vnni", "avxvnni": "avx_vnni"}
ROW_COUNTS = (1, 2, 3, 4, 5, 8, 9, 16, 17, 64, 65, 70)


def _path_or_skip(path: str) -> None:
    if path not in native.isas():
        pytest.skip(f"this CPU cannot run the {path} path (needs {VNNI_PATHS[path]})")


@pytest.mark.parametrize("path", list(VNNI_PATHS))
@pytest.mark.parametrize("qtype", list(X8), ids=lambda q: q.name)
# 37 weight rows: two pairs of groups of 8, then a ragged single group; 45: the last pair ragged; 136:
# more than one run of groups (x8_pairs_zmm.inc takes pairs from 16 activation rows)
@pytest.mark.parametrize("out_rows", [37, 45, 136])
def test_vnni_gives_the_avx2_bits(qtype, path, out_rows):
    _path_or_skip(path)
    rng = np.random.default_rng(7 + int(qtype))
    cols = 3 * max(BLOCK[qtype][0], 64)
    data, _ = random_blocks(qtype, out_rows, cols, rng)
    packed, code = repack_x8(data, qtype)
    weights = [torch.from_numpy(packed)]
    for m in ROW_COUNTS:
        x = torch.from_numpy(rng.standard_normal((m, cols)).astype(np.float32))
        x[:, 2] *= 50.0                                            # an outlier channel: large int8 products
        a = native.gemm(weights, [code], [out_rows], x, "avx2")
        b = native.gemm(weights, [code], [out_rows], x, path)
        assert torch.equal(a, b), f"{qtype.name}, {m} rows: max |diff| {(a - b).abs().max().item():.3g}"


# Quant bytes set to their extremes, per format: (first byte, last byte + 1, value) within each block.
EXTREMES = {"Q4_0": [(2, 18, 0xFF)], "Q4_1": [(4, 20, 0xFF)], "Q5_0": [(2, 22, 0xFF)],     # 15 / 31 everywhere
            "Q8_0": [(2, 18, 0x80), (18, 34, 0x7F)],                                     # -128 and 127
            "Q4_K": [(16, 144, 0xFF)],                                                   # scales too: 63
            "Q6_K": [(0, 16, 0xFF), (128, 144, 0xFF), (16, 32, 0x00), (144, 160, 0x00)]}  # 31 and -32


@pytest.mark.parametrize("path", list(VNNI_PATHS))
def test_extreme_quants_and_activations_keep_the_bits(path):
    """Quants at their extremes times activations of +-127: the largest products either path sums."""
    _path_or_skip(path)
    for qtype in X8:
        per_block, nbytes = BLOCK[qtype]
        data, _ = random_blocks(qtype, 16, 2 * max(per_block, 64), np.random.default_rng(1))
        blocks = data.copy().reshape(16, -1, nbytes)
        for lo, hi, value in EXTREMES[qtype.name]:
            blocks[:, :, lo:hi] = value
        packed, code = repack_x8(blocks.reshape(16, -1), qtype)
        x = torch.ones(18, blocks.shape[1] * per_block)          # 18 rows: the 512-bit pairs too
        x[1::3] = -1.0
        x[2::3, ::2] = -1.0
        a = native.gemm([torch.from_numpy(packed)], [code], [16], x, "avx2")
        b = native.gemm([torch.from_numpy(packed)], [code], [16], x, path)
        assert torch.isfinite(a).all() and torch.equal(a, b), qtype.name
