"""One long sequence through the engine's paged attention: chunked prefill, per-token NLL, greedy decode.

The evaluation drives `LlamaForCausalLM` directly (the engine's ModelRunner returns only the last row's
logits; perplexity needs every row). One sequence owns the whole KV pool with an identity block table,
so position p lives in slot p:

    block_table = [0, 1, 2, ..., num_blocks - 1]      slot(p) = block_table[p // bs] * bs + p % bs = p

A chunk of positions start..start+n-1 is one prefill step whose context is positions 0..start+n-1,
exactly what the scheduler's chunked prefill produces for a long prompt.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from haltwise.config import ModelConfig
from haltwise.engine.kv_cache import KVBudget, allocate_kv_caches
from haltwise.models.attention import AttentionMetadata
from haltwise.models.llama import LlamaForCausalLM
from haltwise.models.rope import RotaryEmbedding, rope_parameters

METHODS = ("none", "linear", "dynamic", "yarn", "llama3")


def rope_scaling_for(method: str, factor: float, trained_len: int) -> dict[str, Any] | None:
    """The Hugging Face rope_scaling dict of `method` stretching the trained window by `factor`."""
    if method == "none":
        return None
    if method in ("linear", "dynamic"):
        return {"rope_type": method, "factor": factor}
    if method == "yarn":
        return {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": trained_len}
    if method == "llama3":  # Llama 3.1's published frequency bands
        return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": trained_len}
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


def rope_key(config: ModelConfig, rope_scaling: dict[str, Any] | None, length: int) -> tuple:
    """Two configs with equal keys build identical rotary tables for a window of `length` tokens."""
    inv_freq, scaling = rope_parameters(config.head_dim, config.rope_theta, rope_scaling,
                                        config.max_position_embeddings, seq_len=length)
    return length, tuple(inv_freq.tolist()), float(scaling)


def set_rope(model: LlamaForCausalLM, rope_scaling: dict[str, Any] | None, length: int) -> None:
    """Replace the model's rotary tables with `rope_scaling`'s, covering positions 0..length-1.

    This deliberately bypasses load_model's max_model_len check: the evaluation measures what
    happens past the supported window (e.g. no scaling at 2x the trained length).
    """
    c = model.config
    dtype = model.model.embed_tokens.weight.dtype
    rope = RotaryEmbedding(c.head_dim, c.rope_theta, rope_scaling, c.max_position_embeddings, length)
    model.model.rotary_emb = rope.to(dtype)


class SingleSequence:
    """A KV pool holding one sequence of up to `capacity` tokens; `step` appends a chunk of it."""

    def __init__(self, model: LlamaForCausalLM, capacity: int, block_size: int = 16,
                 kv_dtype: str | None = None) -> None:
        dtype = kv_dtype or str(model.model.embed_tokens.weight.dtype).removeprefix("torch.")
        config = model.config
        self.model, self.block_size = model, block_size
        num_blocks = -(-capacity // block_size)
        budget = KVBudget(config.kv_bytes_per_token(dtype), block_size, num_blocks)
        self.kv = allocate_kv_caches(config, budget, dtype)
        self.block_table = torch.arange(num_blocks)[None, :]   # (1, num_blocks): identity, slot = position
        self.capacity = num_blocks * block_size
        self.length = 0                                         # tokens already in the cache

    def step(self, ids: list[int], all_rows: bool) -> torch.Tensor:
        """Write ids at positions length..length+n-1 -> (n, vocab) logits if all_rows else (1, vocab)."""
        n, start = len(ids), self.length
        if start + n > self.capacity:
            raise ValueError(f"sequence of {start + n} tokens exceeds the pool of {self.capacity}")
        positions = torch.arange(start, start + n)               # (n,) == slots (identity table)
        meta = AttentionMetadata(slot_mapping=positions, query_start_loc=[0, n], seq_lens=[start + n],
                                 block_tables=self.block_table, block_size=self.block_size).prepare()
        rows = torch.arange(n) if all_rows else torch.tensor([n - 1])
        logits = self.model(torch.tensor(ids, dtype=torch.long), positions, self.kv, meta, rows)
        self.length += n
        return logits


def token_nll(model: LlamaForCausalLM, ids: list[int], chunk: int,
              progress: Callable[[int, int], None] | None = None, kv_dtype: str | None = None) -> torch.Tensor:
    """(len(ids) - 1,) float32: entry i = -log p(ids[i + 1] | ids[:i + 1]), computed in prefill chunks."""
    seq = SingleSequence(model, len(ids), kv_dtype=kv_dtype)
    nll = torch.empty(len(ids) - 1)
    for start in range(0, len(ids), chunk):
        piece = ids[start:start + chunk]
        logits = seq.step(piece, all_rows=True)                  # (n, vocab) float32
        targets = torch.tensor(ids[start + 1:start + 1 + len(piece)], dtype=torch.long)  # (n or n-1,)
        nll[start:start + len(targets)] = F.cross_entropy(logits[:len(targets)], targets, reduction="none")
        if progress:
            progress(start + len(piece), len(ids))
    return nll


def greedy_generate(model: LlamaForCausalLM, prompt: list[int], max_new_tokens: int, chunk: int,
                    eos_ids: frozenset[int] = frozenset(), kv_dtype: str | None = None) -> list[int]:
    """Chunked prefill of `prompt`, then one-token decode steps; stops early on an eos id."""
    seq = SingleSequence(model, len(prompt) + max_new_tokens, kv_dtype=kv_dtype)
    for start in range(0, len(prompt), chunk):
        logits = seq.step(prompt[start:start + chunk], all_rows=False)  # (1, vocab)
    out: list[int] = []
    while True:
        token = int(logits[0].argmax())
        out.append(token)
        if token in eos_ids or len(out) == max_new_tokens:
            return out
        logits = seq.step([token], all_rows=False)
