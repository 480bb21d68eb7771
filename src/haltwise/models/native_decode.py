"""The native decode path: every decoder layer of a decode-only step in one C++ call.

`kernels/native/csrc/decode_stack.cpp` runs the layers of models/llama.py (norms, fused q/k/v, q/k head
norms, RoPE, KV write, paged attention read in place, gated MLP, sandwich norms, sliding windows, local
RoPE) on float32 activations, with each linear in the format the kernel plan chose for the step's row
bucket: raw GGUF blocks (gguf-q8-native) or float32. It is used only under --dtype auto (the plan's
dtype), for steps where every row is a decode and the bucket's formats are ones it runs; anything else
(prefill chunks, mixed steps, a bucket planned for another format) takes the Python layers, which stay
the reference it is tested against (tests/models/test_native_decode.py).
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from haltwise.kernels.plan import BUCKETS, bucket_index
from haltwise.kernels.planned_linear import PlannedLinear

log = logging.getLogger("haltwise.models")
NATIVE, DENSE = "gguf-q8-native", "float32"
ACTIVATIONS = {"silu": 0, "gelu_pytorch_tanh": 1}


class NativeDecode:
    def __init__(self, stack, bucket_ok: list[bool]) -> None:
        self.stack = stack
        self.bucket_ok = bucket_ok          # per plan bucket: every linear runs a format the stack runs

    @classmethod
    def build(cls, model: nn.Module, isa: str = "auto") -> tuple["NativeDecode | None", str]:
        """(path, "") for a planned LlamaModel, or (None, why not). isa: "auto" (the widest this CPU
        runs) or one of the extension's isas(), for tests."""
        from haltwise.kernels.native import build

        module = build.load()
        if module is None:
            return None, build.failure() or "native kernels unavailable"
        first = model.layers[0]
        attn, mlp = first.self_attn, first.mlp
        act = ACTIVATIONS.get(mlp.hidden_act)
        if act is None:
            return None, f"activation {mlp.hidden_act!r} has no native kernel"
        if attn.head_dim % 8 or model.norm.weight.shape[0] % 8:
            return None, "head_dim and hidden size must be multiples of 8"
        linears = [(layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj)
                   for layer in model.layers]
        if not all(isinstance(l, PlannedLinear) for group in linears for l in group):
            return None, "the linears are not planned (only --dtype auto plans them)"
        if any(p.dtype != torch.float32 for p in model.parameters()):
            return None, "the weights are not float32"
        bucket_ok = [all(l.bucket_formats[b] in (NATIVE, DENSE) for group in linears for l in group)
                     for b in range(len(BUCKETS))]
        if not any(bucket_ok):
            return None, "no row bucket's linears all run natively or in float32"
        stack = module.DecodeStack(attn.num_heads, attn.num_kv_heads, attn.head_dim, model.norm.weight.shape[0],
                                   mlp.intermediate_size, first.input_layernorm.eps, first.input_layernorm.plus_one,
                                   act, first.sandwich, isa)
        for layer, group in zip(model.layers, linears, strict=True):
            norms = [layer.input_layernorm, layer.post_attention_layernorm]
            if layer.sandwich:
                norms += [layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm]
            a = layer.self_attn
            qk = [a.q_norm.weight, a.k_norm.weight] if a.qk_norm else []
            stack.add_layer([n.weight for n in norms], qk, a.window or 0, layer.local_rope, a.scale)
            for slot, linear in enumerate(group):
                _set_linear(stack, slot, linear)
        return cls(stack, bucket_ok), ""

    def buckets(self) -> list[int]:
        return [rows for rows, ok in zip(BUCKETS, self.bucket_ok) if ok]

    def handles(self, meta, rows: int) -> bool:
        return meta.only_decodes and rows <= BUCKETS[-2] and self.bucket_ok[bucket_index(rows)]

    def run(self, h: torch.Tensor, rope, local, kv_caches, meta) -> torch.Tensor:
        """h (T, hidden) after the embedding -> after the last layer (before the final norm)."""
        T = h.shape[0]
        cos, sin = (t.reshape(T, -1).contiguous() for t in rope)
        cos_l, sin_l = (t.reshape(T, -1).contiguous() for t in local) if local is not None else (cos, sin)
        return self.stack.forward(h.contiguous(), bucket_index(T), cos, sin, cos_l, sin_l,
                                  [k for k, _ in kv_caches], [v for _, v in kv_caches], meta.slot_mapping,
                                  meta.block_tables, torch.tensor(meta.seq_lens, dtype=torch.long))


def _set_linear(stack, slot: int, linear: PlannedLinear) -> None:
    native = next((p for f, p in linear._by_bucket if f.name == NATIVE), None)
    dense = next((p for f, p in linear._by_bucket if f.name == DENSE), None)
    empty = torch.empty(0)
    stack.set_linear(slot, native.weights if native else [], native.qtypes if native else [],
                     native.rows if native else [], dense if dense is not None else empty,
                     linear.bias if linear.bias is not None else empty,
                     [f.name == NATIVE for f, _ in linear._by_bucket], linear.out_features, linear.in_features)
