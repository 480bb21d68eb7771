"""`haltwise serve` with several models (--models-dir, or --model more than once): the options, and the
ModelRegistry they describe (haltwise.registry). One model (the default) never comes here: it is built
before the server starts, exactly as it always was."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

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


def build_registry(args: argparse.Namespace, tiers: Any = None) -> Any:
    """The registry of a several-model server; the --model ones load at start. tiers: the server's prompt-cache
    tiers (engine/prompt_cache), shared by every model's engine; their RAM budget is kept out of the models'."""
    from haltwise.engine.async_engine import AsyncEngine
    from haltwise.registry.durations import parse_keep_alive
    from haltwise.registry.entry import ModelEntry
    from haltwise.registry.memory import MemoryBudget
    from haltwise.registry.registry import ModelRegistry
    from haltwise.registry.sizing import estimate_load
    from haltwise.tools.model_args import engine_config_from

    table, preload = sources(args)
    config = engine_config_from(args)

    def load(path: Path, estimate: Any) -> Any:
        engine = AsyncEngine.build(str(path), replace(config, kv_cache_memory=estimate.kv_pool),
                                   rope_scaling=args.rope_scaling, default_timeout=args.default_timeout,
                                   watchdog_s=args.watchdog, prompt_tiers=tiers)
        if args.chat_template is not None and engine.tokenizer.chat_template is None:
            engine.tokenizer.set_chat_template(args.chat_template)   # models whose file has no template
        return engine

    budget = MemoryBudget(limit=args.models_memory, reserve=args.memory_reserve,
                          reserved_bytes=lambda: tiers.budget_bytes if tiers is not None else 0)
    registry = ModelRegistry([ModelEntry(name, path) for name, path in table], table[0][0], load,
                             lambda path, free: estimate_load(path, config, free), max_loaded=args.models_max,
                             keep_alive_s=parse_keep_alive(args.model_keep_alive or DEFAULT_KEEP_ALIVE),
                             budget=budget)
    registry.preload = preload[:args.models_max]
    return registry
