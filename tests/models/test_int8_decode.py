"""Int8 decode weights: close to the bf16 matmul, used only for small steps, same engine behaviour."""
import pytest
import torch
import torch.nn.functional as F

from haltwise.config import EngineConfig
from haltwise.models.int8_decode import DualLinear, enable_int8_decode
from haltwise.models.tiny import tiny_llama


def test_dual_linear_matches_bf16_linear_and_switches_by_rows():
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(96, 64).bfloat16(), requires_grad=False)
    layer = DualLinear(weight, max_rows=4)
    for rows in (1, 4, 5, 32):
        x = torch.randn(rows, 64).bfloat16()
        exact = F.linear(x.float(), weight.float())
        got = layer(x).float()
        rel = ((got - exact).norm() / exact.norm()).item()
        assert rel < 0.02, (rows, rel)
        if rows > 4:  # the bf16 path is the plain matmul
            assert torch.equal(layer(x), F.linear(x, weight))
    # The int8 copy reproduces each row to within half of that row's quantization step.
    scales = layer.scales.float()[:, None]
    assert ((layer.qweight.float() * scales - weight.float()).abs() <= scales * 0.5 + 1e-6).all()


def test_enable_swaps_every_linear_and_keeps_ties():
    model = tiny_llama(512).to(torch.bfloat16)
    swapped = enable_int8_decode(model, max_rows=4)
    assert swapped == 2 * 4 + 1  # qkv, o, gate_up, down per layer + lm_head
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_refuses_float32_models():
    with pytest.raises(ValueError, match="bfloat16"):
        enable_int8_decode(tiny_llama(512), max_rows=4)
    with pytest.raises(ValueError, match="bfloat16"):
        EngineConfig(dtype="float32", int8_decode_rows=4)
