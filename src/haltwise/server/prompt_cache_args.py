"""`haltwise serve` options of the prompt cache beyond the KV pool (engine/prompt_cache; docs/prompt-cache.md)."""
from __future__ import annotations

import argparse
from pathlib import Path

from haltwise.engine.prompt_cache.settings import (DISK_DEFAULT_CAP, RAM_DEFAULT_CAP, RAM_DEFAULT_SHARE,
                                                   PromptCacheSettings, default_disk_bytes, default_ram_bytes)
from haltwise.memory_size import parse_memory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--prompt-cache-ram", default="auto", metavar="SIZE",
      help="host RAM for prompt blocks evicted from the KV pool, restored bit-exact instead of prefilled: bytes "
           f"(2GiB), 0 = off, or auto (default): {RAM_DEFAULT_SHARE * 100:.0f}%% of available RAM, at most "
           f"{RAM_DEFAULT_CAP // 2**30} GiB")
    a("--prompt-cache-dir", default=None, metavar="DIR",
      help="also keep prompt blocks on disk in DIR, across restarts (default: off); DIR must be ours and not "
           "writable by others")
    a("--prompt-cache-disk", default="auto", metavar="SIZE",
      help=f"most bytes DIR may hold (LRU): bytes, or auto (default): half its filesystem's free space, at most "
           f"{DISK_DEFAULT_CAP // 2**30} GiB")


def _size(text: str, flag: str, auto: int) -> int:
    try:
        value = parse_memory(text)
    except ValueError:
        raise SystemExit(f"haltwise serve: error: {flag}: not a size: {text!r}") from None
    value = auto if value == "auto" else value
    if value < 0:
        raise SystemExit(f"haltwise serve: error: {flag} must be >= 0")
    return int(value)


def settings_from(args: argparse.Namespace, no_prefix_caching: bool = False) -> PromptCacheSettings:
    """The settings the options ask for (the prompt cache needs the prefix cache: off with it)."""
    if no_prefix_caching:
        return PromptCacheSettings(0)
    ram = _size(args.prompt_cache_ram, "--prompt-cache-ram", 0)
    if args.prompt_cache_ram == "auto":
        ram = default_ram_bytes()
    root = args.prompt_cache_dir
    disk = 0
    if root is not None:
        disk = _size(args.prompt_cache_disk, "--prompt-cache-disk", 0)
        if args.prompt_cache_disk == "auto":
            disk = default_disk_bytes(Path(root).expanduser())
    return PromptCacheSettings(ram, root, disk, replicas=args.replicas or 1)
