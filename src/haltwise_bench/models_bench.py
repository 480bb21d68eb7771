"""`haltwise bench models`: what several models from one server cost the client.

One `haltwise serve --models-dir` (two catalog GGUFs symlinked into a temp folder, --models-max 1):
  - first request to an unloaded model, page cache cold (the file's pages dropped with
    posix_fadvise(DONTNEED), which needs no privilege for clean pages) and warm: time to first token,
    the load included;
  - switch: A then B then A with room for one model: each request's time to first token (unload + load);
  - loaded: the same request once its model is loaded (the floor).
Peer: llama-server's router mode on the same folder (--models-dir, --models-max 1, the same sequence through its
/v1/completions and /models/unload), from `make bench-router-setup` (a newer llama.cpp than `make bench-setup`'s:
router mode came in December 2025); `--router-bin DIR` points elsewhere. Not built: the JSON says so.
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

ROUTER_BIN = Path.home() / ".cache" / "haltwise" / "peer-router" / "build" / "bin"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="smollm2-135m,gemma3-270m", help="two catalog names (default smollm2, gemma3)")
    p.add_argument("--kv-cache-memory", default="128MiB", help="each model's KV pool (default 128MiB)")
    p.add_argument("--router-bin", type=Path, default=ROUTER_BIN,
                   help="directory of a llama-server with router mode (default: make bench-router-setup's)")
    p.add_argument("--threads", type=int, default=2, help="the peer's -t (default 2)")
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


def sequence(url: str, files: dict[str, Path]) -> dict[str, float]:
    """The measured sequence on one server holding room for one model: first request (page cache cold, then
    warm after an unload), a loaded model's request, and switches A -> B -> A."""
    a, b = files
    figures: dict[str, float] = {}
    cold = drop_page_cache(files[a].resolve())
    figures[f"first_request_ttft_s[{a}, page cache {'cold' if cold else 'as found'}]"] = ttft(url, a)
    figures[f"loaded_ttft_s[{a}]"] = ttft(url, a)
    unload(url, a)
    figures[f"first_request_ttft_s[{a}, page cache warm]"] = ttft(url, a)
    figures[f"switch_ttft_s[{a} -> {b}]"] = ttft(url, b)
    figures[f"switch_ttft_s[{b} -> {a}]"] = ttft(url, a)
    return figures


def router_missing(directory: Path) -> str | None:
    """Why the router peer cannot run from `directory`, or None."""
    server = directory / "llama-server"
    if not server.exists():
        return f"llama-server router mode: not run ({server} missing: make bench-router-setup)"
    import subprocess

    help_text = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=60).stdout
    return None if "--models-dir" in help_text else f"llama-server router mode: not run ({server} has no --models-dir)"


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
    systems: dict[str, dict[str, Any]] = {}
    with ServerProcess(cmd, port, "haltwise") as server:
        systems["haltwise"] = {"server_start_s": server.ready_s, **sequence(server.base_url, files)}
    why = router_missing(args.router_bin)
    if why is None:
        port = free_port()
        peer = [str(args.router_bin / "llama-server"), "--models-dir", str(folder), "--models-max", "1",
                "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads), "-c", "4096"]
        with ServerProcess(peer, port, "llama-router") as server:
            systems["llama-server router"] = {"server_start_s": server.ready_s, **sequence(server.base_url, files)}
    payload = {"systems": systems, "peer": why or f"llama-server router mode from {args.router_bin}",
               "settings": {"models": [a, b], "models_max": 1, "kv_cache_memory": args.kv_cache_memory,
                            "peer_args": "-t %d -c 4096" % args.threads},
               "environment": environment()}
    names = list(systems)
    ratio_head = "   ratio (peer / haltwise)" if len(names) > 1 else ""
    print(f"{'figure':<58} " + " ".join(f"{n:>20}" for n in names) + ratio_head)
    for figure, ours in systems["haltwise"].items():
        values = [systems[n].get(figure) for n in names]
        ratio = f"   {values[1] / ours:.2f}x" if len(values) > 1 and ours and values[1] is not None else ""
        print(f"{figure:<58} " + " ".join(f"{v:>20.2f}" if v is not None else f"{'-':>20}" for v in values) + ratio)
    print(payload["peer"])
    write_json(args.json, payload)
    return 0
