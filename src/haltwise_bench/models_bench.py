"""`haltwise bench models`: what several models from one server cost the client.

One `haltwise serve --models-dir` (two catalog GGUFs symlinked into a temp folder, --models-max 1):
  - first request to an unloaded model, page cache cold (the file's pages dropped with
    posix_fadvise(DONTNEED), which needs no privilege for clean pages) and warm: time to first token,
    the load included;
  - switch: A then B then A with room for one model: each request's time to first token (unload + load);
  - loaded: the same request once its model is loaded (the floor).
Peer: llama-server's router mode (--models-dir) is not built on this host; the JSON says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from haltwise_bench.common import environment, write_json
from haltwise_bench.servers import ServerProcess, free_port


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="smollm2-135m,gemma3-270m", help="two catalog names (default smollm2, gemma3)")
    p.add_argument("--kv-cache-memory", default="128MiB", help="each model's KV pool (default 128MiB)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")


def drop_page_cache(path: Path) -> bool:
    """Ask the kernel to drop the file's clean cached pages; False where it cannot."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return True
    except (OSError, AttributeError):
        return False


def ttft(url: str, model: str) -> float:
    """Seconds from the request to its first streamed token."""
    start = time.monotonic()
    with httpx.stream("POST", f"{url}/v1/completions", timeout=3600,
                      json={"model": model, "prompt": "The capital of France is", "max_tokens": 4,
                            "temperature": 0, "stream": True}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and '"text":""' not in line.replace(" ", ""):
                return time.monotonic() - start
    raise RuntimeError("no token streamed")


def unload(url: str, model: str) -> None:
    httpx.post(f"{url}/models/unload", json={"model": model}, timeout=600).raise_for_status()


def run(args: argparse.Namespace) -> int:
    from haltwise.models.catalog import resolve_model

    a, b = args.models.split(",")[:2]
    folder = Path(tempfile.mkdtemp(prefix="bench-models-"))
    files = {m: folder / f"{m}.gguf" for m in (a, b)}
    for m, link in files.items():
        link.symlink_to(resolve_model(m))
    port = free_port()
    cmd = [sys.executable, "-m", "haltwise.cli", "serve", "--models-dir", str(folder), "--models-max", "1",
           "--kv-cache-memory", args.kv_cache_memory, "--port", str(port)]
    figures: dict[str, Any] = {}
    with ServerProcess(cmd, port, "haltwise") as server:
        url = server.base_url
        figures["server_start_s"] = server.ready_s
        cold = drop_page_cache(files[a].resolve())
        figures[f"first_request_ttft_s[{a}, page cache {'cold' if cold else 'as found'}]"] = ttft(url, a)
        figures[f"loaded_ttft_s[{a}]"] = ttft(url, a)
        unload(url, a)
        figures[f"first_request_ttft_s[{a}, page cache warm]"] = ttft(url, a)
        figures[f"switch_ttft_s[{a} -> {b}]"] = ttft(url, b)
        figures[f"switch_ttft_s[{b} -> {a}]"] = ttft(url, a)
    payload = {"figures": figures, "peer": "llama-server router mode: not run (not built on this host)",
               "settings": {"models": [a, b], "models_max": 1, "kv_cache_memory": args.kv_cache_memory},
               "environment": environment()}
    for name, value in figures.items():
        print(f"{name:<60} {value:8.2f}" if value is not None else f"{name:<60} -")
    print(payload["peer"])
    write_json(args.json, payload)
    return 0
