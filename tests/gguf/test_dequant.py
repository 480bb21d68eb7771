"""Each supported GGML type decodes bit-identically to gguf.quants.dequantize."""
import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf import quants

from haltwise.gguf.dequant import SUPPORTED_TYPES, UnsupportedQuantization, dequantize, row_bytes

SHAPE = (6, 96)  # 96 = 3 blocks of 32 per row
QUANTIZABLE = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.MXFP4]
# Where every float16 field sits in each block (byte offsets), so random blocks get finite scales.
F16_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.IQ4_NL: [0],
              Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_XS: [0],
              Q.MXFP4: []}                  # its scale is an e8m0 byte: every value is finite


@pytest.mark.parametrize("qtype", QUANTIZABLE)
def test_quantized_data_matches_gguf_oracle(qtype):
    rng = np.random.default_rng(int(qtype))
    data = (rng.standard_normal(SHAPE) * rng.uniform(0.01, 3, size=(SHAPE[0], 1))).astype(np.float32)
    data[0, :32] = 0.0                 # an all-zero block (scale 0)
    data[1, :32] = 0.5                 # a constant block (Q4_1: d = 0, only m)
    raw = quants.quantize(data, qtype)
    expected = quants.dequantize(raw, qtype).astype(np.float32)
    ours = dequantize(raw, qtype, SHAPE)
    assert ours.dtype == torch.float32 and tuple(ours.shape) == SHAPE
    assert torch.equal(ours, torch.from_numpy(expected))
    if qtype == Q.F32:
        assert torch.equal(ours, torch.from_numpy(data))


def random_blocks(qtype: Q, n_blocks: int, seed: int) -> np.ndarray:
    """Random bytes for every bit field, with finite float16 scales of mixed sign and magnitude."""
    rng = np.random.default_rng(seed)
    _, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for offset in F16_FIELDS[qtype]:
        scales = (rng.standard_normal(n_blocks) * 10.0 ** rng.uniform(-4, 1, n_blocks)).astype(np.float16)
        scales[0] = 0.0
        blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks


@pytest.mark.parametrize("qtype", sorted(F16_FIELDS, key=int))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_blocks_match_gguf_oracle(qtype, seed):
    block, _ = GGML_QUANT_SIZES[qtype]
    rows, per_row = 5, 3
    raw = random_blocks(qtype, rows * per_row, seed * 100 + int(qtype)).reshape(rows, -1)   # (rows, row bytes)
    assert raw.shape[1] == row_bytes(qtype, per_row * block)
    expected = quants.dequantize(raw, qtype).astype(np.float32)                           # (rows, row elems)
    ours = dequantize(raw, qtype, (rows, per_row * block))
    assert torch.equal(ours, torch.from_numpy(expected)), qtype.name


def test_every_type_the_issue_names_is_supported():
    named = {Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q5_0, Q.Q5_1, Q.IQ4_NL, Q.IQ4_XS,
             Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.MXFP4}
    assert named <= SUPPORTED_TYPES


def test_q4_1_nibble_order_by_hand():
    # d = 1, m = -2; byte i holds weight i (low nibble) and weight i + 16 (high nibble).
    header = np.array([1.0, -2.0], dtype=np.float16).view(np.uint8)
    qs = np.array([i | ((15 - i) << 4) for i in range(16)], dtype=np.uint8)
    block = np.concatenate([header, qs])[None, :]            # (1, 20)
    out = dequantize(block, Q.Q4_1, (32,))
    expected = [i - 2.0 for i in range(16)] + [15 - i - 2.0 for i in range(16)]
    assert out.tolist() == expected


def test_q5_0_high_bits_by_hand():
    # d = 1; all low nibbles 0; qh has only bit 31 set -> weight 31 is 16 - 16 = 0, every other -16.
    header = np.array([1.0], dtype=np.float16).view(np.uint8)
    qh = np.array([1 << 31], dtype=np.uint32).view(np.uint8)
    block = np.concatenate([header, qh, np.zeros(16, np.uint8)])[None, :]
    assert dequantize(block, Q.Q5_0, (32,)).tolist() == [-16.0] * 31 + [0.0]


def test_q8_0_signed_by_hand():
    block = np.concatenate([np.array([0.5], dtype=np.float16).view(np.uint8),
                            np.arange(-16, 16, dtype=np.int8).view(np.uint8)])[None, :]
    assert dequantize(block, Q.Q8_0, (1, 32)).tolist() == [[0.5 * v for v in range(-16, 16)]]


def test_unsupported_type_raises_naming_it():
    with pytest.raises(UnsupportedQuantization, match="IQ2_XXS"):
        dequantize(np.zeros((1, 66), np.uint8), Q.IQ2_XXS, (256,))
