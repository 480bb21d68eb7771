"""What loading one model will take, before it loads: its weights, its KV pool and its caches.

The KV pool of a model loaded by the registry is sized from what is free at that moment, by the rule
`--kv-cache-memory auto` applies at start (engine/kv_cache.py: a share of the RAM available, at least one
full sequence where that fits, at most --max-num-seqs of them), over the memory the budget leaves after
the weights and caches; an explicit --kv-cache-memory is taken as it is, for every model.
"""
from __future__ import annotations

from pathlib import Path

from haltwise.config import EngineConfig
from haltwise.engine.expert_weights import expert_bytes, maps_experts
from haltwise.engine.kv_cache import auto_pool_memory
from haltwise.engine.window_blocks import window_pool_blocks
from haltwise.registry.memory import LoadEstimate, weights_and_caches


def estimate_load(path: Path, config: EngineConfig, free: int) -> LoadEstimate:
    """The estimate for `path` under `config`, its KV pool sized from `free` bytes (auto)."""
    from haltwise.tools.model_args import read_model_config

    _, model_config = read_model_config(str(path))
    mapped = expert_bytes(path) if maps_experts(config.expert_weights, path) else 0
    weights, caches = weights_and_caches(path, model_config.vocab_size, model_config.hidden_size, mapped)
    if config.kv_cache_memory != "auto":
        return LoadEstimate(weights, int(config.kv_cache_memory), caches)
    max_len = config.max_model_len or model_config.max_position_embeddings
    window = window_pool_blocks(model_config, config, max_len)
    kv = auto_pool_memory(model_config, config.kv_dtype, config.block_size, max_len, config.max_num_seqs, window,
                          available=max(0, free - weights - caches))
    return LoadEstimate(weights, kv, caches)
