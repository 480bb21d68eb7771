"""Read a Llama GGUF file: metadata -> ModelConfig, tensors -> (Hugging Face name, float32 tensor).

GGUF stores attn_q / attn_k rows permuted for llama.cpp's interleaved RoPE. Within each head of
size D the converter moved row (half h, index i) to row (i, half h):

    HF rows:   [x0 x1 ... x(D/2-1) | y0 y1 ... y(D/2-1)]      (rotate_half pairs x_i with y_i)
    GGUF rows: [x0 y0 x1 y1 ... x(D/2-1) y(D/2-1)]            (adjacent pairs)

`unpermute_qk` undoes it so the weights match the rotate_half convention used in rope.py.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from haltwise.config import ModelConfig
from haltwise.models.dequant import SUPPORTED_TYPES, dequantize
from haltwise.models.errors import ModelLoadError

SUPPORTED_ARCHITECTURES = ("llama",)

_LAYER_NAMES = {  # GGUF per-block name -> Hugging Face suffix under model.layers.N
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_IGNORED = {"rope_freqs"}  # llama3 frequency factors: we compute them from rope_scaling instead
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str) -> str | None:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight'; None for ignored tensors.

    Raises KeyError for a name with no Llama equivalent.
    """
    m = _BLOCK_RE.match(gguf_name)
    if m:
        layer, part, kind = m.groups()
        return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{kind}"
    base, _, kind = gguf_name.rpartition(".")
    if base in _IGNORED:
        return None
    return f"{_GLOBAL_NAMES[base]}.{kind}"


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(n_heads * D, in) GGUF rows -> HF rows (see module docstring)."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _array_len(reader: GGUFReader, key: str) -> int | None:
    f = reader.fields.get(key)
    if f is None or f.types[0] != GGUFValueType.ARRAY:
        return None
    return len(f.data)


def open_gguf(path: Path) -> GGUFReader:
    """A reader for `path`, or ModelLoadError if it is missing or not a GGUF file."""
    if not path.is_file():
        raise ModelLoadError(f"{path}: model file not found")
    try:
        return GGUFReader(path)
    except Exception as e:  # gguf raises ValueError / struct errors for anything malformed
        raise ModelLoadError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None


def _rope_scaling(reader: GGUFReader, arch: str, window: int) -> dict[str, Any] | None:
    kind = _field(reader, f"{arch}.rope.scaling.type")
    factor = _field(reader, f"{arch}.rope.scaling.factor")
    if not kind or kind == "none" or not factor:
        return None
    original = _field(reader, f"{arch}.rope.scaling.original_context_length", window)
    return {"rope_type": kind, "factor": float(factor), "original_max_position_embeddings": int(original)}


def gguf_config(reader: GGUFReader, path: Path) -> ModelConfig:
    """ModelConfig from GGUF metadata; ModelLoadError for a non-Llama architecture or missing keys."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(f"{path}: architecture {arch!r} is not supported (supported: "
                             f"{', '.join(SUPPORTED_ARCHITECTURES)})")
    try:
        hidden = int(_field(reader, f"{arch}.embedding_length"))
        heads = int(_field(reader, f"{arch}.attention.head_count"))
        window = int(_field(reader, f"{arch}.context_length"))
        layers = int(_field(reader, f"{arch}.block_count"))
        ffn = int(_field(reader, f"{arch}.feed_forward_length"))
    except TypeError:
        raise ModelLoadError(f"{path}: GGUF metadata lacks one of {arch}.embedding_length, "
                             f"attention.head_count, context_length, block_count, feed_forward_length") from None
    vocab = _field(reader, f"{arch}.vocab_size") or _array_len(reader, "tokenizer.ggml.tokens")
    if vocab is None:
        raise ModelLoadError(f"{path}: no {arch}.vocab_size and no tokenizer.ggml.tokens to count")
    eos = tuple(int(t) for t in (_field(reader, "tokenizer.ggml.eos_token_id"),
                                 _field(reader, "tokenizer.ggml.eot_token_id")) if t is not None)
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    names = {t.name for t in reader.tensors}
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=ffn,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(_field(reader, f"{arch}.attention.key_length", hidden // heads)),
        max_position_embeddings=window,
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings="output.weight" not in names,
        rope_scaling=_rope_scaling(reader, arch, window),
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=tuple(dict.fromkeys(eos)),
    )


def gguf_weights(reader: GGUFReader, config: ModelConfig, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, float32 tensor) for every tensor, q/k unpermuted. Lazy: one tensor at a time."""
    for t in reader.tensors:
        qtype = GGMLQuantizationType(t.tensor_type)
        if qtype not in SUPPORTED_TYPES:
            raise ModelLoadError(f"{path}: tensor {t.name} uses quantization {qtype.name}, which is not "
                                 f"supported (supported: {', '.join(sorted(q.name for q in SUPPORTED_TYPES))})")
        try:
            name = hf_name(t.name)
        except KeyError:
            raise ModelLoadError(f"{path}: unexpected tensor {t.name!r} for a Llama model") from None
        if name is None:
            continue
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml lists dims fastest-first
        w = dequantize(np.asarray(t.data), qtype, shape)
        if ".self_attn.q_proj." in name:
            w = unpermute_qk(w, config.num_heads)
        elif ".self_attn.k_proj." in name:
            w = unpermute_qk(w, config.num_kv_heads)
        yield name, w
