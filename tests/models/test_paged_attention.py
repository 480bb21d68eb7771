"""Paged attention over a mixed batch equals dense causal attention per sequence."""
import pytest
import torch
import torch.nn.functional as F

from haltwise.models.attention import AttentionMetadata, paged_attention, write_kv

HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 8, 4


def dense(q, k, v):
    """Reference: each query row j of an (L)-long sequence attends to positions 0..j."""
    rep = HEADS // KV_HEADS
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1).repeat_interleave(rep, 0),
                                         v.transpose(0, 1).repeat_interleave(rep, 0), is_causal=True)
    return out.transpose(0, 1)


def slots(table, start, end):
    return torch.tensor([table[p // BLOCK] * BLOCK + p % BLOCK for p in range(start, end)])


@pytest.mark.parametrize("pass_new_kv", [True, False])
def test_mixed_prefill_chunks_and_decodes_match_dense(pass_new_kv):
    torch.manual_seed(0)
    k_cache = torch.zeros(32, BLOCK, KV_HEADS, DIM)
    v_cache = torch.zeros_like(k_cache)
    # (total length, tokens already cached, block table): a fresh prompt, two decodes, a second chunk.
    seqs = [(6, 0, [0, 1, 0]), (6, 5, [5, 6, 0]), (9, 8, [10, 11, 12]), (7, 3, [9, 3, 7])]
    full = [(torch.randn(n, HEADS, DIM), torch.randn(n, KV_HEADS, DIM), torch.randn(n, KV_HEADS, DIM))
            for n, _, _ in seqs]
    for (n, cached, table), (_, k, v) in zip(seqs, full):
        if cached:
            write_kv(k_cache, v_cache, k[:cached], v[:cached], slots(table, 0, cached))
    q = torch.cat([f[0][c:] for (n, c, _), f in zip(seqs, full)])
    k = torch.cat([f[1][c:] for (n, c, _), f in zip(seqs, full)])
    v = torch.cat([f[2][c:] for (n, c, _), f in zip(seqs, full)])
    slot_mapping = torch.cat([slots(t, c, n) for n, c, t in seqs])
    starts = [0]
    for n, c, _ in seqs:
        starts.append(starts[-1] + n - c)
    meta = AttentionMetadata(slot_mapping, starts, [n for n, _, _ in seqs],
                             torch.tensor([t for _, _, t in seqs]), BLOCK).prepare()
    write_kv(k_cache, v_cache, k, v, slot_mapping)
    kwargs = {"k": k, "v": v} if pass_new_kv else {}
    out = paged_attention(q, k_cache, v_cache, meta, DIM ** -0.5, **kwargs)
    expected = torch.cat([dense(*f)[c:] for (n, c, _), f in zip(seqs, full)])
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5)
