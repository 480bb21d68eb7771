"""A readable Llama over a paged KV cache: Attention -> MLP -> DecoderLayer -> Model -> ForCausalLM.

Attribute names follow Hugging Face (model.embed_tokens, model.layers[i].self_attn.o_proj, ...), except
that q/k/v and gate/up are stored fused (`qkv_proj`, `gate_up_proj`) so a decode step does one matmul
each. `load_weights` accepts Hugging Face names and places q_proj/k_proj/v_proj and gate_proj/up_proj
into their row slices, so loaders never see the fused layout.

All tokens of a step are one flat batch of T rows (prefill chunks and decodes mixed); AttentionMetadata
says which rows belong to which sequence and where their K/V live.
"""
from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from haltwise.config import ModelConfig
from haltwise.models.attention import AttentionMetadata, paged_attention, write_kv
from haltwise.models.rope import RotaryEmbedding, apply_rotary

KVCache = tuple[torch.Tensor, torch.Tensor]  # each (num_blocks, block_size, num_kv_heads, head_dim)
RopeTables = tuple[torch.Tensor, torch.Tensor]  # cos, sin: (T, 1, head_dim) for this step's positions


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise in float32, scale in the input dtype (as transformers does)."""
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=False)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=False)
        self.scale = self.head_dim ** -0.5

    def forward(self, x: torch.Tensor, rope: RopeTables, kv_cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        """x: (T, hidden) -> (T, hidden)."""
        T, D = x.shape[0], self.head_dim
        qkv = self.qkv_proj(x)                                                   # (T, q + 2 kv)
        # q and k heads sit side by side in qkv's columns: rotate them as one (T, H + KV, D) tensor.
        qk = apply_rotary(qkv[:, :self.q_size + self.kv_size].view(T, -1, D), *rope)
        q, k = qk[:, :self.num_heads], qk[:, self.num_heads:]                   # (T, H, D), (T, KV, D)
        v = qkv[:, self.q_size + self.kv_size:].view(T, self.num_kv_heads, D)  # (T, KV, D)
        write_kv(kv_cache[0], kv_cache[1], k, v, meta.slot_mapping)
        out = paged_attention(q, kv_cache[0], kv_cache[1], meta, self.scale, k=k, v=v)  # (T, H, D)
        return self.o_proj(out.reshape(T, self.q_size).to(x.dtype))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)   # (T, I) each
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, rope: RopeTables, kv_cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), rope, kv_cache, meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, max_model_len: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling,
                                          config.max_position_embeddings, max_model_len)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[KVCache],
                meta: AttentionMetadata, logits_indices: torch.Tensor) -> torch.Tensor:
        """(T,) ids -> (B, hidden) final-normed hidden states at the rows in logits_indices."""
        h = self.embed_tokens(input_ids)                    # (T, hidden)
        rope = self.rotary_emb(positions)
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            h = layer(h, rope, kv_cache, meta)
        return self.norm(h[logits_indices])                 # (B, hidden)


class LlamaForCausalLM(nn.Module):
    """Llama with a paged KV cache. max_model_len bounds positions (rope tables are built for it)."""

    # Hugging Face name suffix -> (fused parameter suffix, shard index): shards are stacked in this order.
    _FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
              "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}

    def __init__(self, config: ModelConfig, max_model_len: int) -> None:
        super().__init__()
        self.config = config
        self.max_model_len = max_model_len
        self.model = LlamaModel(config, max_model_len)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make lm_head share embed_tokens' weight when the config says so (idempotent)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[KVCache],
                meta: AttentionMetadata, logits_indices: torch.Tensor) -> torch.Tensor:
        """One engine step. input_ids, positions: (T,); logits_indices: (B,) rows -> (B, vocab) float32.

        meta must be prepared (meta.prepare()) so gather indices and masks are shared by all layers.
        """
        hidden = self.model(input_ids, positions, kv_caches, meta, logits_indices)
        return self.lm_head(hidden).float()

    def _shard_rows(self, fused: str) -> list[int]:
        c = self.config
        if fused == "qkv_proj":
            return [c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim]
        return [c.intermediate_size, c.intermediate_size]

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (Hugging Face name, tensor) pairs into the parameters, casting to their dtype.

        Every parameter must be covered (a tied lm_head is covered by embed_tokens, and a given
        lm_head.weight is ignored);
        unknown names and missing or mis-shaped weights raise ValueError naming them.
        """
        params = dict(self.named_parameters())               # tied lm_head appears once, as embed_tokens
        loaded: set[str] = set()
        for name, tensor in weights:
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            module, _, leaf = name.removesuffix(".weight").rpartition(".")
            if leaf in self._FUSED:
                fused, shard = self._FUSED[leaf]
                target_name = f"{module}.{fused}.weight"
                sizes = self._shard_rows(fused)
                start = sum(sizes[:shard])
                target = params.get(target_name)
                if target is None:
                    raise ValueError(f"unexpected weight {name}")
                target = target[start:start + sizes[shard]]
            else:
                target = params.get(name)
                if target is None:
                    raise ValueError(f"unexpected weight {name}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}")
            target.copy_(tensor)
            loaded.add(name)
        expected = self.expected_weight_names()
        missing = sorted(expected - loaded)
        if missing:
            raise ValueError(f"missing weights: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")

    def expected_weight_names(self) -> set[str]:
        """The Hugging Face names load_weights needs (lm_head only when not tied)."""
        names = set()
        for name, _ in self.named_parameters():
            module, _, leaf = name.removesuffix(".weight").rpartition(".")
            if leaf == "qkv_proj":
                names.update(f"{module}.{p}.weight" for p in ("q_proj", "k_proj", "v_proj"))
            elif leaf == "gate_up_proj":
                names.update(f"{module}.{p}.weight" for p in ("gate_proj", "up_proj"))
            else:
                names.add(name)
        return names
