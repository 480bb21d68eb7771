"""Paged attention over a block-table KV cache, for a flat batch of prefill chunks and decodes.

Layout of one layer's cache (K and V alike):

    cache: (num_blocks, block_size, num_kv_heads, head_dim)
    slot = block_id * block_size + offset        # flat index into cache.view(-1, kv_heads, head_dim)

    sequence s with block_table [7, 2, 9] and block_size 4, seq_len 10:
        positions 0..3 -> block 7, 4..7 -> block 2, 8..9 -> block 9 (slots 36, 37)

A step's tokens are concatenated: sequence s owns rows query_start_loc[s]:query_start_loc[s+1],
which are its last (query_len) positions; its context is positions 0..seq_lens[s]-1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor          # (T,) long: cache slot for each new token
    query_start_loc: list[int]          # (B+1,) row offsets of each sequence's new tokens
    seq_lens: list[int]                 # (B,) context length after this step's tokens are written
    block_tables: torch.Tensor          # (B, max_blocks) long, padded with 0
    block_size: int
    # Precomputed once per step (shared by all layers) for the batched gather:
    gather_slots: torch.Tensor | None = None  # (B, max_len) long: cache slot of each context position
    attn_mask: torch.Tensor | None = None     # (B, 1, max_q, max_len) bool: True = may attend

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def query_lens(self) -> list[int]:
        q = self.query_start_loc
        return [q[i + 1] - q[i] for i in range(len(q) - 1)]

    def prepare(self, device: torch.device | str = "cpu") -> "AttentionMetadata":
        """Build the gather indices and the causal/padding mask shared by every layer."""
        max_len = max(self.seq_lens)
        max_q = max(self.query_lens)
        pos = torch.arange(max_len, device=device)                                  # (L,)
        blocks = self.block_tables[:, torch.clamp(pos // self.block_size, max=self.block_tables.shape[1] - 1)]
        self.gather_slots = blocks * self.block_size + pos % self.block_size         # (B, L)
        seq_lens = torch.tensor(self.seq_lens, device=device)
        q_lens = torch.tensor(self.query_lens, device=device)
        # Query row j of sequence s sits at absolute position seq_len - q_len + j (rows past q_len are padding).
        q_pos = (seq_lens - q_lens)[:, None] + torch.arange(max_q, device=device)[None, :]   # (B, Q)
        self.attn_mask = (pos[None, None, :] <= q_pos[:, :, None]) & (pos[None, None, :] < seq_lens[:, None, None])
        self.attn_mask = self.attn_mask[:, None]                                     # (B, 1, Q, L)
        return self


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Scatter new keys/values (T, kv_heads, head_dim) into their cache slots."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: (T, heads, head_dim) -> (T, heads, head_dim). The new K/V must already be written."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    lens = meta.query_lens
    batch, max_q = len(lens), max(lens)
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *v_cache.shape[2:])
    keys = flat_k[meta.gather_slots].transpose(1, 2)      # (B, kv_heads, L, D)
    values = flat_v[meta.gather_slots].transpose(1, 2)    # (B, kv_heads, L, D)
    if max_q == 1:  # all decodes: no padding of queries needed
        queries = q.view(batch, 1, num_heads, head_dim).transpose(1, 2)  # (B, H, 1, D)
    else:
        queries = q.new_zeros(batch, max_q, num_heads, head_dim)
        starts = meta.query_start_loc
        for s in range(batch):
            queries[s, : lens[s]] = q[starts[s]: starts[s + 1]]
        queries = queries.transpose(1, 2)                                 # (B, H, Q, D)
    out = F.scaled_dot_product_attention(queries.to(keys.dtype), keys, values, attn_mask=meta.attn_mask,
                                         scale=scale, enable_gqa=True)    # (B, H, Q, D)
    out = out.transpose(1, 2)                                             # (B, Q, H, D)
    if max_q == 1:
        return out.reshape(batch, num_heads, head_dim)
    rows = [out[s, : lens[s]] for s in range(batch)]
    return torch.cat(rows, dim=0)
