"""Bounds on a GGUF's dimensions, checked before anything is allocated from them.

A GGUF is untrusted input: its metadata sizes the model (layers x hidden x heads), the embedding
(vocab x hidden) and the RoPE tables (context_length x head_dim) that load_model allocates. A crafted or
damaged file could ask for terabytes or for a billion layers. Two checks, each a ModelLoadError naming
the key and the numbers:

    1. every dimension in 1..DIMENSION_LIMITS[key]  (far above any released model: Llama 3.1 405B has 126
       layers, hidden 16384, 128 heads; vocabularies reach 262,144; contexts 1M)
    2. the parameters the dimensions imply fit the file: a GGUF stores at least MIN_BITS_PER_WEIGHT bits
       per weight (Q2_K, the smallest supported format, takes 2.625), so
       implied parameters <= file bytes x 8 / MIN_BITS_PER_WEIGHT + SLACK_PARAMETERS
"""
from __future__ import annotations

from pathlib import Path

from haltwise.errors import ModelLoadError

DIMENSION_LIMITS: dict[str, int] = {
    "block_count": 1024,
    "embedding_length": 1 << 16,
    "attention.head_count": 1024,
    "attention.head_count_kv": 1024,
    "attention.key_length": 4096,            # head_dim
    "feed_forward_length": 1 << 18,
    "vocab_size": 1 << 22,
    "context_length": 1 << 21,               # RoPE tables: context x head_dim floats, built at load
    "expert_count": 1 << 12,                 # MoE: Qwen3-235B has 128 experts, DeepSeek-V3 256
    "expert_used_count": 1 << 12,
    "expert_feed_forward_length": 1 << 18,
}
MIN_BITS_PER_WEIGHT = 2
SLACK_PARAMETERS = 1 << 20                  # norms, biases, rounding: never the difference that matters


def check_dimensions(values: dict[str, int], path: Path | str) -> None:
    """Each value of `values` (GGUF key suffix -> int) within 1..DIMENSION_LIMITS[key]."""
    for key, value in values.items():
        limit = DIMENSION_LIMITS[key]
        if not 1 <= value <= limit:
            raise ModelLoadError(f"{path}: GGUF {key} = {value} is outside 1..{limit}; the file is damaged "
                                 f"or not a model haltwise can load")


def implied_parameters(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                       ffn: int, tied: bool) -> int:
    """Weights a Llama-family model of these dimensions holds (embedding, lm_head, attention, MLP)."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2   # q, o ; k, v
    mlp = 3 * hidden * ffn                                                      # gate, up, down
    return vocab * hidden * (1 if tied else 2) + layers * (attention + mlp + 2 * hidden)


def check_fits_file(parameters: int, file_bytes: int, path: Path | str) -> None:
    """The implied parameters could be stored in `file_bytes` (see the module docstring)."""
    most = file_bytes * 8 // MIN_BITS_PER_WEIGHT + SLACK_PARAMETERS
    if parameters > most:
        raise ModelLoadError(f"{path}: its metadata describes a model of {parameters:,} weights, more than a "
                             f"{file_bytes:,}-byte file can hold (at most {most:,} at {MIN_BITS_PER_WEIGHT} bits "
                             f"a weight); the file is damaged or its dimensions are wrong")
