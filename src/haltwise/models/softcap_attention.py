"""Attention with soft-capped scores (Gemma 2), one query row at a time over exactly its own context.

    scores = tanh((q . k) * scale / cap) * cap;  weights = softmax(scores);  out = weights . v

as transformers' eager Gemma 2 attention computes it (SDPA has no soft-capping, nor does the native stack).
A row at position p reads keys max(0, p + 1 - window) .. p of its sequence and nothing else: no padding to the
batch's longest context and no causal mask over a chunk, so every matmul's shape -- and so its rounding --
depends on the row alone. A token's attention is the same bits in a prefill chunk, in a decode batch of any
size or after a prefix hit (the determinism contract on the Python layers, which these families run).
"""
from __future__ import annotations

import torch

from haltwise.models.attention import AttentionMetadata, _gather_blocks


def softcapped_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                         scale: float, softcap: float, window: int | None = None) -> torch.Tensor:
    """q: (T, heads, D) -> (T, heads, D); this step's K/V already written to the cache."""
    T, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    out = torch.empty_like(q)
    starts = meta.query_start_loc
    for s, length in enumerate(meta.seq_lens):
        first, last = starts[s], starts[s + 1]
        if last == first:
            continue
        blocks = meta.block_tables[s, :-(-length // meta.block_size)]
        keys = _gather_blocks(k_cache, blocks, 1, q.dtype)[0]                  # (KVH, nb * block_size, D)
        values = _gather_blocks(v_cache, blocks, 1, q.dtype)[0]
        for row in range(first, last):
            end = length - (last - row) + 1                                    # this row's context length
            begin = max(0, end - window) if window is not None else 0
            query = q[row].view(kv_heads, group, dim)                          # (KVH, G, D)
            scores = torch.matmul(query, keys[:, begin:end].transpose(1, 2)) * scale   # (KVH, G, L)
            scores = torch.tanh(scores / softcap) * softcap
            weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out[row] = torch.matmul(weights, values[:, begin:end]).view(heads, dim)
    return out
