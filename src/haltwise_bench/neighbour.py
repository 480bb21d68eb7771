"""`haltwise bench neighbour`: decoding beside a busy neighbour (issue 26, SPEC 13).

One process, one engine (SmolLM2 Q4_1 by default, --dtype auto). For each thread count (default: all
cores, then 1) and each scenario, the same run is timed quiet and busy, alternating (the order flips
every repeat):
  1 client    one request, --tokens new tokens: decode rate after the first token
  32 clients  32 requests at once, --tokens new tokens each: generated tokens / wall time
Busy = one spinning process per spare core (cores - 1, at least 1), started by the bench just before
the timed run and killed right after it; each also exits by itself after --busy-limit seconds, so an
interrupted bench leaves nothing spinning. ratio = busy / quiet, per thread count and scenario
(goals, default threads: >= 0.6 at 1 client, > 0.5 at 32 clients).

--openmp adds the same rows with the native kernels on at::parallel_for (torch's OpenMP team, the
behaviour before thread_pool.h) for comparison. Other tenants of a shared machine add their own load
to both columns: compare ratios within one run, not across runs.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from haltwise_bench import common
from haltwise_bench.common import Progress, median, record, token_prompts
from haltwise_bench.engine_bench import common_arguments
from haltwise_bench.haltwise_runner import HaltwiseRunner, engine_model

BUSY = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
GOALS = {1: 0.6, 32: 0.5}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.set_defaults(dtype="auto")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="thread counts to compare (default: all cores, then 1)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32], help="scenarios: concurrent requests")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per request (default 128; --quick 48)")
    parser.add_argument("--busy", type=int, default=None, help="busy processes (default: cores - 1, at least 1)")
    parser.add_argument("--busy-limit", type=float, default=120.0, help="a busy process exits after this many s")
    parser.add_argument("--openmp", action="store_true",
                        help="also time the native kernels on at::parallel_for (the pre-pool behaviour)")


class Neighbour:
    """`count` spinning processes while inside the with-block (none when count == 0)."""

    def __init__(self, count: int, limit_s: float) -> None:
        self.count, self.limit_s = count, limit_s
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Neighbour":
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY, str(self.limit_s)]) for _ in range(self.count)]
        time.sleep(0.3 if self.procs else 0)  # interpreters started and spinning
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def run(args: argparse.Namespace) -> int:
    from haltwise.engine.step_threads import set_step_threads
    from haltwise.kernels.native import build
    from haltwise.llm import LLM

    cores = os.cpu_count() or 1
    thread_counts = args.threads or sorted({cores, 1}, reverse=True)
    busy = args.busy if args.busy is not None else max(1, cores - 1)
    tokens = args.tokens or (8 if args.tiny else 48 if args.quick else 128)
    repeats = args.repeats or (1 if args.quick or args.tiny else 3)
    progress = Progress()
    progress(f"loading {'tiny' if args.tiny else args.model or 'SmolLM2 GGUF'} ({args.dtype})")
    options = {"enable_prefix_caching": False, **common.parse_engine_options(args.engine_option)}
    llm = LLM(args.model, dtype=args.dtype, tiny=args.tiny, **options)
    runner = HaltwiseRunner(llm.engine)
    native = build.load()
    stack = getattr(engine_model(llm.engine).model, "native_decode", None)
    every_step = bool(stack and stack.every_step)
    pools = ["pool"] + (["openmp"] if args.openmp and native is not None else [])
    prompts = token_prompts(llm.tokenizer, max(args.clients), 8 if args.tiny else 32)
    formats = planned_formats(llm.engine, args.clients)
    progress(f"linear formats per scenario's row bucket: {formats}")

    def timed(clients: int) -> float:
        t = runner.generate(prompts[:clients], tokens)
        return t.decode_tokens_per_s if clients == 1 else t.tokens_per_s

    samples: dict[tuple[str, int, int, str], list[float]] = {}
    for repeat in range(repeats):
        for pool in pools:
            if native is not None:
                native._pool_use_torch(pool == "openmp")
            for threads in thread_counts:   # as the engine gives them (engine/step_threads.py)
                set_step_threads(threads, native_every_step=pool == "pool" and every_step)
                for clients in args.clients:
                    runner.generate(prompts[:clients], 4)  # warm this shape
                    for load in (("quiet", "busy") if repeat % 2 == 0 else ("busy", "quiet")):
                        with Neighbour(busy if load == "busy" else 0, args.busy_limit):
                            rate = timed(clients)
                        samples.setdefault((pool, threads, clients, load), []).append(rate)
                        progress(f"repeat {repeat}: {pool}, {threads} threads, {clients} clients, {load}: "
                                 f"{rate:.1f} tok/s")
    if native is not None:
        native._pool_use_torch(False)
    records = neighbour_records(samples, repeats, busy, tokens)
    env = common.environment()
    title = (f"haltwise beside {busy} busy process(es), {cores} cores ({env['cpu']}), {tokens} new tokens per "
             f"request; ratio = busy / quiet, goals >= {GOALS[1]} (1 client), > {GOALS[32]} (32 clients)")
    print(common.format_table(records, title))
    common.write_json(args.json, {"benchmark": "neighbour", "environment": env, "records": records,
                                  "config": {"threads": thread_counts, "busy": busy, "tokens": tokens,
                                             "formats": formats,
                                             "repeats": repeats, "clients": args.clients, "pools": pools}})
    return 0


def planned_formats(engine: Any, clients: list[int]) -> dict[int, list[str]]:
    """The planned linear formats for each scenario's decode rows: a float32 cell runs at::mm on torch's
    OpenMP team (its barriers are not the native pool's), which a busy host's plan may pick."""
    from haltwise_bench.haltwise_runner import engine_model
    from haltwise.kernels.plan import bucket_index
    from haltwise.kernels.planned_linear import PlannedLinear

    linears = [m for m in engine_model(engine).modules() if isinstance(m, PlannedLinear)]
    return {c: sorted({l.bucket_formats[bucket_index(c)] for l in linears}) for c in clients}


def neighbour_records(samples: dict[tuple[str, int, int, str], list[float]], repeats: int, busy: int,
                      tokens: int) -> list[dict[str, Any]]:
    """One row per (pool, threads, clients, load), medians; the busy row carries busy / quiet."""
    records = []
    for (pool, threads, clients, load), rates in samples.items():
        row = record(f"{'native pool' if pool == 'pool' else 'openmp'}, {threads} thr",
                     f"{clients} client{'s' * (clients > 1)} {load}", median(rates), repeats=repeats,
                     pool=pool, threads=threads, clients=clients, load=load, busy_processes=busy,
                     tokens=tokens, samples=rates)
        quiet = median(samples.get((pool, threads, clients, "quiet"), []))
        if load == "busy" and quiet and row["tokens_per_s"]:
            row["ratio"] = row["tokens_per_s"] / quiet
            row["extra"]["ratio_meaning"] = "busy / quiet tokens/s"
        records.append(row)
    return records
