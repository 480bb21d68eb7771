"""GGUF metadata -> ModelConfig, for every registered family (architectures.py)."""
from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence
from typing import Any

import numpy as np

from haltwise.config import ModelConfig
from haltwise.architectures import ArchOptions, family_of, window_pattern
from haltwise.errors import ModelLoadError
from haltwise.gguf.file import GGUFFile
from haltwise.gguf.bounds import check_dimensions, check_fits_file, implied_parameters


def _field(reader: GGUFFile, key: str, default: Any = None) -> Any:
    return reader.metadata.get(key, default)


def _array_len(reader: GGUFFile, key: str) -> int | None:
    value = reader.metadata.get(key)
    return len(value) if isinstance(value, Sequence) and not isinstance(value, str) else None


# The last file opened, by (resolved path, size, mtime): the loader and the kernel plan's block reader open
# the same file during one engine build, and parsing its metadata (the whole vocabulary) takes seconds.
# A GGUFFile is a read-only map of the file, so sharing one is safe.
_last_opened: dict[tuple[str, int, int], GGUFFile] = {}


def open_gguf(path: Path) -> GGUFFile:
    """A reader for `path`, or ModelLoadError if it is missing or not a GGUF file."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"{path}: model file not found")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key in _last_opened:
        return _last_opened[key]
    try:
        reader = GGUFFile(path)
    except Exception as e:  # ValueError for anything malformed, OSError for an unreadable file
        raise ModelLoadError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None
    _last_opened.clear()
    _last_opened[key] = reader
    return reader


def forget_opened() -> None:
    """Drop the reader kept for the last file opened (its map goes with its last reference): a model
    server unloading that model."""
    _last_opened.clear()


def _rope_scaling(reader: GGUFFile, arch: str, window: int, truncate: bool) -> dict[str, Any] | None:
    kind = _field(reader, f"{arch}.rope.scaling.type")
    factor = _field(reader, f"{arch}.rope.scaling.factor")
    if not kind or kind == "none" or not factor:
        return None
    original = _field(reader, f"{arch}.rope.scaling.original_context_length", window)
    scaling = {"rope_type": kind, "factor": float(factor), "original_max_position_embeddings": int(original)}
    if kind == "yarn":      # the betas when the file states them; the rounding is the family's (architectures.py)
        betas = {key: float(_field(reader, f"{arch}.rope.scaling.yarn_{key}")) for key in ("beta_fast", "beta_slow")
                 if _field(reader, f"{arch}.rope.scaling.yarn_{key}") is not None}
        scaling = {**scaling, **betas, **({} if truncate else {"truncate": False})}
    return scaling


def _longrope(reader: GGUFFile, arch: str, window: int) -> dict[str, Any] | None:
    """phi3's LongRoPE: the converter writes the short and long factors as tensors (rope_factors_short /
    rope_factors_long), the original window and the attention factor as metadata, and no scaling type."""
    factors = {t.name: tuple(float(x) for x in np.asarray(t.data, dtype=np.float32).reshape(-1))
               for t in reader.tensors if t.name in ("rope_factors_long.weight", "rope_factors_short.weight")}
    if len(factors) != 2:
        return None
    scaling = {"rope_type": "longrope", "long_factor": list(factors["rope_factors_long.weight"]),
               "short_factor": list(factors["rope_factors_short.weight"]),
               "original_max_position_embeddings":
                   int(_field(reader, f"{arch}.rope.scaling.original_context_length", window))}
    attention = _field(reader, f"{arch}.rope.scaling.attn_factor")
    return scaling if attention is None else {**scaling, "attention_factor": float(attention)}


def _rope_freq_factors(reader: GGUFFile) -> tuple[float, ...] | None:
    """llama3-style per-frequency divisors stored as the `rope_freqs.weight` tensor, if any."""
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            return tuple(float(x) for x in np.asarray(t.data, dtype=np.float32).reshape(-1))
    return None


def _rotary_dim(count: Any, head_dim: int) -> int | None:
    """rope.dimension_count below the head size: partial rotary (Phi-4-mini); None = the whole head."""
    return int(count) if count and int(count) < head_dim else None


def _layer_types(pattern: Any, family_every: int | None, layers: int) -> tuple[str, ...]:
    """Which layers slide: the file's sliding_window_pattern (every n-th layer global, or one bool per
    layer, True = sliding), else the family's implicit pattern, else (Mistral) every layer."""
    if isinstance(pattern, list):
        return tuple("sliding_attention" if p else "full_attention" for p in pattern)
    every = int(pattern) if pattern else family_every
    return window_pattern(layers, every) if every else ("sliding_attention",) * layers


def gguf_config(reader: GGUFFile, path: Path) -> ModelConfig:
    """ModelConfig from GGUF metadata; ModelLoadError for an unsupported architecture or missing keys."""
    options = family_of(_field(reader, "general.architecture"), str(path))
    arch = _field(reader, "general.architecture")
    try:
        hidden = int(_field(reader, f"{arch}.embedding_length"))
        heads = int(_field(reader, f"{arch}.attention.head_count"))
        window = int(_field(reader, f"{arch}.context_length"))
        layers = int(_field(reader, f"{arch}.block_count"))
        ffn = int(_field(reader, f"{arch}.feed_forward_length"))
    except (TypeError, ValueError):
        raise ModelLoadError(f"{path}: GGUF metadata lacks one of {arch}.embedding_length, "
                             f"attention.head_count, context_length, block_count, feed_forward_length") from None
    vocab = _field(reader, f"{arch}.vocab_size") or _array_len(reader, "tokenizer.ggml.tokens")
    if vocab is None:
        raise ModelLoadError(f"{path}: no {arch}.vocab_size and no tokenizer.ggml.tokens to count")
    check_dimensions({"embedding_length": hidden, "attention.head_count": heads, "context_length": window,
                      "block_count": layers, "feed_forward_length": ffn, "vocab_size": int(vocab)}, path)
    eos = tuple(int(t) for t in (_field(reader, "tokenizer.ggml.eos_token_id"),
                                 _field(reader, "tokenizer.ggml.eot_token_id")) if t is not None)
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    names = {t.name for t in reader.tensors}
    head_dim = int(_field(reader, f"{arch}.attention.key_length", hidden // heads))
    kv_heads = int(_field(reader, f"{arch}.attention.head_count_kv", heads))
    check_dimensions({"attention.key_length": head_dim, "attention.head_count_kv": kv_heads}, path)
    if heads % kv_heads:
        raise ModelLoadError(f"{path}: attention.head_count {heads} is not a multiple of head_count_kv {kv_heads}")
    tied = "output.weight" not in names
    check_fits_file(implied_parameters(int(vocab), hidden, layers, heads, kv_heads, head_dim, ffn, tied),
                    Path(path).stat().st_size, path)
    sliding = _field(reader, f"{arch}.attention.sliding_window") or None    # phi3 writes 0 for none
    layer_types = None
    if sliding is not None:
        layer_types = _layer_types(_field(reader, f"{arch}.attention.sliding_window_pattern"),
                                   options.gguf_window_every, layers)
    softcap = _field(reader, f"{arch}.final_logit_softcapping")
    attn_softcap = _field(reader, f"{arch}.attn_logit_softcapping")
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=ffn,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=window,
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings=tied,
        rope_scaling=_longrope(reader, arch, window) or _rope_scaling(reader, arch, window, options.gguf_yarn_truncate),
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=tuple(dict.fromkeys(eos)),
        architecture=options.name,
        qkv_bias="blk.0.attn_q.bias" in names,
        hidden_act=options.hidden_act,
        sliding_window=None if sliding is None else int(sliding),
        layer_types=layer_types,
        rope_local_theta=(float(_field(reader, f"{arch}.rope.freq_base_swa", options.gguf_local_rope_theta or 0))
                          or None) if sliding is not None else None,
        # query_pre_attn_scalar stays None (= head_dim): GGUF does not store it; Gemma 3's is head_dim
        # (256) for every size but 27B, as transformers' default and llama.cpp's rule assume.
        final_logit_softcapping=None if softcap is None else float(softcap),
        attn_logit_softcapping=None if attn_softcap is None else float(attn_softcap),
        rope_freq_factors=_rope_freq_factors(reader),
        rotary_dim=_rotary_dim(_field(reader, f"{arch}.rope.dimension_count"), head_dim),
        no_rope_layers=tuple(i for i in range(layers) if options.gguf_no_rope_every
                             and (i + 1) % options.gguf_no_rope_every == 0),
        **_experts(reader, arch, options, path, layers * hidden),
    )


def _experts(reader: GGUFFile, arch: str, options: ArchOptions, path: Path, layer_hidden: int) -> dict[str, Any]:
    """The MoE fields of ModelConfig ({} for a dense model). GGUF does not store norm_topk_prob: llama.cpp
    fixes it per family, and so do we."""
    experts = _field(reader, f"{arch}.expert_count")
    if not experts:
        return {}
    used = _field(reader, f"{arch}.expert_used_count")
    width = _field(reader, f"{arch}.expert_feed_forward_length")
    if not used or not width:
        raise ModelLoadError(f"{path}: GGUF metadata has {arch}.expert_count but lacks expert_used_count or "
                             f"expert_feed_forward_length")
    check_dimensions({"expert_count": int(experts), "expert_used_count": int(used),
                      "expert_feed_forward_length": int(width)}, path)
    check_fits_file(layer_hidden * int(experts) * 3 * int(width), Path(path).stat().st_size, path)
    return dict(num_experts=int(experts), num_experts_per_tok=int(used), moe_intermediate_size=int(width),
                norm_topk_prob=options.gguf_norm_topk_prob, expert_glu=options.gguf_expert_glu,
                moe_router="topk_softmax" if options.gguf_expert_glu else "softmax_topk",
                shared_expert_intermediate_size=int(_field(reader, f"{arch}.expert_shared_feed_forward_length", 0)))
