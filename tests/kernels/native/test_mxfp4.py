"""MXFP4 blocks in the native kernels (csrc/quant_kernels.h states the arithmetic): gpt-oss's expert format.

The doubled e2m1 values are integers, so each block's dot with the q8 activations is an exact integer sum,
scaled by x_d * 2^(e - 128) and added block after block with the same float operations on every ISA path:
every path gives the scalar path's bits, and those are the dequantized weights times the q8 activations
up to float32 rounding of the block sums. A row's outputs are the same bits alone and in any batch.
"""
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import quants

from haltwise.gguf.dequant import dequantize
from haltwise.kernels.native import build
from tests.kernels.native.blocks import quantize_q8

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason=f"native kernels unavailable: {build.failure()}")
MXFP4 = int(Q.MXFP4)


def mxfp4_blocks(rows: int, cols: int, rng: np.random.Generator, exponents: bool = True) -> np.ndarray:
    """(rows, cols / 32 * 17) uint8: gguf-py's MXFP4 quantization of Gaussian weights; exponents: each
    block's e8m0 byte then redrawn over 0-254 (the subnormal scales 2^-128, 2^-127 and the largest ones)."""
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    data = quants.quantize(w, Q.MXFP4).reshape(rows, cols // 32, 17)
    if exponents:
        data[:, :, 0] = rng.choice(np.r_[0, 1, 2, 100:140, 250:255], size=data.shape[:2]).astype(np.uint8)
    return np.ascontiguousarray(data.reshape(rows, -1))


def values(blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return dequantize(blocks, Q.MXFP4, (rows, cols)).double().numpy()


@pytest.mark.parametrize("rows,cols", [(8, 32), (37, 96), (64, 2880 // 10)])
def test_every_path_has_the_scalar_bits_and_the_dequantized_product(rows, cols):
    rng = np.random.default_rng(rows + cols)
    blocks = mxfp4_blocks(rows, cols, rng, exponents=False)
    weight = values(blocks, rows, cols)
    for m in (1, 2, 3, 5, 17):
        x = torch.from_numpy(rng.standard_normal((m, cols)).astype(np.float32))
        x[:, 1] *= 40.0                                              # an outlier: products of +-12 x +-127
        reference = native.gemm([torch.from_numpy(blocks)], [MXFP4], [rows], x, "scalar")
        for isa in native.isas():
            out = native.gemm([torch.from_numpy(blocks)], [MXFP4], [rows], x, isa)
            assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), (isa, m)
        exact = quantize_q8(x.numpy()).astype(np.float64) @ weight.T
        bound = 1e-6 * (np.abs(quantize_q8(x.numpy())).astype(np.float64) @ np.abs(weight).T) + 1e-30
        assert (np.abs(reference.double().numpy() - exact) <= bound).all(), m


def test_extreme_scales_and_codes_keep_the_bits():
    """Exponent bytes from the subnormal 2^-128 to 2^112 (sums stay finite), codes +-12 against activations of
    +-127: the largest products a block sums."""
    rng = np.random.default_rng(5)
    rows, cols = 16, 256
    blocks = mxfp4_blocks(rows, cols, rng).reshape(rows, cols // 32, 17)
    blocks[::2, :, 1:] = 0x77                                       # +12 in both nibbles
    blocks[1::2, :, 1:] = 0xFF                                      # -12
    blocks[:, :, 0] = np.minimum(blocks[:, :, 0], 240)
    blocks = np.ascontiguousarray(blocks.reshape(rows, -1))
    x = torch.ones(5, cols)
    x[1::2] = -1.0
    reference = native.gemm([torch.from_numpy(blocks)], [MXFP4], [rows], x, "scalar")
    assert torch.isfinite(reference).all()
    for isa in native.isas():
        out = native.gemm([torch.from_numpy(blocks)], [MXFP4], [rows], x, isa)
        assert torch.equal(out.view(torch.int32), reference.view(torch.int32)), isa
    exact = x.double().numpy() @ values(blocks, rows, cols).T
    assert np.allclose(reference.double().numpy(), exact, rtol=1e-6, atol=0)


def test_a_row_is_the_same_bits_alone_and_in_any_batch():
    rng = np.random.default_rng(9)
    rows, cols = 40, 128
    weights = [torch.from_numpy(mxfp4_blocks(rows, cols, rng, exponents=False))]
    x = torch.from_numpy(rng.standard_normal((33, cols)).astype(np.float32))
    for isa in native.isas():
        together = native.gemm(weights, [MXFP4], [rows], x, isa)
        for i in (0, 5, 32):
            assert torch.equal(native.gemm(weights, [MXFP4], [rows], x[i:i + 1], isa)[0], together[i]), (isa, i)
        assert torch.equal(native.gemm(weights, [MXFP4], [rows], x[3:20], isa), together[3:20]), isa
