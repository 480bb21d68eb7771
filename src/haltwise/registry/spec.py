"""What a several-model registry is built from (RegistrySpec: picklable, so each Ray replica builds its own) and
the ModelRegistry it describes (registry_from): one process's `--models-dir` server and every ModelsReplica."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from haltwise.config import EngineConfig


@dataclass(frozen=True, slots=True)
class RegistrySpec:
    """What a several-model registry is built from; picklable, so that each Ray replica builds its own."""

    table: tuple[tuple[str, Path], ...]    # (name, path) in order; the first is the default model
    preload: tuple[str, ...]               # the --model names, loaded at start
    config: EngineConfig                   # each model's engine config (its KV pool is sized at load)
    rope_scaling: dict | None
    default_timeout: float | None
    watchdog_s: float
    chat_template: str | None              # --chat-template: for the models whose file has none
    models_max: int
    keep_alive_s: float
    models_memory: int | None              # --models-memory (None: what the host has)
    memory_reserve: int


def registry_from(spec: RegistrySpec, tiers: Any = None, models_memory: int | None = None,
                  preload: bool = True) -> Any:
    """The ModelRegistry a spec describes. models_memory: overrides spec.models_memory (a replica's share)."""
    from haltwise.engine.async_engine import AsyncEngine
    from haltwise.registry.entry import ModelEntry
    from haltwise.registry.memory import MemoryBudget
    from haltwise.registry.registry import ModelRegistry
    from haltwise.registry.sizing import estimate_load

    config = spec.config

    def load(path: Path, estimate: Any) -> Any:
        engine = AsyncEngine.build(str(path), replace(config, kv_cache_memory=estimate.kv_pool),
                                   rope_scaling=spec.rope_scaling, default_timeout=spec.default_timeout,
                                   watchdog_s=spec.watchdog_s, prompt_tiers=tiers)
        if spec.chat_template is not None and engine.tokenizer.chat_template is None:
            engine.tokenizer.set_chat_template(spec.chat_template)   # models whose file has no template
        return engine

    budget = MemoryBudget(limit=models_memory if models_memory is not None else spec.models_memory,
                          reserve=spec.memory_reserve,
                          reserved_bytes=lambda: tiers.budget_bytes if tiers is not None else 0)
    registry = ModelRegistry([ModelEntry(name, path) for name, path in spec.table], spec.table[0][0], load,
                             lambda path, free: estimate_load(path, config, free), max_loaded=spec.models_max,
                             keep_alive_s=spec.keep_alive_s, budget=budget)
    registry.preload = list(spec.preload) if preload else []
    return registry
