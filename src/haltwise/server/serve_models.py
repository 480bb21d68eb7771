"""`haltwise serve` with several models (--models-dir, or --model more than once): the options, and the
ModelRegistry they describe (haltwise.registry). One model (the default) never comes here: it is built
before the server starts, exactly as it always was."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from haltwise.memory_size import parse_memory
from haltwise.registry.spec import RegistrySpec, registry_from

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
