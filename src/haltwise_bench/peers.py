"""`haltwise bench peers`: haltwise against llama.cpp's own llama-server and llama-bench, same GGUF.

In-process (each system in a process of its own; alternating, medians over repeats):
  prefill  haltwise: a pp-token prompt, tokens / time to first token (LLMEngine, this process);
           llama.cpp: llama-bench pp<N> (a subprocess, so its thread pool never shares one with torch).
  decode   haltwise: tg new tokens after a short prompt, tokens after the first / time after the first;
           llama.cpp: llama-bench tg<M>.
Through the servers (streaming /v1/completions, same prompts, same max_tokens, exactly max_tokens each):
  haltwise serve   vs   llama-server -np N (N = the client count: one slot per client, continuous batching)
  at 1, 8 and 32 streaming clients: tokens/s = completion tokens / wall time; TTFT p50/p95 over requests.
  Both get ignore_eos; haltwise also gets repetition_detection off (its loop detector would end a
  repetitive greedy run early), and llama-server a -100 logit bias on the model's own end-of-generation
  ids (read from the GGUF), so every request asks for and gets exactly max_tokens.
Both run with the same thread count (--threads, default: this machine's cores). ratio = haltwise / peer.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from dataclasses import asdict, dataclass
from typing import Any

from haltwise_bench import common, llama_cpp
from haltwise_bench.common import Progress, median, record, token_prompts
from haltwise_bench.engine_bench import common_arguments


@dataclass(frozen=True)
class PeerSizes:
    prefill_len: int = 512         # llama-bench pp512
    decode_tokens: int = 128       # llama-bench tg128
    server_max_tokens: int = 128
    concurrency: tuple[int, ...] = (1, 8, 32)
    server_prompt_chars: int = 200


FULL = PeerSizes()
QUICK = PeerSizes(prefill_len=256, decode_tokens=32, server_max_tokens=32)
TINY = PeerSizes(prefill_len=32, decode_tokens=8, server_max_tokens=4, concurrency=(1, 2), server_prompt_chars=40)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.set_defaults(dtype="auto")                  # haltwise as served by default
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="client counts (default 1 8 32)")
    parser.add_argument("--max-tokens", type=int, default=None, help="new tokens per server request (default 128)")
    parser.add_argument("--skip-servers", action="store_true", help="only the in-process comparison")
    parser.add_argument("--skip-inprocess", action="store_true", help="only the server comparison")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both systems")
    parser.add_argument("--llama-bin", default=None,
                        help=f"directory with llama-server and llama-bench (default $HALTWISE_LLAMA_CPP_BIN or "
                             f"{llama_cpp.DEFAULT_BIN})")


def run(args: argparse.Namespace) -> int:
    directory = llama_cpp.bin_dir(args.llama_bin)
    if missing := llama_cpp.missing_binaries(directory):
        print(llama_cpp.SETUP_HINT.format(where=directory) + f" (missing: {', '.join(missing)})")
        return 2
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    if args.concurrency or args.max_tokens:
        sizes = PeerSizes(sizes.prefill_len, sizes.decode_tokens, args.max_tokens or sizes.server_max_tokens,
                          tuple(args.concurrency or sizes.concurrency), sizes.server_prompt_chars)
    repeats = args.repeats or (1 if args.quick or args.tiny else 3)
    progress = Progress()
    from haltwise.models.catalog import resolve_model

    gguf = str(resolve_model(args.model))  # a named model -> its file, which llama-server loads too
    options = common.parse_engine_options(args.engine_option)
    records = []
    if not args.skip_inprocess:
        records += inprocess(directory, gguf, sizes, repeats, args.dtype, args.tiny, args.threads, progress, options)
    if not args.skip_servers:
        records += through_servers(directory, gguf, sizes, repeats, args.dtype, args.tiny, args.threads, progress)
    common.add_ratios(records)
    title = f"haltwise ({args.dtype}) vs llama.cpp (same GGUF, {args.threads} threads each)" + (
        "  [--tiny: haltwise runs a random tiny model; ratios meaningless]" if args.tiny else "")
    print(common.format_table(records, title))
    for r in records:
        if r["extra"].get("peak_rss_mib") is not None:
            print(f"{r['scenario']:<12} {r['system']:<10} server ready in {r['extra']['ready_s']:.1f}s, "
                  f"peak RSS {r['extra']['peak_rss_mib']:.0f} MiB")
    print(LEGEND)
    common.write_json(args.json, {"benchmark": "peers", "environment": common.environment(), "dtype": args.dtype,
                                  "repeats": repeats, "tiny": args.tiny, "threads": args.threads,
                                  "config": asdict(sizes), "llama_bin": str(directory), "records": records})
    if args.png:
        from haltwise_bench.charts import records_panel, save_chart

        server = [r for r in records if r["scenario"].startswith("server")]
        panels = [records_panel(records, "tokens_per_s", "tokens/s per scenario", "tokens/s")]
        if server:
            panels.append(ttft_panel(server))
        save_chart(args.png, panels, "haltwise bench peers")
    return 0


LEGEND = """\
prefill: prompt tokens / TTFT (llama.cpp: llama-bench ppN).  decode: tokens/s after the first token, one
request (llama-bench tgN).  server_cN: N concurrent streaming clients against haltwise serve and
llama-server -np N; tokens/s = completion tokens / wall; TTFT column = p50 (p95 in JSON).
ratio: haltwise / llama.cpp on tokens/s (> 1: haltwise faster).  Medians over repeats."""


def ttft_panel(server_records: list[dict[str, Any]]) -> Any:
    """TTFT p50 and p95 per (scenario, system)."""
    from haltwise_bench.charts import panel

    cats = [f"{r['scenario']}\n{r['system']}" for r in server_records]
    return panel("server TTFT percentiles", "seconds", cats,
                 {"p50": [r["extra"].get("ttft_p50_s") for r in server_records],
                  "p95": [r["extra"].get("ttft_p95_s") for r in server_records]}, log_y=True)


def inprocess(directory: Any, gguf: str, sizes: PeerSizes, repeats: int, dtype: str, tiny: bool, threads: int,
              progress: Progress, engine_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """prefill / decode: haltwise's LLMEngine here vs llama-bench pp/tg, alternating per repeat."""
    import torch

    from haltwise_bench.haltwise_runner import HaltwiseRunner
    from haltwise.llm import LLM

    progress("loading haltwise in this process")
    torch.set_num_threads(threads)
    options = {"enable_prefix_caching": False, "num_threads": threads, **(engine_options or {})}
    llm = LLM(None if tiny else gguf, dtype=dtype, tiny=tiny, **options)
    ours = HaltwiseRunner(llm.engine)
    decode_prompt = token_prompts(llm.tokenizer, 1, 16)
    prefill_prompt = token_prompts(llm.tokenizer, 1, sizes.prefill_len, offset_tokens=16)
    ours.generate(decode_prompt, 2)                                     # warm-up, untimed
    pp, tg = f"pp{sizes.prefill_len}", f"tg{sizes.decode_tokens}"
    runs: dict[str, list[float]] = {"haltwise prefill": [], "haltwise decode": [], "llama.cpp prefill": [],
                                    "llama.cpp decode": []}

    def haltwise_once() -> None:
        t = ours.generate(prefill_prompt, 1)
        runs["haltwise prefill"].append(t.prompt_tokens / t.ttft_s[0])
        runs["haltwise decode"].append(ours.generate(decode_prompt, sizes.decode_tokens).decode_tokens_per_s)

    def llama_once() -> None:
        figures = llama_cpp.llama_bench(directory, gguf, threads, sizes.prefill_len, sizes.decode_tokens)
        runs["llama.cpp prefill"].append(figures[pp])
        runs["llama.cpp decode"].append(figures[tg])

    for rep in range(repeats):
        for name, once in ((("haltwise", haltwise_once), ("llama.cpp", llama_once))[:: 1 if rep % 2 == 0 else -1]):
            progress(f"in-process: {name} run {rep + 1}/{repeats} ({pp}, {tg})")
            once()
    records = []
    for system in ("haltwise", "llama.cpp"):
        peer = "" if system == "haltwise" else " (llama-bench)"
        records.append(record(system, "prefill", median(runs[f"{system} prefill"]), None, repeats,
                              prompt_tokens=sizes.prefill_len, runs=runs[f"{system} prefill"], source=pp + peer))
        records.append(record(system, "decode", median(runs[f"{system} decode"]), None, repeats,
                              new_tokens=sizes.decode_tokens, runs=runs[f"{system} decode"], source=tg + peer))
    return records


def server_request_bodies(eos_ids: list[int]) -> dict[str, dict[str, Any]]:
    """Extra request fields so both servers generate exactly max_tokens greedy tokens."""
    return {"haltwise": {"ignore_eos": True, "repetition_detection": {"enabled": False}},
            "llama.cpp": {"ignore_eos": True, "logit_bias": {str(t): -100.0 for t in eos_ids}}}


def model_eos_ids(gguf: str) -> list[int]:
    """The model's end-of-generation ids, as the haltwise tokenizer reads them from the GGUF."""
    from haltwise.tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_gguf(gguf)
    return sorted(tokenizer.eos_token_ids(()))


def through_servers(directory: Any, gguf: str, sizes: PeerSizes, repeats: int, dtype: str, tiny: bool,
                    threads: int, progress: Progress) -> list[dict[str, Any]]:
    """haltwise serve up throughout; a llama-server with -np = c for each client count c."""
    from haltwise_bench.load_client import run_load
    from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd

    per_round = max(sizes.concurrency)
    rounds = len(sizes.concurrency) * repeats
    width = sizes.server_prompt_chars
    text = common.long_text(width * per_round * rounds)
    prompts = [text[i * width:(i + 1) * width] for i in range(per_round * rounds)]  # fresh each round
    bodies = server_request_bodies(model_eos_ids(gguf))
    ctx_per_slot = 256 + sizes.server_max_tokens + width     # prompts are `width` characters: fewer tokens
    results: dict[tuple[str, int], list] = {}
    process: dict[tuple[str, int], dict[str, float | None]] = {}    # load time and peak RSS per server
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # SIGTERM must still stop the servers
    ours = None
    try:
        progress("starting haltwise serve")
        port = free_port()
        ours = ServerProcess(haltwise_server_cmd(port, dtype, tiny, None if tiny else gguf,
                                                 ("--threads", str(threads))), port, "haltwise", "/ready")
        ours.start()
        round_no = 0
        for c in sizes.concurrency:
            progress(f"starting llama-server -np {c}")
            port = free_port()
            with ServerProcess(llama_cpp.llama_server_cmd(directory, port, gguf, threads, c, ctx_per_slot), port,
                               f"llama-server-np{c}", "/health") as peer:
                servers = {"haltwise": ours, "llama.cpp": peer}
                for rep in range(repeats):
                    batch = prompts[round_no * per_round:(round_no + 1) * per_round]
                    round_no += 1
                    for name in list(servers)[:: 1 if rep % 2 == 0 else -1]:
                        progress(f"server_c{c}: {name} run {rep + 1}/{repeats} ({c} streaming clients, "
                                 f"{sizes.server_max_tokens} tokens each)")
                        load = asyncio.run(run_load(servers[name].base_url, batch, c, sizes.server_max_tokens,
                                                    extra_body=bodies[name]))
                        results.setdefault((name, c), []).append(load.summary())
                process[("llama.cpp", c)] = {"ready_s": peer.ready_s, "peak_rss_mib": peer.peak_rss_mib()}
        for c in sizes.concurrency:   # one haltwise server served every round: its peak so far
            process[("haltwise", c)] = {"ready_s": ours.ready_s, "peak_rss_mib": ours.peak_rss_mib()}
    finally:
        if ours is not None:
            ours.stop()
        signal.signal(signal.SIGTERM, previous)
    records = []
    for (name, c), runs in results.items():
        records.append(record(name, f"server_c{c}", median(r["tokens_per_s"] for r in runs),
                              median(r["ttft_p50_s"] for r in runs), len(runs), concurrency=c,
                              ttft_p50_s=median(r["ttft_p50_s"] for r in runs),
                              ttft_p95_s=median(r["ttft_p95_s"] for r in runs),
                              completion_tokens=median(r["completion_tokens"] for r in runs),
                              expected_tokens=runs[0]["requests"] * sizes.server_max_tokens,
                              failed_requests=sum(r["requests"] - r["ok"] for r in runs),
                              errors=sorted({e for r in runs for e in r["errors"]}),
                              **process.get((name, c), {})))
    return records


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    sys.exit(128 + signum)
