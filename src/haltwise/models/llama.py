"""The decoder layers every family shares, over a paged KV cache: Attention -> MLP -> DecoderLayer ->
Model -> ForCausalLM. What a family changes is an ArchOptions entry (architectures.py) plus
per-model numbers in ModelConfig; this file reads those options and never names a family.

Attribute names follow Hugging Face (model.embed_tokens, model.layers[i].self_attn.o_proj, ...), except
that q/k/v and gate/up are stored fused (`qkv_proj`, `gate_up_proj`) so a decode step does one matmul
each. `load_weights` (models/weights.py) accepts Hugging Face names and places q_proj/k_proj/v_proj
(weights and biases) and gate_proj/up_proj into their row slices, so loaders never see the fused layout.
Every projection is a plain nn.Linear (bias where the family has one), so the kernel plan can swap it.

All tokens of a step are one flat batch of T rows (prefill chunks and decodes mixed); AttentionMetadata
says which rows belong to which sequence and where their K/V live.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from haltwise.config import ModelConfig
from haltwise.architectures import ArchOptions, arch_options
from haltwise.models.attention import AttentionMetadata, paged_attention, write_kv
from haltwise.models.moe import SparseMoE
from haltwise.models.rope import RotaryEmbedding, apply_rotary
from haltwise.models.row_attention import AttentionSinks, row_attention
from haltwise.models.weights import WeightLoading

KVCache = tuple[torch.Tensor, torch.Tensor]  # each (num_blocks, block_size, num_kv_heads, head_dim)
RopeTables = tuple[torch.Tensor, torch.Tensor]  # cos, sin: (T, 1, head_dim) for this step's positions
_ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


class RMSNorm(nn.Module):
    """Llama: normalise in float32, scale by w in the input dtype. plus_one (Gemma): scale by (1 + w) in
    float32, then cast (the weight holds w, as in Hugging Face checkpoints)."""

    def __init__(self, dim: int, eps: float, plus_one: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if plus_one else torch.ones(dim))
        self.eps, self.plus_one = eps, plus_one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), self.weight.shape, eps=self.eps)
        if self.plus_one:
            return (normed * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * normed.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, options: ArchOptions) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=options.o_bias)
        self.sinks = AttentionSinks(self.num_heads) if options.attention_sinks else None
        if options.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, options.norm_plus_one)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, options.norm_plus_one)
        self.qk_norm = options.qk_norm
        self.scale = (config.query_pre_attn_scalar or self.head_dim) ** -0.5
        self.window = config.sliding_window if config.is_sliding(layer) else None  # None = full context
        self.rotary_dim = config.rotary_dim            # partial rotary (phi3); None = the whole head
        self.softcap = config.attn_logit_softcapping   # gemma2: scores = cap * tanh(scores / cap); None = off

    def forward(self, x: torch.Tensor, rope: RopeTables, kv_cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        """x: (T, hidden) -> (T, hidden)."""
        T, D, H = x.shape[0], self.head_dim, self.num_heads
        qkv = self.qkv_proj(x)                                                   # (T, q + 2 kv)
        qk = qkv[:, :self.q_size + self.kv_size].view(T, -1, D)                 # (T, H + KV, D)
        if self.qk_norm:
            qk = torch.cat([self.q_norm(qk[:, :H]), self.k_norm(qk[:, H:])], dim=1)
        # q and k heads sit side by side: rotate them as one (T, H + KV, D) tensor.
        qk = apply_rotary(qk, *rope, self.rotary_dim)
        q, k = qk[:, :H], qk[:, H:]                                             # (T, H, D), (T, KV, D)
        v = qkv[:, self.q_size + self.kv_size:].view(T, self.num_kv_heads, D)  # (T, KV, D)
        if self.window is not None and meta.window is not None:
            meta = meta.window                   # this layer's KV lives in the sliding layers' own pool
        write_kv(kv_cache[0], kv_cache[1], k, v, meta.slot_mapping)
        if self.softcap or self.sinks is not None:
            out = row_attention(q, kv_cache[0], kv_cache[1], meta, self.scale, self.softcap, self.window,
                                None if self.sinks is None else self.sinks.weight)
        else:
            out = paged_attention(q, kv_cache[0], kv_cache[1], meta, self.scale, k=k, v=v, window=self.window)
        return self.o_proj(out.reshape(T, self.q_size).to(x.dtype))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig, intermediate_size: int | None = None) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size or config.intermediate_size     # an expert's own width
        self.hidden_act = config.hidden_act
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, config.hidden_size, bias=False)
        self.act = _ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)   # (T, I) each
        return self.down_proj(self.act(gate) * up)


class DecoderLayer(nn.Module):
    """Llama: h += attn(norm(h)); h += mlp(norm(h)). sandwich_norms (Gemma) also norms each output:
    h += post_attention_norm(attn(input_norm(h))); h += post_ff_norm(mlp(pre_ff_norm(h)))."""

    def __init__(self, config: ModelConfig, layer: int, options: ArchOptions) -> None:
        super().__init__()
        norm = lambda: RMSNorm(config.hidden_size, config.rms_norm_eps, options.norm_plus_one)  # noqa: E731
        self.self_attn = Attention(config, layer, options)
        self.mlp = SparseMoE(config, MLP) if config.is_moe(layer) else MLP(config)
        self.input_layernorm = norm()
        self.post_attention_layernorm = norm()      # Llama: the pre-MLP norm; Gemma: the attention output's
        self.sandwich = options.sandwich_norms
        if self.sandwich:
            self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()
        # The layer's second rope table: the sliding layers' own base (gemma3), or none at all (smollm3).
        self.local_rope = (config.is_sliding(layer) and config.rope_local_theta is not None) \
            or layer in config.no_rope_layers

    def forward(self, x: torch.Tensor, rope: RopeTables, kv_cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(x), rope, kv_cache, meta)
        if not self.sandwich:
            h = x + attn
            return h + self.mlp(self.post_attention_layernorm(h))
        h = x + self.post_attention_layernorm(attn)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, max_model_len: int) -> None:
        super().__init__()
        options = arch_options(config)
        # Every parameter is set later (the loader, tiny_llama): `_weight` skips nn.init, whose first call
        # imports torch._dynamo (~2 s of every start).
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         _weight=torch.empty(config.vocab_size, config.hidden_size))
        self.embed_scale = config.hidden_size ** 0.5 if options.scale_embeddings else None
        self.layers = nn.ModuleList(DecoderLayer(config, i, options) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, options.norm_plus_one)
        self.native_decode = None   # models/native_decode.py: set under --dtype auto when the kernels load
        self.layers_run = 0         # Python layers run since construction (progress(): the watchdog's evidence)
        self.build_rope(config, max_model_len)

    def progress(self) -> int:
        """A counter that grows while a forward computes: per layer on the Python path, per layer and per
        attention in the native stack. Any thread may read it during a forward (the stack frees the GIL)."""
        native = self.native_decode
        return self.layers_run + (native.stack.beats if native is not None else 0)

    def build_rope(self, config: ModelConfig, max_model_len: int) -> None:
        """(Re)compute the rope tables: the global layers', and the sliding layers' own where they differ.

        Always on the CPU, even while the loader builds the model on the meta device: math on meta tensors
        imports torch._dynamo (~2 s of every start)."""
        with torch.device("cpu"):
            self._build_rope(config, max_model_len)

    def _build_rope(self, config: ModelConfig, max_model_len: int) -> None:
        self.rotary_emb = RotaryEmbedding.for_config(config, max_model_len)
        self.rotary_emb_local = None
        if config.no_rope_layers:
            self.rotary_emb_local = RotaryEmbedding.identity(config.head_dim, max_model_len)
        elif any(layer.local_rope for layer in self.layers):
            self.rotary_emb_local = RotaryEmbedding.for_config(config, max_model_len, local=True)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[KVCache],
                meta: AttentionMetadata, logits_indices: torch.Tensor) -> torch.Tensor:
        """(T,) ids -> (B, hidden) final-normed hidden states at the rows in logits_indices."""
        h = self.embed_tokens(input_ids)                    # (T, hidden)
        if self.embed_scale is not None:                    # in the model dtype, as transformers does
            h = h * torch.tensor(self.embed_scale, dtype=torch.float32).to(h.dtype)
        rope = self.rotary_emb(positions, meta)
        local = self.rotary_emb_local(positions, meta) if self.rotary_emb_local is not None else None
        if self.native_decode is not None and self.native_decode.handles(meta, h.shape[0]):
            h = self.native_decode.run(h, rope, local, kv_caches, meta, positions)
        else:
            for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
                h = layer(h, local if layer.local_rope else rope, kv_cache, meta)
                self.layers_run += 1
        return self.norm(h[logits_indices])                 # (B, hidden)


class LlamaForCausalLM(WeightLoading, nn.Module):
    """Any registered family with a paged KV cache. max_model_len bounds positions (rope tables cover it)."""

    def __init__(self, config: ModelConfig, max_model_len: int) -> None:
        super().__init__()
        self.config = config
        self.max_model_len = max_model_len
        self.model = LlamaModel(config, max_model_len)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.softcap = config.final_logit_softcapping
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make lm_head share embed_tokens' weight when the config says so (idempotent)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def progress(self) -> int:
        """Grows while a step computes (LlamaModel.progress); read by the engine's watchdog."""
        return self.model.progress()

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[KVCache],
                meta: AttentionMetadata, logits_indices: torch.Tensor) -> torch.Tensor:
        """One engine step. input_ids, positions: (T,); logits_indices: (B,) rows -> (B, vocab) float32.

        meta must be prepared (meta.prepare()) so gather indices and masks are shared by all layers.
        """
        hidden = self.model(input_ids, positions, kv_caches, meta, logits_indices)
        logits = self.lm_head(hidden).float()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits
