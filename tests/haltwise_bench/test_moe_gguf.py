"""bench moe's file: Qwen3-30B-A3B's real per-layer shapes, written f16 by the gguf package, then llama-quantize."""
import pytest

from haltwise_bench import moe_gguf
from haltwise_bench.moe_gguf import MoeShape


def test_default_shape_is_qwen3_30b_a3b():
    s = MoeShape()
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim) == (2048, 32, 4, 128)
    assert (s.experts, s.active, s.expert_ffn) == (128, 8, 768)


@pytest.mark.parametrize("bad", [dict(hidden=300), dict(expert_ffn=100), dict(active=0), dict(active=9, experts=8)])
def test_shapes_the_k_quants_cannot_store_are_refused(bad):
    with pytest.raises(ValueError):
        MoeShape(**bad)


def test_the_plan_has_the_real_tensor_shapes_and_keeps_norms_and_router_in_float32(monkeypatch):
    """Named fault: the experts' stacked dims swapped (down as (experts, ffn, hidden)) or the router written f16
    (llama-quantize would then quantize it: haltwise's router is float32 by design)."""
    monkeypatch.setattr(moe_gguf, "vocab_size", lambda: 151936)
    plan = {name: (dims, kind) for name, dims, kind in moe_gguf.tensor_plan(MoeShape(), 2)}
    assert plan["blk.1.attn_q.weight"] == ((4096, 2048), "f16")
    assert plan["blk.1.attn_k.weight"] == ((512, 2048), "f16") == plan["blk.1.attn_v.weight"]
    assert plan["blk.1.attn_output.weight"] == ((2048, 4096), "f16")
    assert plan["blk.0.ffn_gate_exps.weight"] == ((128, 768, 2048), "f16") == plan["blk.0.ffn_up_exps.weight"]
    assert plan["blk.0.ffn_down_exps.weight"] == ((128, 2048, 768), "f16")
    assert plan["blk.0.ffn_gate_inp.weight"] == ((128, 2048), "f32")
    assert plan["blk.0.attn_q_norm.weight"] == ((128,), "ones")
    assert plan["output.weight"] == ((151936, 2048), "f16") == plan["token_embd.weight"]
    assert "blk.2.attn_q.weight" not in plan


def test_values_are_seeded_by_name_so_a_layer_is_the_same_in_every_depth():
    a = moe_gguf.values("blk.0.attn_q.weight", (4, 8), "f16")
    assert (a == moe_gguf.values("blk.0.attn_q.weight", (4, 8), "f16")).all()
    assert not (a == moe_gguf.values("blk.1.attn_q.weight", (4, 8), "f16")).all()
    assert 0.005 < float(abs(moe_gguf.values("x", (64, 64), "f32")).mean()) < 0.05


def test_the_cache_name_covers_the_shape_and_the_depth():
    assert moe_gguf.file_for(MoeShape(), 4) != moe_gguf.file_for(MoeShape(), 1)
    assert moe_gguf.file_for(MoeShape(), 4) != moe_gguf.file_for(MoeShape(experts=64), 4)
    assert moe_gguf.file_for(MoeShape(), 4).name.endswith("-L4-Q4_K_M.gguf")
