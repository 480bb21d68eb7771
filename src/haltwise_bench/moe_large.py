"""`haltwise bench moe-large`: a mixture-of-experts model larger than half the memory starts and answers (issue 47),
haltwise's default flags beside llama-server on the same file, same run.

The file (moe_stacked.py): Qwen3-30B-A3B's real layer shapes, random weights quantized to Q4_K_M by
llama-quantize, --layers layers (default: the fewest that make it larger than 55% of this host's memory limit,
engine/expert_weights.memory_limit). Per system, in turn (the order alternates with --repeats):

  ready_s      start -> the model list answers (haltwise's first start writes the experts' records once:
               `first` in the table; later starts map them)
  memory       the server's /proc/PID/status once ready and after the requests: VmRSS, its anonymous part
               (RssAnon: what the process holds itself) and its file-backed part (RssFile: mapped pages the kernel
               can drop and read again), and VmHWM, its peak; the host's MemAvailable before the start
  decode       --requests streamed completions of --max-tokens greedy tokens, one at a time, eos ignored:
               tokens after the first over the time after the first (the text is noise: random weights)

haltwise runs `haltwise serve --model FILE --threads T` and nothing else (its default --expert-weights auto maps
the experts of a file this size); llama-server `-t T -c 4096 --jinja -fa on -ctk q8_0 -ctv q8_0`, its default
mmap on. --haltwise-arg passes more flags (e.g. --expert-weights resident, to see what holding them costs).
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from haltwise.engine.kv_cache import available_ram
from haltwise_bench import common, llama_cpp
from haltwise_bench.common import Progress, median
from haltwise_bench.load_client import run_load
from haltwise_bench.moe_gguf import MoeShape
from haltwise_bench.moe_stacked import stacked_file
from haltwise_bench.peers_servers import model_eos_ids, server_request_bodies
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd

SHARE = 0.55                    # the default file's size over the memory limit
STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=int, default=None,
                        help=f"MoE layers (default: the fewest making the file > {SHARE * 100:.0f}%% of the "
                             "memory limit)")
    parser.add_argument("--requests", type=int, default=3, help="completions per server, one at a time")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1, help="starts per system (alternating who goes first)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--haltwise-arg", action="append", default=[], metavar="ARG",
                        help="an extra `haltwise serve` argument (repeatable), e.g. --haltwise-arg=--expert-weights "
                             "--haltwise-arg=resident")
    parser.add_argument("--memory-limit", type=float, default=None, metavar="GIB",
                        help="run each server in a new memory cgroup of this many GiB (v1 or v2, where this user "
                             "may make one): the file is then larger than the memory the servers may use")
    parser.add_argument("--start-limit", type=float, default=1800.0, metavar="S",
                        help="seconds a server may take to be ready (default 1800); past it, its row says so")
    parser.add_argument("--skip-peer", action="store_true", help="haltwise only")
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--llama-bin", default=None, help="directory with llama-quantize and llama-server")


def run(args: argparse.Namespace) -> int:
    from haltwise.engine.expert_weights import memory_limit

    directory = llama_cpp.bin_dir(args.llama_bin)
    needed = ("llama-quantize",) + (() if args.skip_peer else ("llama-server",))
    if missing := llama_cpp.missing_binaries(directory, needed):
        print(f"llama.cpp's {', '.join(missing)} not found in {directory}: `make bench-setup` builds them")
        return 2
    progress = Progress()
    shape = MoeShape()
    limit = int(args.memory_limit * 2**30) if args.memory_limit else memory_limit()
    layers = args.layers or layers_for(SHARE * limit, shape, directory, progress)
    path = stacked_file(shape, layers, directory / "llama-quantize", progress)
    size = path.stat().st_size
    progress(f"{path.name}: {size / 2**30:.1f} GiB, {layers} layers; memory limit {limit / 2**30:.1f} GiB")
    bodies = server_request_bodies(model_eos_ids(str(path)))
    systems = ["haltwise"] + ([] if args.skip_peer else ["llama.cpp"])
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for turn in range(args.repeats):
        for system in systems[:: 1 if turn % 2 == 0 else -1]:
            progress(f"{system}: start {turn + 1}/{args.repeats}")
            with MemoryGroup(args.memory_limit) as group:
                server = _server(system, path, args, directory, group.enter)
                rows[system].append(measure(server, args, bodies[system]))
    common.write_json(args.json, {"benchmark": "moe-large", "environment": common.environment(), "file": str(path),
                                  "file_bytes": size, "layers": layers, "memory_limit": limit,
                                  "threads": args.threads, "haltwise_args": args.haltwise_arg,
                                  "memory_cgroup_gib": args.memory_limit, "runs": rows})
    print(table(rows, path, size, limit, layers, args))
    return 0


def layers_for(target: float, shape: MoeShape, directory: Path, progress) -> int:
    """The fewest layers whose stacked file exceeds `target` bytes (a layer's size from the 1- and 2-layer files)."""
    one = stacked_file(shape, 1, directory / "llama-quantize", progress).stat().st_size
    two = stacked_file(shape, 2, directory / "llama-quantize", progress).stat().st_size
    return max(1, math.ceil((target - (one - (two - one))) / (two - one)))


def _server(system: str, path: Path, args: argparse.Namespace, directory: Path, enter: list[str]) -> ServerProcess:
    port = free_port()
    if system == "haltwise":
        cmd = haltwise_server_cmd(port, "auto", False, str(path), ("--threads", str(args.threads), *args.haltwise_arg))
        return ServerProcess(enter + cmd, port, "haltwise", start_timeout_s=args.start_limit)
    cmd = llama_cpp.llama_server_cmd(directory, port, path, args.threads, 1, 4096) + llama_cpp.peer_options()
    return ServerProcess(enter + cmd, port, "llama-server", "/health", start_timeout_s=args.start_limit)


def measure(server: ServerProcess, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    available = available_ram()
    try:
        server.start()
    except RuntimeError as e:                       # e.g. killed by the cgroup's OOM killer: a row that says so
        return {"error": str(e).splitlines()[0], "mem_available_before": available}
    try:
        ready = status(server.pid)
        load = asyncio.run(run_load(server.base_url, [f"Tell me about number {i}." for i in range(args.requests)],
                                    1, args.max_tokens, extra_body=extra, rounds=args.requests))
        after = status(server.pid)
    finally:
        server.stop()
    rates = [(r.completion_tokens - 1) / (r.latency_s - r.ttft_s) for r in load.ok
             if r.ttft_s is not None and r.latency_s > r.ttft_s and r.completion_tokens > 1]
    return {"ready_s": server.ready_s, "mem_available_before": available, "ready": ready, "after": after,
            "failed": load.failed, "decode_tokens_per_s": median(rates), "ttft_p50_s": load.ttft_percentile(50)}


def status(pid: int | None) -> dict[str, int]:
    """STATUS_KEYS of /proc/PID/status, bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_KEYS:
            out[key] = int(value.split()[0]) * 1024
    return out


def table(rows: dict[str, list[dict[str, Any]]], path: Path, size: int, limit: int, layers: int,
          args: argparse.Namespace) -> str:
    gib = lambda n: f"{n / 2**30:.2f}" if n is not None else "-"          # noqa: E731
    mem = lambda m: f"{gib(m.get('VmRSS'))} ({gib(m.get('RssAnon'))} + {gib(m.get('RssFile'))})"  # noqa: E731
    where = "each server's cgroup" if args.memory_limit else "this host's"
    lines = [f"MoE larger than half the memory: {path.name}, {gib(size)} GiB ({layers} layers of Qwen3-30B-A3B's "
             f"shapes), memory limit {gib(limit)} GiB ({where}), {args.threads} threads, {args.requests} x "
             f"{args.max_tokens} tokens", "",
             "| system | start | ready s | RSS ready GiB (anon + file) | RSS after GiB (anon + file) | peak GiB | "
             "decode tok/s | TTFT p50 s | failed |", "|---|---|---|---|---|---|---|---|---|"]
    for system, runs in rows.items():
        for i, r in enumerate(runs):
            if "error" in r:
                lines.append(f"| {system} | {i + 1} | {r['error'][:100]} | | | | | | |")
                continue
            a, b = r["ready"], r["after"]
            lines.append(f"| {system} | {i + 1} | {r['ready_s']:.1f} | {mem(a)} | {mem(b)} | {gib(b.get('VmHWM'))} | "
                         f"{_f(r['decode_tokens_per_s'])} | {_f(r['ttft_p50_s'])} | {r['failed']} |")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


class MemoryGroup:
    """A new memory cgroup limited to `gib` GiB for one server (None: no group): `enter` prefixes its command so
    the server starts inside it (its threads and the page cache it reads charged to it); removed on exit. The
    page cache is dropped first where this user may (root): a page another group read already is not charged
    again, so without it a server could run on the host's cache beyond its limit."""

    def __init__(self, gib: float | None):
        self.gib, self.folder, self.enter = gib, None, []

    def __enter__(self) -> "MemoryGroup":
        if self.gib is None:
            return self
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3")
        except OSError:
            print("note: could not drop the page cache (not root): pages other groups read are not charged",
                  file=sys.stderr)
        name = f"haltwise-bench-{os.getpid()}"
        for root, limit_file in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                                 (Path("/sys/fs/cgroup"), "memory.max")):
            if (root / limit_file).exists() or (root / "cgroup.subtree_control").exists():
                self.folder = root / name
                self.folder.mkdir(exist_ok=True)
                (self.folder / limit_file).write_text(str(int(self.gib * 2**30)))
                procs = self.folder / "cgroup.procs"
                self.enter = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
                return self
        raise RuntimeError("no memory cgroup hierarchy to make a group in (/sys/fs/cgroup)")

    def __exit__(self, *exc) -> None:
        if self.folder is not None:
            for _ in range(50):                        # the server's last threads leave a moment after it exits
                try:
                    self.folder.rmdir()
                    return
                except OSError:
                    time.sleep(0.1)
