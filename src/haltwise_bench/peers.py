"""`haltwise bench peers`: haltwise against llama.cpp's own llama-server and llama-bench, same GGUF.

In-process (each system in a process of its own; alternating, medians over repeats):
  prefill  haltwise: a pp-token prompt, tokens / time to first token (LLMEngine, this process);
           llama.cpp: llama-bench pp<N> (a subprocess, so its thread pool never shares one with torch).
  decode   haltwise: tg new tokens after a short prompt, tokens after the first / time after the first;
           llama.cpp: llama-bench tg<M>.
Through the servers (peers_servers.py): haltwise serve vs llama-server -np N (one slot per client) at 1, 8
and 32 streaming clients, per workload (--workload): `natural` (natural_chat.py: everyday chat prompts,
greedy, answers that end by themselves, a 256-token cap whose hits are counted) and `ignore_eos` (exactly
max_tokens each). Per row: aggregate tokens/s (completion tokens / wall), per-stream decode tok/s (tokens
after the first / time after the first, median over requests), TTFT p50, speculation acceptance, capped.
The peer's KV cache is q8_0 by default (-fa on -ctk q8_0 -ctv q8_0: haltwise's default KV is int8);
--draft-model gives both the same draft model (haltwise --draft-model, llama-server -md).
Both run with the same thread count (--threads). ratio = haltwise / peer.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from typing import Any

from haltwise_bench import common, cpu_pinning, llama_cpp, natural_chat
from haltwise_bench.common import Progress, median, record, token_prompts
from haltwise_bench.engine_bench import common_arguments
from haltwise_bench.peers_servers import WORKLOADS, ServerSetup, model_eos_ids, server_request_bodies, through_servers

__all__ = ["add_arguments", "run", "model_eos_ids", "server_request_bodies"]   # the last two: footprint.py


@dataclass(frozen=True)
class PeerSizes:
    prefill_len: int = 512         # llama-bench pp512
    decode_tokens: int = 128       # llama-bench tg128
    server_max_tokens: int = 128
    concurrency: tuple[int, ...] = (1, 8, 32)
    server_prompt_chars: int = 200
    natural_max_tokens: int = natural_chat.MAX_TOKENS


FULL = PeerSizes()
QUICK = PeerSizes(prefill_len=256, decode_tokens=32, server_max_tokens=32)
TINY = PeerSizes(prefill_len=32, decode_tokens=8, server_max_tokens=4, concurrency=(1, 2), server_prompt_chars=40,
                 natural_max_tokens=16)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.set_defaults(dtype="auto")                  # haltwise as served by default
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="client counts (default 1 8 32)")
    parser.add_argument("--max-tokens", type=int, default=None, help="new tokens per server request (default 128)")
    parser.add_argument("--skip-servers", action="store_true", help="only the in-process comparison")
    parser.add_argument("--skip-inprocess", action="store_true", help="only the server comparison")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for both systems (default: one per CPU the servers may use)")
    parser.add_argument("--workload", choices=(*WORKLOADS, "both"), default="both",
                        help="server workloads: natural chat (answers end by themselves), ignore_eos (fixed "
                             "length), or both (default)")
    parser.add_argument("--natural-max-tokens", type=int, default=None,
                        help=f"natural chat: the cap on each answer (default {natural_chat.MAX_TOKENS}; hits counted)")
    parser.add_argument("--peer-kv", choices=llama_cpp.PEER_KV_TYPES, default="q8_0",
                        help="llama-server's KV cache type (default q8_0 with -fa on: about the bytes a token of "
                             "haltwise's int8 KV; f16: llama-server's own default)")
    parser.add_argument("--draft-model", default=None, metavar="NAME|PATH",
                        help="the same draft model for both: haltwise serve --draft-model, llama-server -md "
                             "(default: neither gets one; haltwise keeps its default prompt lookup)")
    parser.add_argument("--pin-client", action="store_true",
                        help="pin the load client to a CPU of its own and the servers to the others (off by "
                             "default: on a 2-CPU host it leaves one core per side)")
    parser.add_argument("--llama-bin", default=None,
                        help=f"directory with llama-server and llama-bench (default $HALTWISE_LLAMA_CPP_BIN or "
                             f"{llama_cpp.DEFAULT_BIN})")


def run(args: argparse.Namespace) -> int:
    directory = llama_cpp.bin_dir(args.llama_bin)
    if missing := llama_cpp.missing_binaries(directory):
        print(llama_cpp.SETUP_HINT.format(where=directory) + f" (missing: {', '.join(missing)})")
        return 2
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    sizes = replace(sizes, server_max_tokens=args.max_tokens or sizes.server_max_tokens,
                    concurrency=tuple(args.concurrency or sizes.concurrency),
                    natural_max_tokens=args.natural_max_tokens or sizes.natural_max_tokens)
    pinning = cpu_pinning.plan(args.pin_client)
    threads = cpu_pinning.server_threads(pinning, args.threads)
    workloads = WORKLOADS if args.workload == "both" else (args.workload,)
    repeats = args.repeats or (1 if args.quick or args.tiny else 3)
    progress = Progress()
    from haltwise.models.catalog import resolve_model

    gguf = str(resolve_model(args.model))  # a named model -> its file, which llama-server loads too
    if args.draft_model == "auto":
        print("--draft-model auto: name the draft model (e.g. qwen2.5-coder-0.5b) so that both systems get it")
        return 2
    draft_path = None if args.draft_model in (None, "none") else str(resolve_model(args.draft_model))
    options = common.parse_engine_options(args.engine_option)
    records = []
    if not args.skip_inprocess:
        records += inprocess(directory, gguf, sizes, repeats, args.dtype, args.tiny, threads, progress, options)
    server_records = []
    if not args.skip_servers:
        setup = ServerSetup(directory, gguf, args.dtype, args.tiny, threads, pinning, args.peer_kv, args.draft_model,
                            draft_path)
        server_records = through_servers(setup, sizes, workloads, repeats, progress, model_eos_ids(gguf))
    records += server_records
    common.add_ratios(records)
    add_stream_ratios(server_records)
    title = f"haltwise ({args.dtype}) vs llama.cpp (same GGUF, {threads} threads each)" + (
        "  [--tiny: haltwise runs a random tiny model; ratios meaningless]" if args.tiny else "")
    inproc = [r for r in records if r not in server_records]
    if inproc:
        print(common.format_table(inproc, title))
    if server_records:
        print(server_table(server_records, f"{title}; peer KV {args.peer_kv}, draft model "
                                           f"{args.draft_model or 'none'}"))
    print(pinning.note)
    if not draft_path and any((r["extra"].get("draft_model_drafted") or 0) > 0 for r in server_records):
        print("note: haltwise's default flags drafted with a draft model (its catalog pairing) and llama-server "
              "had none; --draft-model NAME gives both the same one")
    servers = {(r["system"], r["extra"]["concurrency"]): r["extra"] for r in server_records
               if r["extra"].get("peak_rss_mib") is not None}
    for (system, c), x in sorted(servers.items()):
        print(f"{system:<10} -np/clients {c:<3} server ready in {x['ready_s']:.1f}s, "
              f"peak RSS {x['peak_rss_mib']:.0f} MiB")
    print(LEGEND)
    common.write_json(args.json, {"benchmark": "peers", "environment": common.environment(), "dtype": args.dtype,
                                  "repeats": repeats, "tiny": args.tiny, "threads": threads,
                                  "workloads": list(workloads), "peer_kv": args.peer_kv,
                                  "draft_model": args.draft_model, "pinning": pinning.note,
                                  "config": asdict(sizes), "llama_bin": str(directory), "records": records})
    if args.png:
        from haltwise_bench.charts import records_panel, save_chart

        server = server_records
        panels = [records_panel(records, "tokens_per_s", "tokens/s per scenario", "tokens/s")]
        if server:
            panels.append(ttft_panel(server))
        save_chart(args.png, panels, "haltwise bench peers")
    return 0


LEGEND = """\
prefill: prompt tokens / TTFT (llama.cpp: llama-bench ppN).  decode: tokens/s after the first token, one
request (llama-bench tgN).  Server rows: c streaming clients against haltwise serve and llama-server -np c.
agg tok/s: completion tokens / wall (all clients); stream tok/s: tokens after the first / time after the first,
median over requests; ratio: haltwise / llama.cpp (> 1: haltwise faster), on agg and on stream; TTFT p50
(p95 in JSON); accept: speculation accepted / drafted (haltwise: its /metrics; llama.cpp: its stream timings,
natural chat only); capped: requests that reached max_tokens / requests (ignore_eos: all, by design).
Medians over repeats."""


def add_stream_ratios(rows: list[dict[str, Any]]) -> None:
    """extra["stream_ratio"] = haltwise / llama.cpp per-stream decode speed, on both rows of a scenario."""
    for r in rows:
        mine = next((m for m in rows if m["scenario"] == r["scenario"] and m["system"] == "haltwise"), None)
        peer = next((p for p in rows if p["scenario"] == r["scenario"] and p["system"] != "haltwise"), None)
        ours, theirs = (None if x is None else x["extra"].get("stream_tok_s") for x in (mine, peer))
        failed = any(x is None or x["extra"].get("failed_requests") for x in (mine, peer))
        r["extra"]["stream_ratio"] = ours / theirs if ours and theirs and not failed else None


def server_table(rows: list[dict[str, Any]], title: str) -> str:
    """workload x clients x system: agg tok/s, ratio, stream tok/s, ratio, TTFT p50, acceptance, capped."""
    head = (f"{'workload':<11} {'clients':>7} {'system':<10} {'agg tok/s':>9} {'ratio':>6} {'stream':>8} "
            f"{'ratio':>6} {'TTFT p50':>8} {'accept':>6} {'capped':>8}")
    lines = [title, head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r["extra"]["workload"], r["extra"]["concurrency"], r["system"])):
        x = r["extra"]
        failed = f"  {x['failed_requests']} failed" if x["failed_requests"] else ""
        lines.append(f"{x['workload']:<11} {x['concurrency']:>7} {r['system']:<10} {_f(r['tokens_per_s'], 1):>9} "
                     f"{_f(r['ratio'], 2):>6} {_f(x['stream_tok_s'], 1):>8} {_f(x['stream_ratio'], 2):>6} "
                     f"{_f(x['ttft_p50_s'], 3):>8} {_f(x['acceptance'], 2):>6} "
                     f"{x['capped']:>4}/{x['requests'] * r['repeats']:<3}{failed}")
    return "\n".join(lines)


def _f(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


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
