"""A registry of tiny engines (random 2-layer Llama, tests only) behind the real app, for the registry's
behaviour through HTTP: every model here is a real engine, built and torn down by the registry's own load
and unload; only the weights are tiny."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from haltwise.config import EngineConfig
from haltwise.registry.entry import ModelEntry
from haltwise.registry.memory import LoadEstimate, MemoryBudget
from haltwise.registry.registry import ModelRegistry

ESTIMATE = LoadEstimate(weights=4 << 20, kv_pool=8 << 20, caches=4 << 20)


def build_tiny(path: Path, estimate: LoadEstimate, max_model_len: int = 256) -> Any:
    from haltwise.engine.async_engine import AsyncEngine

    return AsyncEngine.build(engine_config=EngineConfig(kv_cache_memory=estimate.kv_pool, max_model_len=max_model_len),
                             tiny=True)


def build_long(path: Path, estimate: LoadEstimate) -> Any:
    """A tiny engine with a 16k window: a stream of thousands of tokens stays in flight for seconds."""
    return build_tiny(path, LoadEstimate(estimate.weights, 64 << 20, estimate.caches), max_model_len=16384)


def tiny_registry(names: list[str], loader: Any = build_tiny, **kwargs: Any) -> ModelRegistry:
    entries = [ModelEntry(n, Path(f"/models/{n}.gguf")) for n in names]
    kwargs.setdefault("budget", MemoryBudget(limit=1 << 30, reserve=0))
    return ModelRegistry(entries, names[0], loader, lambda path, free: ESTIMATE, **kwargs)
