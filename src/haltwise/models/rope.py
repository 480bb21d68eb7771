"""Rotary position embeddings: inverse frequencies per rope type, and the cos/sin tables.

Rope types follow Hugging Face's `rope_scaling` dict (`rope_type` or legacy `type`):
default, linear, dynamic (NTK-aware), yarn, llama3, longrope. Formulas match transformers.modeling_rope_utils
operation for operation, so the tables are bit-identical for the same config.

`longrope` (Phi-3/Phi-4-mini) divides each frequency by a per-frequency factor: the short set, or the long set
for contexts past original_max_position_embeddings. transformers picks the set per forward by the sequence's
length; here the set is fixed by the rope table's length (max_model_len), as llama.cpp fixes it by its
context size: with max_model_len <= the original window every sequence gets the short set (transformers'
choice for all of them), above it every sequence gets the long set (transformers' choice once a sequence is
longer than that window). One set per engine keeps a token's rotation independent of what else the engine
saw (prefix hits, the determinism contract). Partial rotary (ModelConfig.rotary_dim, Phi-4-mini's 0.75):
the tables hold the rotated leading dims' values, then cos 1 and sin 0 for the dims that pass through.

`dynamic` (NTK-aware), as transformers does it: a sequence whose length stays within the trained
window is rotated with the unscaled base; one that grows past it is rotated, in each step, with the base
for its length at that step (AttentionMetadata.rope_seq_lens, per sequence). Keys already in the cache
keep the rotation they were written with -- exactly what transformers' cache holds too.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from haltwise.config import ModelConfig

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")


def rope_type_of(rope_scaling: dict[str, Any] | None) -> str:
    """The rope type named by a HF rope_scaling dict (None -> 'default')."""
    if not rope_scaling:
        return "default"
    kind = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"unsupported rope type {kind!r}; supported: {', '.join(ROPE_TYPES)}")
    return kind


def _base_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))   # (dim/2,)


def _yarn(base: float, dim: int, rs: dict[str, Any], max_pos: int) -> tuple[torch.Tensor, float]:
    factor = rs.get("factor")
    original = rs.get("original_max_position_embeddings") or max_pos
    if factor is None:
        factor = max_pos / original

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = rs.get("attention_factor")
    if attention is None:
        if rs.get("mscale") and rs.get("mscale_all_dim"):
            attention = float(mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"]))
        else:
            attention = mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:  # dimension index completing `rotations` turns
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)  # (dim/2,)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp                      # 1 = high-frequency dims kept as trained, 0 = interpolated
    return interpolation * (1 - keep) + extrapolation * keep, attention


def _llama3(base: float, dim: int, rs: dict[str, Any], max_pos: int) -> torch.Tensor:
    inv_freq = _base_inv_freq(base, dim)
    factor, low_f, high_f = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs.get("original_max_position_embeddings") or max_pos
    low_wavelen, high_wavelen = old_len / low_f, old_len / high_f
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_f) / (high_f - low_f)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def longrope_long(rs: dict[str, Any], max_pos: int, seq_len: int | None) -> bool:
    """Whether LongRoPE takes its long factors for a table (or sequence) of seq_len positions."""
    return bool(seq_len and seq_len > (rs.get("original_max_position_embeddings") or max_pos))


def _longrope(base: float, dim: int, rs: dict[str, Any], max_pos: int,
              seq_len: int | None) -> tuple[torch.Tensor, float]:
    original = rs.get("original_max_position_embeddings") or max_pos
    factor = rs.get("factor")
    if factor is None:
        factor = max_pos / original
    attention = rs.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = torch.tensor(rs["long_factor"] if longrope_long(rs, max_pos, seq_len) else rs["short_factor"],
                       dtype=torch.float32)                                                   # (dim/2,)
    return 1.0 / (ext * base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), attention


def rope_parameters(head_dim: int, rope_theta: float, rope_scaling: dict[str, Any] | None,
                    max_position_embeddings: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """(inv_freq (head_dim/2,) float32, attention_scaling) for a rope config.

    seq_len only matters for `dynamic` (the length the NTK base is computed for; default the window) and
    `longrope` (past the original window: the long factors).
    """
    kind, rs, dim, base = rope_type_of(rope_scaling), rope_scaling or {}, head_dim, rope_theta
    if kind == "default":
        return _base_inv_freq(base, dim), 1.0
    if kind == "linear":
        return _base_inv_freq(base, dim) / rs["factor"], 1.0
    if kind == "dynamic":
        return dynamic_inv_freq(base, dim, rs["factor"], max_position_embeddings, seq_len), 1.0
    if kind == "yarn":
        return _yarn(base, dim, rs, max_position_embeddings)
    if kind == "longrope":
        return _longrope(base, dim, rs, max_position_embeddings, seq_len)
    return _llama3(base, dim, rs, max_position_embeddings), 1.0


def dynamic_inv_freq(base: float, dim: int, factor: float, window: int,
                     seq_len: int | torch.Tensor | None) -> torch.Tensor:
    """NTK inverse frequencies for a sequence of seq_len tokens (unscaled up to the window).

    As transformers: a Python int length (its init path) is computed in double precision; a tensor
    length (its forward path: max(position_ids) + 1, an int64 tensor) in float32.
    """
    if isinstance(seq_len, torch.Tensor):
        length = torch.maximum(seq_len, torch.tensor(window, dtype=seq_len.dtype))
        scaled = base * ((factor * length / window) - (factor - 1)) ** (dim / (dim - 2))   # float32 tensor
        return 1.0 / (scaled ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    length = max(seq_len or window, window)
    return _base_inv_freq(base * ((factor * length / window) - (factor - 1)) ** (dim / (dim - 2)), dim)


def max_supported_len(config: ModelConfig, rope_scaling: dict[str, Any] | None = None) -> int:
    """Longest context the rope config is meant for: the trained window, or factor x original window.

    rope_scaling None means the config's own (config.rope_scaling).
    """
    rs = rope_scaling if rope_scaling is not None else config.rope_scaling
    kind, window = rope_type_of(rs), config.max_position_embeddings
    if kind == "default":
        return window
    factor = rs.get("factor") or 1.0
    original = rs.get("original_max_position_embeddings") or window
    if kind in ("linear", "dynamic"):
        return int(factor * window)
    return max(window, int(factor * original))  # yarn, llama3


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(..., D) -> (..., D): [x1, x2] -> [-x2, x1] (Hugging Face convention)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for positions 0..max_len-1, computed once; applied by position lookup.

    Tables are buffers, so `model.to(dtype)` casts them like transformers casts cos/sin to x.dtype.
    freq_factors (GGUF `rope_freqs`, llama3): inv_freq is divided by them, as llama.cpp does.
    rotary_dim (partial rotary): the frequencies cover these leading dims; the rest get cos 1, sin 0.
    """

    def __init__(self, head_dim: int, rope_theta: float, rope_scaling: dict[str, Any] | None,
                 max_position_embeddings: int, max_len: int,
                 freq_factors: tuple[float, ...] | None = None, rotary_dim: int | None = None) -> None:
        super().__init__()
        self.dynamic = rope_type_of(rope_scaling) == "dynamic"
        rotary = rotary_dim or head_dim
        # dynamic: the tables are the unscaled ones; longer sequences get theirs per step.
        inv_freq, scaling = rope_parameters(rotary, rope_theta, rope_scaling, max_position_embeddings,
                                            seq_len=None if self.dynamic else max_len)
        if freq_factors is not None:
            inv_freq = inv_freq / torch.tensor(freq_factors, dtype=torch.float32)
        freqs = torch.arange(max_len).float()[:, None] * inv_freq[None, :]  # (L, D/2)
        # transformers takes cos/sin of cat((freqs, freqs)): the same D/2 values twice per row, computed once here
        # (half the start's cos/sin work; elementwise, so the same bits). x * 1.0 == x: unscaled tables skip it.
        cos, sin = freqs.cos(), freqs.sin()
        if scaling != 1.0:
            cos, sin = cos * scaling, sin * scaling
        passed = head_dim - rotary                                       # dims partial rotary leaves alone
        self.register_buffer("cos", torch.cat((cos, cos, torch.ones(max_len, passed)), dim=-1), persistent=False)
        self.register_buffer("sin", torch.cat((sin, sin, torch.zeros(max_len, passed)), dim=-1), persistent=False)
        self.attention_scaling = scaling
        self.max_len = max_len
        self._ntk = (rope_theta, rotary, (rope_scaling or {}).get("factor"), max_position_embeddings)

    @classmethod
    def for_config(cls, config: ModelConfig, max_len: int, local: bool = False) -> "RotaryEmbedding":
        """The global layers' rope, or (local=True) the sliding layers' own unscaled base (gemma3)."""
        if local:
            return cls(config.head_dim, config.rope_local_theta, None, config.max_position_embeddings, max_len)
        return cls(config.head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings,
                   max_len, config.rope_freq_factors, config.rotary_dim)

    @classmethod
    def identity(cls, head_dim: int, max_len: int) -> "RotaryEmbedding":
        """cos 1, sin 0 at every position: x * 1 + rotate_half(x) * 0 == x, bit for bit (layers without RoPE
        run the same code, and the same native stack, as the others)."""
        rope = cls(head_dim, 10000.0, None, 1, 1)
        rope.cos, rope.sin = torch.ones(max_len, head_dim), torch.zeros(max_len, head_dim)
        rope.max_len = max_len
        return rope

    def forward(self, positions: torch.Tensor, meta: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: (T,) -> cos, sin: (T, 1, D) each, looked up once a step and shared by every layer.

        meta (AttentionMetadata) is read only for `dynamic`: rows of a sequence longer than the trained
        window get that length's tables.
        """
        cos, sin = self.cos[positions], self.sin[positions]                  # (T, D) copies
        if self.dynamic and meta is not None:
            base, dim, factor, window = self._ntk
            starts = meta.query_start_loc
            for s, length in enumerate(meta.rope_seq_lens or meta.seq_lens):
                if length > window and starts[s + 1] > starts[s]:
                    rows = slice(starts[s], starts[s + 1])
                    inv_freq = dynamic_inv_freq(base, dim, factor, window, torch.tensor(length))
                    freqs = positions[rows].float()[:, None] * inv_freq[None, :]    # (Q, D/2)
                    emb = torch.cat((freqs, freqs), dim=-1)                   # (Q, D)
                    width = emb.shape[-1]                                     # the rotated dims
                    cos[rows, :width], sin[rows, :width] = emb.cos().to(cos.dtype), emb.sin().to(sin.dtype)
        return cos.unsqueeze(1), sin.unsqueeze(1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int | None = None) -> torch.Tensor:
    """x: (T, heads, D) rotated by the (T, 1, D) tables: x * cos + rotate_half(x) * sin; with rotary_dim R < D
    (partial rotary) only x[..., :R] is rotated, by the tables' first R values, and the rest passes through."""
    if rotary_dim is None or rotary_dim == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    r, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((r * cos[..., :rotary_dim] + rotate_half(r) * sin[..., :rotary_dim], rest), dim=-1)
