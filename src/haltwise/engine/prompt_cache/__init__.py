"""Prompt cache beyond the KV pool: full prompt blocks kept in host RAM and on disk, restored bit-exact.

The pool (engine/block_allocator.py) knows nothing of where its blocks go. It tells a listener two things:
a full block was registered in the prefix cache (computed, hashed), and a cached block is being evicted
(its KV is about to be overwritten). The engine's link (engine_link.py) turns those into tier calls and,
when a new sequence's prefix misses the pool, asks the tiers for the longest run of following blocks and
copies their bytes into the sequence's fresh pool blocks instead of prefilling them.

    pool (KV tensors)  --evicted-->  RamTier (ram_tier.py, LRU, bytes in host RAM)
          |           --registered--> DiskTier (disk_tier.py, background writer, LRU files)
          <-- restore: RAM first, else disk (PromptCache.find_prefix / load, prompt_cache.py)

A block's bytes are all layers' K and V rows exactly as the pool stores them (int8 rows with their float32
scales, or float32/bfloat16 rows: block_bytes.py): nothing is re-quantized, so a restored block is the block
a fresh prefill writes, and the batch-invariant default path gives the same tokens (SPEC §11).

Keys: (namespace, chain hash). The chain hash is the prefix cache's own (prefix_chain.chain_hash: equal
hashes mean equal whole prefixes); the namespace (identity.py) digests everything that changes the bits of a
block: the model file, KV dtype, block size, kernel plan, RoPE settings, the layer shape and FORMAT_VERSION.
A different namespace is a miss, never a wrong hit.

Contract with the server (and the model registry, several models per server): the server creates ONE RamTier
and at most ONE DiskTier and passes them to every engine it builds (build_engine(prompt_tiers=...)); each
engine binds them to its own namespace, so entries are kept per model file and the budgets are shared.
Both tiers expose `budget_bytes` (the most they will ever hold) and `used_bytes` (what they hold now); the
server's memory budget subtracts RamTier.budget_bytes (the disk tier holds no RAM beyond its bounded
write queue, WRITE_QUEUE_BLOCKS blocks). Both are thread-safe: engines on different threads share them.
"""
from haltwise.engine.prompt_cache.disk_tier import DiskTier
from haltwise.engine.prompt_cache.prompt_cache import PromptCache, PromptTiers
from haltwise.engine.prompt_cache.ram_tier import RamTier

__all__ = ["DiskTier", "PromptCache", "PromptTiers", "RamTier"]
