"""Each supported GGML type decodes bit-identically to gguf.quants.dequantize."""
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import quants

from haltwise.models.dequant import dequantize

SHAPE = (6, 96)  # 96 = 3 blocks of 32 per row


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_matches_gguf_oracle(qtype):
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


def test_q4_1_nibble_order_by_hand():
    # d = 1, m = -2; byte i holds weight i (low nibble) and weight i + 16 (high nibble).
    header = np.array([1.0, -2.0], dtype=np.float16).view(np.uint8)
    qs = np.array([i | ((15 - i) << 4) for i in range(16)], dtype=np.uint8)
    block = np.concatenate([header, qs])[None, :]            # (1, 20)
    out = dequantize(block, Q.Q4_1, (32,))
    expected = [i - 2.0 for i in range(16)] + [15 - i - 2.0 for i in range(16)]
    assert out.tolist() == expected


def test_q8_0_signed_by_hand():
    block = np.concatenate([np.array([0.5], dtype=np.float16).view(np.uint8),
                            np.arange(-16, 16, dtype=np.int8).view(np.uint8)])[None, :]
    assert dequantize(block, Q.Q8_0, (1, 32)).tolist() == [[0.5 * v for v in range(-16, 16)]]


def test_unsupported_type_raises():
    with pytest.raises(ValueError, match="Q5_0"):
        dequantize(np.zeros((1, 22), np.uint8), Q.Q5_0, (32,))
