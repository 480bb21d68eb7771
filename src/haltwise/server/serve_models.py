"""`haltwise serve` with several models (--models-dir, or --model more than once): the options, and the
ModelRegistry they describe (haltwise.registry). One model (the default) never comes here: it is built
before the server starts, exactly as it always was."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from haltwise.config import EngineConfig
from haltwise.memory_size import parse_memory

DEFAULT_KEEP_ALIVE = "5m"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--models-dir", default=None, metavar="DIR",
      help="serve every *.gguf in DIR, named by its file name without .gguf, loaded on demand")
    a("--models-max", type=int, default=4, metavar="N",
      help="models loaded at once (default 4); loading one more unloads the least recently used idle one")
    a("--model-keep-alive", default=None, metavar="DURATION",
      help="how long a model stays loaded after its last request (5m, 30s, 1h; -1 forever; default 5m with "
           "several models, forever with one). Not --keep-alive-timeout, which is the HTTP connection's idle time")
    a("--models-memory", type=parse_memory, default=None, metavar="BYTES",
      help="memory all loaded models may take together (default: what the host has available)")
    a("--memory-reserve", type=parse_memory, default=512 << 20, metavar="BYTES",
      help="memory left to the host and the server beside the models (default 512MiB)")


def several_models(args: argparse.Namespace) -> bool:
    return bool(args.models_dir) or len(args.model or []) > 1


def sources(args: argparse.Namespace) -> tuple[list[tuple[str, Path]], list[str]]:
    """([(name, path)] in order, the names given with --model): each --model first, then DIR's files."""
    from haltwise.models.catalog import resolve_model
    from haltwise.server.served_name import default_served_name

    named = [(default_served_name(m), Path(resolve_model(m))) for m in args.model or []]
    found = []
    if args.models_dir:
        folder = Path(args.models_dir)
        if not folder.is_dir():
            raise ValueError(f"--models-dir {folder}: not a directory")
        found = [(p.name[:-len(".gguf")], p) for p in sorted(folder.glob("*.gguf"))]
        if not found and not named:
            raise ValueError(f"--models-dir {folder}: no *.gguf file in it")
    table: dict[str, Path] = {}
    for name, path in named + found:
        if name in table and table[name].resolve() != path.resolve():
            raise ValueError(f"two models are named {name!r}: {table[name]} and {path}")
        table.setdefault(name, path)
    return list(table.items()), [n for n, _ in named]


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


def spec_from(args: argparse.Namespace) -> RegistrySpec:
    """The registry spec of `haltwise serve --models-dir / several --model` (ValueError: a bad folder)."""
    from haltwise.registry.durations import parse_keep_alive
    from haltwise.tools.model_args import engine_config_from

    table, preload = sources(args)
    return RegistrySpec(tuple(table), tuple(preload[:args.models_max]), engine_config_from(args), args.rope_scaling,
                        args.default_timeout, args.watchdog, args.chat_template, args.models_max,
                        parse_keep_alive(args.model_keep_alive or DEFAULT_KEEP_ALIVE), args.models_memory,
                        args.memory_reserve)


def build_registry(args: argparse.Namespace, tiers: Any = None) -> Any:
    """The registry of a several-model server; the --model ones load at start. tiers: the server's prompt-cache
    tiers (engine/prompt_cache), shared by every model's engine; their RAM budget is kept out of the models'."""
    return registry_from(spec_from(args), tiers)


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
