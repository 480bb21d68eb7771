"""Attention one query row at a time over exactly its own context, for what SDPA and the native stack lack:

    soft-capping (Gemma 2)   scores = tanh((q . k) * scale / cap) * cap;  weights = softmax(scores)
    sinks (gpt-oss)          weights = softmax([scores, sink_h])[:-1]: a learned per-head logit that takes
                             a share of the softmax and no value
    out = weights . v

as transformers' eager Gemma 2 and gpt-oss attention compute them. (gpt-oss's sinks also run natively in the
layer stack, decode_math.inc attend_t, which is tested against this reference.)
A row at position p reads keys max(0, p + 1 - window) .. p of its sequence and nothing else: no padding to the
batch's longest context and no causal mask over a chunk, so every matmul's shape -- and so its rounding --
depends on the row alone. A token's attention is the same bits in a prefill chunk, in a decode batch of any
size or after a prefix hit (the determinism contract on the Python layers, which these families run).
"""
from __future__ import annotations

import torch
from torch import nn

from haltwise.models.attention import AttentionMetadata, _gather_blocks


def row_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                  scale: float, softcap: float | None = None, window: int | None = None,
                  sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q: (T, heads, D) -> (T, heads, D); this step's K/V already written to the cache. sinks: (heads,)."""
    T, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    out = torch.empty_like(q)
    starts = meta.query_start_loc
    sink = None if sinks is None else sinks.to(q.dtype).view(kv_heads, group, 1)      # query head h = kvh * G + g
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
            if softcap:
                scores = torch.tanh(scores / softcap) * softcap
            if sink is not None:
                scores = torch.cat((scores, sink.expand(-1, -1, 1)), dim=-1)          # (KVH, G, L + 1)
                scores = scores - scores.max(dim=-1, keepdim=True).values
            weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            if sink is not None:
                weights = weights[..., :-1]
            out[row] = torch.matmul(weights, values[:, begin:end]).view(heads, dim)
    return out


class AttentionSinks(nn.Module):
    """gpt-oss's learned per-head sink logits (`self_attn.sinks.weight` here; HF names it `self_attn.sinks`)."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(heads))
