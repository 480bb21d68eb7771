"""Block arithmetic and the prefix cache's hash chain. No torch.

A full block is named by a hash chained over every token before it, h_i = H(h_{i-1} || tokens of block i)
(h_{-1} = b""), so equal hashes mean equal whole prefixes and the block's KV can be shared
(block_allocator.py); the prompt cache's tiers and the cluster router key blocks by the same chain.
"""
from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator, Sequence


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold num_tokens positions."""
    return -(-num_tokens // block_size)


def chain_hash(prev: bytes, token_ids: Sequence[int]) -> bytes:
    """Hash of a full block given the hash of the block before it (b"" for the first block)."""
    h = hashlib.blake2b(prev, digest_size=16)
    h.update(array("q", token_ids).tobytes())
    return h.digest()


def iter_chain(token_ids: Sequence[int], prev: bytes, first: int, end: int, block_size: int) -> Iterator[bytes]:
    """The chain hashes of full blocks first..end-1 of token_ids, given prev, the hash of block first - 1."""
    for i in range(first, end):
        prev = chain_hash(prev, token_ids[i * block_size:(i + 1) * block_size])
        yield prev
