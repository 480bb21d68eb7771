"""Step linears: close to the bf16 matmul in every format, int4 only where the weight is on a 4-bit grid."""
import pytest
import torch
import torch.nn.functional as F

from haltwise.config import EngineConfig
from haltwise.models.step_linear import INT4_GROUP, StepLinear, enable_step_linears, int4_on_grid
from haltwise.models.tiny import tiny_llama


def off_grid_weight(rows: int = 96, cols: int = 64) -> torch.nn.Parameter:
    torch.manual_seed(0)
    return torch.nn.Parameter(torch.randn(rows, cols).bfloat16(), requires_grad=False)


def on_grid_weight(rows: int = 96, cols: int = 64) -> torch.nn.Parameter:
    """What a Q4_1 tensor dequantizes to: d * q + m per group of 32, q in 0..15, held in bf16."""
    torch.manual_seed(1)
    groups = cols // INT4_GROUP
    q = torch.randint(0, 16, (rows, groups, INT4_GROUP)).float()
    q[..., 0], q[..., 1] = 0, 15                    # as a quantizer's min and max land on the grid ends
    d = torch.rand(rows, groups, 1) * 0.01 + 1e-3
    m = -torch.rand(rows, groups, 1) * 0.05
    return torch.nn.Parameter((d * q + m).view(rows, cols).bfloat16(), requires_grad=False)


def dequantized_int4(layer: StepLinear) -> torch.Tensor:
    """The int4 copy as a dense (out, in) matrix, read back through the kernel itself."""
    eye = torch.eye(layer.weight.shape[1], dtype=torch.bfloat16)
    packed, scales_and_zeros = layer.int4
    return torch.ops.aten._weight_int4pack_mm_for_cpu(eye, packed, INT4_GROUP, scales_and_zeros).t().float()


@pytest.mark.parametrize("make_weight, small_format", [(off_grid_weight, "int8"), (on_grid_weight, "int4")])
def test_every_path_matches_the_bf16_linear(make_weight, small_format):
    weight = make_weight()
    layer = StepLinear(weight, max_rows=4)
    assert layer.weight_format == small_format
    for rows in (1, 4, 5, 32, 300):
        x = torch.randn(rows, 64).bfloat16()
        exact = F.linear(x.float(), weight.float())
        rel = ((layer(x).float() - exact).norm() / exact.norm()).item()
        assert rel < 0.02, (rows, rel)


def test_int4_copy_reproduces_a_4bit_grid_weight():
    weight = on_grid_weight()
    layer = StepLinear(weight, max_rows=4)
    group_max = weight.float().view(96, -1, INT4_GROUP).abs().amax(-1).repeat_interleave(INT4_GROUP, 1)
    err = (dequantized_int4(layer) - weight.float()).abs()
    assert (err <= group_max * 2.0 ** -7).all()


def test_off_grid_weights_are_not_squeezed_into_int4():
    assert int4_on_grid(off_grid_weight()) is None
    # Moving one element of a grid weight off the grid is enough.
    weight = on_grid_weight().clone()
    weight[3, 5] += (weight[3, :32].max() - weight[3, :32].min()) / 31
    assert int4_on_grid(weight) is None


def test_int8_copy_is_within_half_a_step_per_row():
    layer = StepLinear(off_grid_weight(), max_rows=4)
    q, scales = layer.int8
    assert ((q.float() * scales.float()[:, None] - layer.weight.float()).abs() <= scales.float()[:, None] * 0.5 + 1e-6).all()


def test_no_quantized_copy_when_max_rows_is_zero():
    layer = StepLinear(on_grid_weight(), max_rows=0)
    assert layer.weight_format == "bf16" and layer.int4 is None and layer.int8 is None
    x = torch.randn(1, 64).bfloat16()
    assert torch.allclose(layer(x).float(), F.linear(x, layer.weight).float(), rtol=0.02, atol=0.02)


def test_enable_swaps_every_linear_and_keeps_ties():
    model = tiny_llama(512).to(torch.bfloat16)
    formats = enable_step_linears(model, max_rows=4)
    assert formats == {"int8": 2 * 4 + 1}  # qkv, o, gate_up, down per layer + lm_head; random weights are off-grid
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_refuses_float32_models():
    with pytest.raises(ValueError, match="bfloat16"):
        enable_step_linears(tiny_llama(512), max_rows=4)
    with pytest.raises(ValueError, match="bfloat16"):
        EngineConfig(dtype="float32", quantized_decode_rows=4)


def test_smollm2_q4_1_layers_read_int4_and_its_q8_0_embedding_int8():
    from haltwise.models.loader import default_model_path, load_model

    model = load_model(default_model_path(), dtype="bfloat16").model
    formats = enable_step_linears(model, max_rows=4)
    assert formats == {"int4": 30 * 4, "int8": 1}
    layer = model.model.layers[0].mlp.gate_up_proj
    err = (dequantized_int4(layer) - layer.weight.float()).abs().max()
    assert err <= layer.weight.float().abs().max() * 2.0 ** -7
