"""Paged attention over a block-table KV cache, for a flat batch of prefill chunks and decodes.

Layout of one layer's cache (K and V alike):

    cache: (num_blocks, block_size, num_kv_heads, head_dim)
    slot = block_id * block_size + offset        # flat index into cache.view(-1, kv_heads, head_dim)

    sequence s with block_table [7, 2, 9] and block_size 4, seq_len 10:
        positions 0..3 -> block 7, 4..7 -> block 2, 8..9 -> block 9 (slots 36, 37)

A step's tokens are concatenated: sequence s owns rows query_start_loc[s]:query_start_loc[s+1],
which are its last (query_len) positions; its context is positions 0..seq_lens[s]-1.
Decodes (query_len 1) are attended in one padded batch; each prefill chunk on its own, so a
long prompt never pads the decodes' queries.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from haltwise.models.kv_codec import decode, encode, head_dim_of, is_lossless, kv_dtype_of


@dataclass
class _PrefillPlan:
    rows: slice                      # this sequence's rows in the flat batch
    blocks: torch.Tensor             # (nb,) its block table, enough blocks for its context (this chunk included)
    mask: torch.Tensor | None        # (Q, L) bool, True = may attend; None = no earlier context (plain causal)


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor          # (T,) long: cache slot for each new token
    query_start_loc: list[int]          # (B+1,) row offsets of each sequence's new tokens
    seq_lens: list[int]                 # (B,) context length after this step's tokens are written
    block_tables: torch.Tensor          # (B, max_blocks) long, padded with 0
    block_size: int
    rope_seq_lens: list[int] | None = None     # (B,) length each sequence's rope is scaled for (dynamic
                                               # rope): the full prompt for a prefill chunk; None = seq_lens
    # Built once per step by prepare() and shared by every layer:
    decode_rows: torch.Tensor | None = None    # (Bd,) flat rows of the decoding sequences
    only_decodes: bool = False                 # every row is a decode, in order (decode_rows == arange(T))
    decode_blocks: torch.Tensor | None = None  # (Bd * nb,) block tables cut to the longest context, flattened
    decode_mask: torch.Tensor | None = None    # (Bd, 1, 1, nb * block_size) bool, True = may attend
    prefills: list[_PrefillPlan] = field(default_factory=list)
    # The sliding layers' own slots and tables when their KV has a pool of its own (engine/window_blocks.py):
    # the same rows, positions and lengths; blocks a window no longer reaches read block 0 (masked).
    window: "AttentionMetadata | None" = None
    # Sliding-window masks, built on first use per window and shared by the layers with that window.
    _windowed: dict[int, tuple[torch.Tensor | None, list[torch.Tensor | None]]] = field(default_factory=dict)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def query_lens(self) -> list[int]:
        q = self.query_start_loc
        return [q[i + 1] - q[i] for i in range(len(q) - 1)]

    def prepare(self) -> "AttentionMetadata":
        """Split the batch into one decode group and per-sequence prefill plans."""
        q_lens, starts = self.query_lens, self.query_start_loc
        decodes = [s for s, n in enumerate(q_lens) if n == 1]
        if decodes:
            # Whole blocks are gathered (one index per block, not per token); positions past each
            # sequence's length are masked out.
            lens = torch.tensor([self.seq_lens[s] for s in decodes])
            num_blocks = -(-int(lens.max()) // self.block_size)
            pos = torch.arange(num_blocks * self.block_size)
            self.decode_rows = torch.tensor([starts[s] for s in decodes])
            self.only_decodes = len(decodes) == len(q_lens)
            self.decode_blocks = self.block_tables[decodes, :num_blocks].flatten()              # (Bd * nb,)
            self.decode_mask = (pos[None, :] < lens[:, None])[:, None, None, :]            # (Bd, 1, 1, L)
        self.prefills = []
        for s, n in enumerate(q_lens):
            if n == 1:
                continue
            past = self.seq_lens[s] - n                      # tokens already in the cache before this chunk
            rows = slice(starts[s], starts[s + 1])
            # Query j sits at position past + j and sees positions 0..past + j (padding past seq_len never).
            num_blocks = -(-self.seq_lens[s] // self.block_size)
            mask = None
            if past:
                mask = torch.arange(num_blocks * self.block_size)[None, :] <= (past + torch.arange(n))[:, None]
            self.prefills.append(_PrefillPlan(rows, self.block_tables[s, :num_blocks], mask))  # mask (Q, L)
        return self


    def window_masks(self, window: int) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
        """(decode mask, one mask per prefill plan) that also hide positions window or more behind the query.

        A query at position p sees keys p - window + 1 .. p (as transformers' sliding_window_overlay).
        A prefill mask stays None (plain causal) where no query can reach past its window.
        """
        if window not in self._windowed:
            decode = None
            if self.decode_rows is not None:
                lens = self.decode_mask.shape[-1]
                seq_lens = torch.tensor([self.seq_lens[s] for s, n in enumerate(self.query_lens) if n == 1])
                pos = torch.arange(lens)
                decode = self.decode_mask & (pos[None, :] >= (seq_lens - window)[:, None])[:, None, None, :]
            prefill = []
            q_lens = self.query_lens
            for plan, s in zip(self.prefills, [s for s, n in enumerate(q_lens) if n != 1]):
                n, length = q_lens[s], self.seq_lens[s]
                if length <= window:
                    prefill.append(plan.mask)
                    continue
                query_pos = (length - n + torch.arange(n))[:, None]                  # (Q, 1)
                key_pos = torch.arange(plan.blocks.shape[0] * self.block_size)[None, :]  # (1, L)
                prefill.append((key_pos <= query_pos) & (key_pos > query_pos - window))
            self._windowed[window] = (decode, prefill)
        return self._windowed[window]


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Scatter new keys/values (T, kv_heads, head_dim) into their cache slots, in the cache's KV dtype."""
    kv_dtype = kv_dtype_of(k_cache)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, encode(k, kv_dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, encode(v, kv_dtype))


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float, k: torch.Tensor | None = None, v: torch.Tensor | None = None,
                    window: int | None = None) -> torch.Tensor:
    """q: (T, heads, D) -> (T, heads, D). This step's K/V must already be written to the cache.

    Passing this step's k, v (T, kv_heads, D) lets a prefill chunk with no earlier context attend
    to them directly instead of reading them back from the cache. window: a sliding layer's window
    (None = the whole context).
    """
    kv_heads, dim = k_cache.shape[2], head_dim_of(k_cache)
    # A lossy cache (bfloat16 / int8 under float32 activations) is read back even for a first chunk, so
    # a prompt attends to the same values whether its prefix came from the cache or was just computed.
    fresh_ok = is_lossless(k_cache, q.dtype)
    decode_mask, prefill_masks = meta.decode_mask, [plan.mask for plan in meta.prefills]
    if window is not None:
        decode_mask, prefill_masks = meta.window_masks(window)
    out = None if meta.only_decodes else torch.empty(q.shape, dtype=q.dtype)
    if meta.decode_rows is not None:
        bd = meta.decode_rows.shape[0]
        group = q.shape[1] // kv_heads
        # GQA is folded into the query axis: query head h reads kv head h // group, so a kv head's
        # `group` query heads become `group` query rows of one SDPA head (no causal mask is needed,
        # they all sit at the same position). The CPU flash kernel runs this ~1.6x faster than
        # enable_gqa with a single query row. index_select on whole blocks is ~2x faster than
        # advanced indexing.
        queries = q if meta.only_decodes else q[meta.decode_rows]
        queries = queries.reshape(bd, kv_heads, group, dim)                                    # (Bd, KVH, G, D)
        keys = _gather_blocks(k_cache, meta.decode_blocks, bd, q.dtype)                       # (Bd, KVH, L, D)
        values = _gather_blocks(v_cache, meta.decode_blocks, bd, q.dtype)
        o = F.scaled_dot_product_attention(queries, keys, values, attn_mask=decode_mask, scale=scale)
        if meta.only_decodes:
            return o.reshape(bd, -1, dim)                                                       # (T, H, D)
        out[meta.decode_rows] = o.reshape(bd, -1, dim)                                          # (Bd, H, D)
    for plan, mask in zip(meta.prefills, prefill_masks, strict=True):
        # SDPA gets a leading batch dim of 1: CPU's fused kernels take only 4-D inputs (3-D falls
        # back to the generic path, several times slower for long prompts).
        queries = q[plan.rows].transpose(0, 1).unsqueeze(0)                     # (1, H, Q, D)
        if mask is None and k is not None and v is not None and fresh_ok:
            keys = k[plan.rows].transpose(0, 1).unsqueeze(0)                    # (1, KVH, Q, D)
            values = v[plan.rows].transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, scale=scale, enable_gqa=True)
        else:
            keys = _gather_blocks(k_cache, plan.blocks, 1, q.dtype)                # (1, KVH, L, D)
            values = _gather_blocks(v_cache, plan.blocks, 1, q.dtype)
            o = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask,
                                               is_causal=mask is None, scale=scale, enable_gqa=True)
        out[plan.rows] = o[0].transpose(0, 1)                                   # (Q, H, D)
    return out


def _gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, num_seqs: int, dtype: torch.dtype) -> torch.Tensor:
    """cache (N, block_size, KVH, row), blocks (num_seqs * nb,) -> values (num_seqs, KVH, nb * block_size, D)."""
    kv_heads, width = cache.shape[2], cache.shape[3]
    rows = cache.index_select(0, blocks).view(num_seqs, -1, kv_heads, width)
    return decode(rows, dtype).transpose(1, 2)
