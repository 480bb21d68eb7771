"""The hash chain of a prompt's full KV blocks, as the block allocator computes it, in a compact form.

    prompt ids  [t0 .. t15 | t16 .. t31 | t32 .. t37]     block_size 16
    chain       h0 = H(b"", t0..t15),  h1 = H(h0, t16..t31)            (the partial block is never cached)

Only (len - 1) // block_size blocks count, as in BlockAllocator._match: the last prompt token is always
recomputed. Keys are the first 8 bytes of each 16-byte hash as an int: what replicas report and what the
router compares (a collision only costs a cache miss).
"""
from __future__ import annotations

from haltwise.engine.prefix_chain import chain_hash


def block_key(block_hash: bytes) -> int:
    """The compact key of one block hash."""
    return int.from_bytes(block_hash[:8], "little")


def prompt_block_keys(prompt_token_ids: list[int], block_size: int) -> list[int]:
    """Keys of the prompt's cacheable full blocks, first block first."""
    keys: list[int] = []
    prev = b""
    for i in range((len(prompt_token_ids) - 1) // block_size):
        prev = chain_hash(prev, prompt_token_ids[i * block_size:(i + 1) * block_size])
        keys.append(block_key(prev))
    return keys
