"""Read a GGUF file: metadata -> ModelConfig, tensors -> (Hugging Face name, float32 tensor).

The family (architectures.py) comes from `general.architecture`; what GGUF leaves implicit
(Gemma 3's window pattern and local RoPE base) comes from the family's options.

llama.cpp's converter permuted attn_q / attn_k rows of `llama` models for its interleaved RoPE.
Within each head of size D it moved row (half h, index i) to row (i, half h):

    HF rows:   [x0 x1 ... x(D/2-1) | y0 y1 ... y(D/2-1)]      (rotate_half pairs x_i with y_i)
    GGUF rows: [x0 y0 x1 y1 ... x(D/2-1) y(D/2-1)]            (adjacent pairs)

`unpermute_qk` undoes it so the weights match the rotate_half convention used in rope.py. Gemma
GGUFs store RMSNorm weights as 1 + w; `gguf_weights` subtracts 1 (as transformers' GGUF loader does),
so the model holds w like a Hugging Face checkpoint.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from gguf import GGMLQuantizationType

from haltwise.config import ModelConfig
from haltwise.architectures import ARCHITECTURES, ArchOptions, arch_options
from haltwise.gguf.dequant import SUPPORTED_TYPES, UnsupportedQuantization, dequantize, row_bytes
from haltwise.errors import ModelLoadError
from haltwise.gguf.file import GGUFFile
from haltwise.gguf.metadata import gguf_config, open_gguf

__all__ = ["GGUFTensor", "gguf_config", "gguf_tensors", "gguf_weights", "hf_name", "open_gguf", "tensor_values",
           "unpermute_qk"]
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)

_LAYER_NAMES = {  # GGUF per-block name -> Hugging Face suffix under model.layers.N (Llama's meaning)
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",                          # MoE router
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",      # qwen2moe: the shared expert's sigmoid gate
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
}
# MoE experts stacked in one 3-D tensor (experts, out, in): split into one 2-D view per expert ('#').
_EXPERT_NAMES = {"ffn_gate_exps": "mlp.experts.#.gate_proj", "ffn_up_exps": "mlp.experts.#.up_proj",
                 "ffn_down_exps": "mlp.experts.#.down_proj"}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# llama3 frequency factors (ModelConfig.rope_freq_factors), phi3's LongRoPE factors (ModelConfig.rope_scaling)
_IGNORED = {"rope_freqs", "rope_factors_long", "rope_factors_short"}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight'; None for ignored tensors.

    Raises KeyError for a name with no equivalent in the family `arch`.
    """
    m = _BLOCK_RE.match(gguf_name)
    if m:
        layer, part, kind = m.groups()
        names = ARCHITECTURES[arch].gguf_layer_names
        return f"model.layers.{layer}.{names.get(part) or _EXPERT_NAMES.get(part) or _LAYER_NAMES[part]}.{kind}"
    base, _, kind = gguf_name.rpartition(".")
    if base in _IGNORED:
        return None
    return f"{_GLOBAL_NAMES[base]}.{kind}"


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(n_heads * D, in) GGUF rows -> HF rows (see module docstring)."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor as stored, before dequantization."""

    name: str                   # the GGUF name
    hf_name: str                # the Hugging Face parameter it fills
    qtype: GGMLQuantizationType
    data: np.ndarray            # (rows, bytes_per_row) uint8 view of the file (1-D tensors: one row)
    shape: tuple[int, ...]      # torch order, e.g. (out, in)
    unpermute_heads: int | None  # rows are llama.cpp-permuted q/k: unpermute_qk(w, this) restores HF order
    norm_plus_one: bool         # stored as 1 + w (Gemma RMSNorm)


def gguf_tensors(reader: GGUFFile, config: ModelConfig, path: Path | None = None) -> Iterator[GGUFTensor]:
    """Every tensor the model needs, raw. Unknown tensor names and undecodable types raise ModelLoadError."""
    options = arch_options(config)
    where = path or "GGUF"
    for t in reader.tensors:
        qtype = GGMLQuantizationType(t.tensor_type)
        try:
            name = hf_name(t.name, options.name)
        except KeyError:
            raise ModelLoadError(f"{where}: unexpected tensor {t.name!r} for a {options.name} model") from None
        if name is None:
            continue
        if qtype not in SUPPORTED_TYPES:
            raise ModelLoadError(f"{where}: tensor {t.name} uses quantization {qtype.name}, which is not "
                                 f"supported (supported: {', '.join(sorted(q.name for q in SUPPORTED_TYPES))})")
        shape = tuple(reversed(t.shape))   # ggml lists dims fastest-first
        try:
            width = row_bytes(qtype, shape[-1])
        except UnsupportedQuantization as e:
            raise ModelLoadError(f"{where}: tensor {t.name}: {e}") from None
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        if raw.size != rows * width:   # a shape the stored bytes do not cover (damaged or crafted file)
            raise ModelLoadError(f"{where}: tensor {t.name} of shape {shape} needs {rows * width:,} bytes; "
                                 f"the file holds {raw.size:,} for it")
        data = raw.reshape(-1, width)
        if name.endswith("shared_expert_gate.weight") and len(shape) == 1:
            shape = (1, *shape)                          # llama.cpp stores the (1, hidden) gate as a vector
        if "#" in name:
            yield from _experts(t.name, name, qtype, data, shape, where)
            continue
        yield GGUFTensor(t.name, name, qtype, data, shape, _unpermute_heads(name, config, options),
                         options.norm_plus_one and name.endswith("norm.weight"))


def _experts(gguf_name: str, name: str, qtype, data: np.ndarray, shape: tuple[int, ...], where) -> Iterator[GGUFTensor]:
    """A stacked (experts, out, in) tensor -> one (out, in) tensor per expert: row slices of the mapped
    blocks, nothing copied (an expert's pages are read only when it runs). Biases (gpt-oss) stack as
    (experts, out) -> one (out,) each."""
    bias = name.endswith(".bias") and len(shape) == 2
    if len(shape) != 3 and not bias:
        raise ModelLoadError(f"{where}: tensor {gguf_name} has shape {shape}, expected (experts, out, in)")
    experts, rows = shape[0], 1 if bias else shape[1]
    for e in range(experts):
        yield GGUFTensor(gguf_name, name.replace("#", str(e)), qtype, data[e * rows:(e + 1) * rows],
                         shape[1:], None, False)


def _unpermute_heads(name: str, config: ModelConfig, options: ArchOptions) -> int | None:
    if not options.gguf_permuted_qk:
        return None
    if ".self_attn.q_proj." in name:
        return config.num_heads
    if ".self_attn.k_proj." in name:
        return config.num_kv_heads
    return None


def gguf_weights(reader: GGUFFile, config: ModelConfig, path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, float32 tensor) for every tensor, q/k unpermuted. Lazy: one tensor at a time."""
    for t in gguf_tensors(reader, config, path):
        yield t.hf_name, tensor_values(t)


def tensor_rows(t: GGUFTensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows `rows` (Hugging Face order) of a 2-D tensor_values(t), dequantizing only their blocks."""
    raw = rows
    if t.unpermute_heads:     # HF row i is stored at raw row source[i]
        source = unpermute_qk(torch.arange(t.shape[0], dtype=torch.float32)[:, None], t.unpermute_heads)
        raw = source[rows, 0].long()
    w = dequantize(np.ascontiguousarray(t.data[raw.numpy()]), t.qtype, (len(rows), t.shape[1]))
    return w - 1.0 if t.norm_plus_one else w


def tensor_values(t: GGUFTensor) -> torch.Tensor:
    """One tensor as the model holds it: float32, q/k rows in Hugging Face order, Gemma norms as w."""
    w = dequantize(t.data, t.qtype, t.shape)
    if t.unpermute_heads:
        w = unpermute_qk(w, t.unpermute_heads)
    if t.norm_plus_one:
        w = w - 1.0
    return w
