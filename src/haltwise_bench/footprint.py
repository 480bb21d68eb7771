"""`haltwise bench footprint`: start -> ready and peak memory, haltwise vs llama-server at the same KV capacity.

For each model (catalog names or GGUF files), in one run:
  1. `haltwise serve --model M` with default flags (its plan and tokenizer already cached: the second
     start a user sees; --first-start adds a start with empty plan / tokenizer caches first);
  2. its KV capacity read from the start line ("KV cache: B blocks x 16 tokens = T tokens");
  3. llama.cpp's llama-server on the same GGUF with -np 32 and -c T (the same tokens of KV), its own
     default KV type (f16);
  4. each serves the same --requests streamed completions of --max-tokens tokens; peak RSS (VmHWM) is
     read after them, and for haltwise once its whole KV pool is committed (it commits after ready:
     haltwise_kv_blocks_committed reaches haltwise_kv_blocks_total), so both hold their whole pool.
Ready = start -> first 200 from /ready (haltwise) or /health (llama-server), the median of --starts starts
of each (the last one serves the requests): one start's time moved 30% between runs here. Ratios are
haltwise / peer.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from haltwise_bench import common, llama_cpp
from haltwise_bench.load_client import run_load
from haltwise_bench.peers import model_eos_ids, server_request_bodies
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd
from haltwise_bench.stress_report import gauge, parse_metrics

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m")
PARALLEL = 32
SETTLE_S = 120.0     # longest wait for haltwise's pool to finish committing before peak RSS is read
_CAPACITY = re.compile(r"KV cache: (\d+) blocks x (\d+) tokens = (\d+) tokens")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(MODELS), help="comma list of catalog names or GGUF files")
    p.add_argument("--requests", type=int, default=8, help="streamed completions served before reading peak RSS")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--starts", type=int, default=3, help="starts of each server; ready is their median")
    p.add_argument("--first-start", action="store_true", help="also time a start with empty plan/tokenizer caches")
    p.add_argument("--llama-bin", default=None, help="directory with llama-server (default: make bench-setup's)")
    p.add_argument("--json", default=None, metavar="PATH")


def kv_capacity(log: str) -> int:
    """The KV token capacity haltwise printed at start."""
    found = _CAPACITY.search(log)
    if not found:
        raise RuntimeError(f"no 'KV cache: ... tokens' line in the haltwise log:\n{log[-2000:]}")
    return int(found.group(3))


def _serve(server: ServerProcess, earlier_ready_s: list[float], requests: int, max_tokens: int,
           extra: dict[str, Any], settle: Callable[[], bool] = lambda: True) -> dict[str, Any]:
    prompts = [common.long_text(400 * requests)[i * 400:(i + 1) * 400] for i in range(requests)]
    load = asyncio.run(run_load(server.base_url, prompts, min(requests, PARALLEL), max_tokens, extra_body=extra))
    deadline = time.monotonic() + SETTLE_S
    while not settle() and time.monotonic() < deadline:
        time.sleep(0.1)
    starts = [*earlier_ready_s, server.ready_s]
    return {"ready_s": statistics.median(starts), "ready_s_each": starts, "peak_rss_mib": server.peak_rss_mib(),
            "failed": load.failed, "settled": settle()}


def _ready_times(make: Callable[[], ServerProcess], times: int) -> list[float]:
    """Start -> ready of `times` starts of a server, each stopped once ready."""
    out = []
    for _ in range(times):
        server = make()
        try:
            server.start()
            out.append(server.ready_s)
        finally:
            server.stop()
    return out


def _pool_committed(server: ServerProcess) -> bool:
    """haltwise's whole KV pool is committed (its metrics say so)."""
    samples = parse_metrics(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
    total = gauge(samples, "haltwise_kv_blocks_total")
    return bool(total) and gauge(samples, "haltwise_kv_blocks_committed") == total


def _haltwise(gguf: str, threads: int, env: dict[str, str] | None = None) -> ServerProcess:
    port = free_port()
    return ServerProcess(haltwise_server_cmd(port, "auto", False, gguf, ("--threads", str(threads))), port,
                         "haltwise", "/ready", start_timeout_s=1800.0, env=env)


def _llama_server(directory: Path, gguf: str, threads: int, kv_tokens: int) -> ServerProcess:
    port = free_port()
    return ServerProcess(llama_cpp.llama_server_cmd(directory, port, gguf, threads, PARALLEL,
                                                    max(1, kv_tokens // PARALLEL)), port, "llama-server", "/health")


def measure(model: str, args: argparse.Namespace, directory: Path | None) -> dict[str, Any]:
    from haltwise.models.catalog import resolve_model

    gguf = str(resolve_model(model))
    bodies = server_request_bodies(model_eos_ids(gguf))
    row: dict[str, Any] = {"model": model, "gguf": gguf}
    if args.first_start:
        with tempfile.TemporaryDirectory() as empty:
            (row["haltwise_first_ready_s"],) = _ready_times(lambda: _haltwise(gguf, args.threads,
                                                                              {"HALTWISE_CACHE_DIR": empty}), 1)
    earlier = _ready_times(lambda: _haltwise(gguf, args.threads), args.starts - 1)
    ours = _haltwise(gguf, args.threads)
    try:
        ours.start()
        row["kv_tokens"] = kv_capacity(ours.log_tail(100_000))
        row["haltwise"] = _serve(ours, earlier, args.requests, args.max_tokens, bodies["haltwise"],
                                 settle=lambda: _pool_committed(ours))
    finally:
        ours.stop()
    if directory is not None:
        earlier = _ready_times(lambda: _llama_server(directory, gguf, args.threads, row["kv_tokens"]), args.starts - 1)
        with _llama_server(directory, gguf, args.threads, row["kv_tokens"]) as peer:
            row["llama.cpp"] = _serve(peer, earlier, args.requests, args.max_tokens, bodies["llama.cpp"])
        for key in ("ready_s", "peak_rss_mib"):
            a, b = row["haltwise"][key], row["llama.cpp"][key]
            row[f"{key}_ratio"] = round(a / b, 2) if a and b else None
    return row


def run(args: argparse.Namespace) -> int:
    if args.starts < 1:
        print("bench footprint: --starts must be at least 1", file=sys.stderr)
        return 2
    directory = llama_cpp.bin_dir(args.llama_bin)
    if llama_cpp.missing_binaries(directory):
        print(f"bench footprint: {llama_cpp.SETUP_HINT.format(where=directory)}; measuring haltwise alone",
              file=sys.stderr)
        directory = None
    rows = []
    for model in [m for m in args.models.split(",") if m]:
        print(f"[footprint] {model}", file=sys.stderr, flush=True)
        rows.append(measure(model, args, directory))
    print(f"{'model':<22} {'KV tokens':>9} {'ready s (ours/peer = x)':>26} {'peak RSS MiB (ours/peer = x)':>32}"
          f"  (ready: median of {args.starts} starts)")
    for r in rows:
        ours, peer = r["haltwise"], r.get("llama.cpp") or {}
        ready = f"{ours['ready_s']:.1f}" + (f" / {peer['ready_s']:.1f} = {r['ready_s_ratio']}x" if peer else "")
        rss = f"{ours['peak_rss_mib']:.0f}" + (
            f" / {peer['peak_rss_mib']:.0f} = {r['peak_rss_mib_ratio']}x" if peer else "")
        first = f"  (first start {r['haltwise_first_ready_s']:.1f} s)" if "haltwise_first_ready_s" in r else ""
        first += "" if ours["settled"] else f"  (haltwise's pool still committing after {SETTLE_S:.0f} s)"
        first += "  starts: " + " ".join(f"{t:.1f}" for t in ours["ready_s_each"]) + (
            " / " + " ".join(f"{t:.1f}" for t in peer["ready_s_each"]) if peer else "")
        print(f"{r['model']:<22} {r['kv_tokens']:>9} {ready:>26} {rss:>32}{first}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0
