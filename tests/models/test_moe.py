"""models/moe.py: routing as the config says, experts combined in expert order, rows independent of their step."""
import pytest
import torch

from haltwise.config import ModelConfig
from haltwise.kernels.native.dense_format import Float32Native
from haltwise.kernels.plan import BUCKETS
from haltwise.kernels.planned_linear import PlannedLinear, linear_sources
from haltwise.models.llama import MLP
from haltwise.models.moe import RowLocalLinear, SparseMoE

CONFIG = ModelConfig(vocab_size=32, hidden_size=64, intermediate_size=96, num_layers=1, num_heads=4, num_kv_heads=2,
                     head_dim=16, max_position_embeddings=64, architecture="qwen3moe", num_experts=8,
                     num_experts_per_tok=3, moe_intermediate_size=32, norm_topk_prob=True)


def moe(config=CONFIG, seed=0) -> SparseMoE:
    torch.manual_seed(seed)
    layer = SparseMoE(config, MLP)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * (1.0 if p.ndim == 2 and p.shape[0] == config.num_experts else 0.1))
    return layer


def reference(layer: SparseMoE, x: torch.Tensor) -> torch.Tensor:
    """One token at a time, the textbook formula: sum_e p_e * expert_e(x), experts ascending."""
    out = []
    for row in x:
        probs = torch.softmax(row @ layer.gate.weight.T, -1)
        top, idx = torch.topk(probs, layer.top_k)
        if layer.norm_topk_prob:
            top = top / top.sum()
        order = idx.argsort()
        y = torch.zeros_like(row)
        for w, e in zip(top[order], idx[order]):
            y = y + w * layer.experts[int(e)](row[None])[0]
        if layer.shared_expert is not None:
            y = y + torch.sigmoid(row @ layer.shared_expert_gate.weight[0]) * layer.shared_expert(row[None])[0]
        out.append(y)
    return torch.stack(out)


@pytest.mark.parametrize("norm", [True, False])
def test_routing_matches_the_formula(norm):
    from dataclasses import replace
    layer = moe(replace(CONFIG, norm_topk_prob=norm))
    x = torch.randn(9, 64)
    weights, experts = layer.route(x)
    assert torch.allclose(weights.sum(-1), torch.ones(9)) == norm
    assert torch.allclose(layer(x), reference(layer, x), atol=1e-5)


def test_shared_expert_is_gated_and_added():
    from dataclasses import replace
    layer = moe(replace(CONFIG, architecture="qwen2moe", shared_expert_intermediate_size=48, norm_topk_prob=False))
    x = torch.randn(5, 64)
    assert torch.allclose(layer(x), reference(layer, x), atol=1e-5)


def planned_as_default(layer: SparseMoE) -> SparseMoE:
    """The experts' linears in the default path's batch-invariant float32 format (the native dense kernel)."""
    formats = {"float32-native": Float32Native()}
    for parent, attr, source in list(linear_sources(layer)):
        setattr(parent, attr, PlannedLinear(source, [["float32-native"]] * len(BUCKETS), formats))
    return layer


def test_a_row_is_bit_identical_alone_and_in_any_batch():
    """The determinism contract at the layer: other rows change which experts run and with how many rows,
    never a row's result (router per row, experts row-local, fixed combine order)."""
    layer = planned_as_default(moe())
    x = torch.randn(40, 64)
    together = layer(x)
    for i in (0, 7, 39):
        assert torch.equal(layer(x[i:i + 1])[0], together[i])
    assert torch.equal(layer(x[5:23])[3], together[8])
    assert torch.equal(layer(x.flip(0))[0], together[-1])


def test_router_is_row_local():
    gate = RowLocalLinear(64, 8)
    with torch.no_grad():
        gate.weight.normal_()
    x = torch.randn(50, 64)
    assert torch.equal(gate(x)[33], gate(x[33:34])[0])
    assert torch.allclose(gate(x), x @ gate.weight.T, atol=1e-5)


class _Constant(torch.nn.Module):
    """An 'expert' whose output is one value everywhere, so the order of a token's sum shows in its bits."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, self.value)


def test_a_tokens_experts_are_summed_in_ascending_expert_index_whatever_their_slot_order():
    """float32: (1e8 + 1) - 1e8 = 0, (-1e8 + 1e8) + 1 = 1. Experts 1, 3, 5 give 1e8, 1, -1e8; every token must
    add them as 1, 3, 5. Named fault: summing a token's k outputs in its pick (slot) order."""
    layer = moe()
    layer.experts = torch.nn.ModuleList(_Constant(v) for v in (0.0, 1e8, 0.0, 1.0, 0.0, -1e8, 0.0, 0.0))
    experts = torch.tensor([[5, 1, 3], [3, 5, 1], [1, 3, 5], [5, 3, 1]])
    out = layer.routed(torch.zeros(4, 64), torch.ones(4, 3), experts)
    assert torch.equal(out, torch.zeros(4, 64))
