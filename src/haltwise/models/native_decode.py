"""The native layer stack: every decoder layer of a step in one C++ call.

`kernels/native/csrc/decode_stack.cpp` runs the layers of models/llama.py (norms, fused q/k/v, q/k head
norms, RoPE, KV write, paged attention read in place, gated MLP, sandwich norms, sliding windows, local
RoPE) on float32 activations, with each linear in the format the kernel plan chose for the step's row
bucket: raw GGUF blocks (gguf-q8-native) or a float32 weight (one fixed-order dot per output). It runs
only under --dtype auto (the plan's dtype):
  * every_step (the batch-invariant default): EVERY step -- prefill chunks, mixed steps, decodes -- so a
    token's computation is one batch-invariant routine whichever step it lands in (decode_stack.cpp states
    the invariant). It needs each linear in one format at every bucket, and lm_head batch invariant too.
  * otherwise: decode-only steps of up to 64 rows whose bucket's formats it runs; the rest take the
    Python layers.
Mixture-of-experts layers (qwen3moe, qwen2moe, gpt-oss: models/moe.py) run as a native MoE block
(csrc/moe_block.cpp): the router (gpt-oss's biased top-k-then-softmax too), the experts' linears in their
planned formats (an expert of n rows runs the format of n's bucket, as its PlannedLinear would; gpt-oss's
biases and clamped GLU) and the combine in ascending expert index. gpt-oss's attention sinks join each
head's softmax in the native attention (decode_math.inc attend_t).
The Python layers stay the float32 reference it is tested against (tests/models/test_native_decode.py).
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from haltwise.kernels.plan import BUCKETS, bucket_index
from haltwise.kernels.planned_linear import PlannedLinear
from haltwise.models.moe import ClampedGluExpert, SparseMoE

log = logging.getLogger("haltwise.models")
NATIVE, DENSE = "gguf-q8-native", ("float32", "float32-native")   # formats the stack runs
ACTIVATIONS = {"silu": 0, "gelu_pytorch_tanh": 1}
CLAMPED_GLU = -1         # gpt-oss's experts (ClampedGluExpert): MoeBlock.set_clamped_glu; the constructors get 0


class NativeDecode:
    def __init__(self, stack, bucket_ok: list[bool], every_step: bool = False) -> None:
        self.stack = stack
        self.bucket_ok = bucket_ok          # per plan bucket: every linear runs a format the stack runs
        self.every_step = every_step        # runs every step (module docstring)

    @classmethod
    def build(cls, model: nn.Module, isa: str = "auto", every_step: bool = False,
              head: nn.Module | None = None) -> tuple["NativeDecode | None", str]:
        """(path, "") for a planned LlamaModel, or (None, why not). isa: "auto" (the widest this CPU
        runs) or one of the extension's isas(), for tests. every_step: run every step when the plan
        allows it (one format per linear, `head` -- the lm_head -- batch invariant); else decode-only steps."""
        from haltwise.kernels.native import build

        module = build.load()
        if module is None:
            return None, build.failure() or "native kernels unavailable"
        if any(layer.self_attn.softcap for layer in model.layers):
            return None, "attention soft-capping (gemma2) runs in Python (models/row_attention.py): the native " \
                         "stack has no soft-capped attention"
        first = model.layers[0]
        attn = first.self_attn
        mlps = [m for layer in model.layers for m in _mlps(layer.mlp)]
        act = CLAMPED_GLU if isinstance(mlps[0], ClampedGluExpert) else ACTIVATIONS.get(mlps[0].hidden_act)
        if act is None:
            return None, f"activation {mlps[0].hidden_act!r} has no native kernel"
        if attn.head_dim % 8 or model.norm.weight.shape[0] % 8:
            return None, "head_dim and hidden size must be multiples of 8"
        attention = [(layer.self_attn.qkv_proj, layer.self_attn.o_proj) for layer in model.layers]
        linears = attention + [(m.gate_up_proj, m.down_proj) for m in mlps]
        if not all(isinstance(l, PlannedLinear) for group in linears for l in group):
            return None, "the linears are not planned (only --dtype auto plans them)"
        if any(p.dtype != torch.float32 for p in model.parameters()):
            return None, "the weights are not float32"
        # a routed expert of n rows runs bucket(n) <= the step's: a step's bucket needs theirs up to it
        routed = [(m.gate_up_proj, m.down_proj) for layer in model.layers if _is_moe(layer.mlp)
                  for m in layer.mlp.experts]
        bucket_ok = [_runs(linears, b) and all(_runs(routed, c) for c in range(b)) for b in range(len(BUCKETS))]
        every_step = every_step and all(bucket_ok) and _one_format(linears) and _invariant_head(head)
        if not any(bucket_ok):
            return None, "no row bucket's linears all run natively or in float32"
        dense = [layer.mlp.intermediate_size for layer in model.layers if not _is_moe(layer.mlp)]
        stack = module.DecodeStack(attn.num_heads, attn.num_kv_heads, attn.head_dim, model.norm.weight.shape[0],
                                   max(dense, default=0), first.input_layernorm.eps, first.input_layernorm.plus_one,
                                   max(act, 0), first.sandwich, isa)
        if attn.rotary_dim is not None:         # partial rotary (phi3): the tables still hold head_dim values
            stack.set_rotary_dim(attn.rotary_dim)
        for layer, group in zip(model.layers, attention, strict=True):
            norms = [layer.input_layernorm, layer.post_attention_layernorm]
            if layer.sandwich:
                norms += [layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm]
            a = layer.self_attn
            qk = [a.q_norm.weight, a.k_norm.weight] if a.qk_norm else []
            sinks = a.sinks.weight.detach() if a.sinks is not None else torch.empty(0)
            stack.add_layer([n.weight for n in norms], qk, a.window or 0, layer.local_rope, a.scale, sinks)
            for slot, linear in enumerate(group):
                stack.set_linear(slot, *_linear_args(linear))
            if _is_moe(layer.mlp):
                stack.set_moe(moe_block(module, layer.mlp, act, isa))
            else:
                for slot, linear in enumerate((layer.mlp.gate_up_proj, layer.mlp.down_proj), start=2):
                    stack.set_linear(slot, *_linear_args(linear))
        return cls(stack, bucket_ok, every_step), ""

    def buckets(self) -> list[int]:
        return [rows for rows, ok in zip(BUCKETS, self.bucket_ok) if ok]

    def describe(self) -> str:
        if self.every_step:
            return "every step (batch invariant: a row's tokens never depend on its batch)"
        return f"decode-only steps of row buckets {self.buckets()}"

    def handles(self, meta, rows: int) -> bool:
        if self.every_step:
            return True
        return meta.only_decodes and rows <= BUCKETS[-2] and self.bucket_ok[bucket_index(rows)]

    def run(self, h: torch.Tensor, rope, local, kv_caches, meta, positions: torch.Tensor) -> torch.Tensor:
        """h (T, hidden) after the embedding -> after the last layer (before the final norm).

        Each row is one token: its own block table (its sequence's) and context length (position + 1).
        """
        T = h.shape[0]
        cos, sin = (t.reshape(T, -1).contiguous() for t in rope)
        cos_l, sin_l = (t.reshape(T, -1).contiguous() for t in local) if local is not None else (cos, sin)
        tables = _row_tables(meta)
        # The sliding layers' own pool, if any (engine/window_blocks.py); else they share the main one.
        window = meta.window
        window_slots, window_tables = ((meta.slot_mapping, tables) if window is None
                                       else (window.slot_mapping, _row_tables(window)))
        return self.stack.forward(h.contiguous(), bucket_index(T), cos, sin, cos_l, sin_l,
                                  [k for k, _ in kv_caches], [v for _, v in kv_caches], meta.slot_mapping, tables,
                                  window_slots, window_tables, (positions + 1).to(torch.long).contiguous())


def _row_tables(meta) -> torch.Tensor:
    """(T, nb): each row's block table (a prefill chunk's rows share their sequence's)."""
    if meta.only_decodes:
        return meta.block_tables.contiguous()
    return meta.block_tables.repeat_interleave(torch.tensor(meta.query_lens), dim=0).contiguous()


def _one_format(linears) -> bool:
    return all(len(set(l.bucket_formats)) == 1 for group in linears for l in group)


def _invariant_head(head: nn.Module | None) -> bool:
    """lm_head runs batch-invariant formats at every bucket (it runs outside the stack)."""
    return isinstance(head, PlannedLinear) and all(head.by_bucket(b)[0].batch_invariant for b in range(len(BUCKETS)))


def _runs(linears, bucket: int) -> bool:
    """Every linear runs a format the stack runs at `bucket`."""
    return all(l.bucket_formats[bucket] in (NATIVE, *DENSE) for group in linears for l in group)


def _is_moe(mlp: nn.Module) -> bool:
    return isinstance(mlp, SparseMoE)


def _mlps(mlp: nn.Module) -> list[nn.Module]:
    """The gated MLPs a layer's MLP runs: itself, or its experts (and shared expert)."""
    if not _is_moe(mlp):
        return [mlp]
    return [*mlp.experts, *([mlp.shared_expert] if mlp.shared_expert is not None else [])]


def moe_block(module, moe: SparseMoE, act: int, isa: str = "auto"):
    """The native MoeBlock (csrc/moe_block.cpp) of one SparseMoE: its router, experts and shared expert."""
    hidden = moe.gate.weight.shape[1]
    block = module.MoeBlock(hidden, len(moe.experts), moe.top_k, moe.norm_topk_prob, max(act, 0), list(BUCKETS), isa)
    shared_gate = moe.shared_expert_gate.weight.detach() if moe.shared_expert is not None else torch.empty(0)
    bias = moe.gate.bias.detach() if moe.gate.bias is not None else torch.empty(0)
    block.set_router(moe.gate.weight.detach(), shared_gate, bias, moe.topk_first)
    if act == CLAMPED_GLU:
        block.set_clamped_glu(moe.experts[0].alpha, moe.experts[0].limit)
    for e, expert in enumerate(_mlps(moe)):
        for slot, linear in enumerate((expert.gate_up_proj, expert.down_proj)):
            block.set_expert(e, slot, *_linear_args(linear))
    return block


def _linear_args(linear: PlannedLinear) -> tuple:
    """set_linear's arguments after the slot: the linear's native shards and/or float32 weight, per bucket."""
    native = next((p for f, p in linear._by_bucket if f.name == NATIVE), None)
    dense = next((p for f, p in linear._by_bucket if f.name in DENSE), None)
    empty = torch.empty(0)
    return (native.weights if native else [], native.qtypes if native else [], native.rows if native else [],
            dense if dense is not None else empty, linear.bias if linear.bias is not None else empty,
            [f.name == NATIVE for f, _ in linear._by_bucket], linear.out_features, linear.in_features)
