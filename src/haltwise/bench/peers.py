"""`haltwise bench peers`: haltwise against llama-cpp-python on the very same GGUF file.

Python APIs, no HTTP (same prompt token ids, greedy, eos ignored; llama.cpp's Llama runs in a
worker process of its own, see llama_worker.py, so torch's OpenMP pool cannot steal its cores):
  decode    1 request, N new tokens; tokens/s = tokens after the first / time after the first.
  prefill   one long prompt of real prose; tokens/s = prompt tokens / time to first token.
  llama.cpp runs with n_threads=2 (this machine's cores); haltwise with torch's default threads.
Through the servers (each a subprocess; streaming /v1/completions, same prompts, same max_tokens):
  haltwise serve               vs
  llama.cpp tuned              python -m llama_cpp.server --n_threads 2 --interrupt_requests False
  llama.cpp default            python -m llama_cpp.server (its defaults)
  with 1, 8 and 32 concurrent streaming clients: tokens/s = completion tokens / wall time, and
  TTFT p50/p95 over requests.  Every request asks for exactly max_tokens: haltwise with
  ignore_eos, llama.cpp with a -100 logit bias on the end-of-text tokens (eos cannot be chosen).
Systems alternate within each repeat (order rotated); medians over repeats; ratio = haltwise / peer.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import signal
import sys
from dataclasses import asdict, dataclass
from typing import Any

from haltwise.bench import common
from haltwise.bench.common import Progress, Timed, median, record
from haltwise.bench.engine_bench import common_arguments, token_prompts

INSTALL_HINT = ("llama-cpp-python is not installed. Install the peer with:\n"
                "  CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON "
                "-DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
                "-DGGML_AMX_BF16=OFF\" .venv/bin/pip install 'llama-cpp-python[server]'\n"
                "(about 13 minutes on 2 cores; the default build's AMX path dies with 'Illegal instruction' here)")


@dataclass(frozen=True)
class PeerSizes:
    decode_tokens: int = 256
    prefill_len: int = 1000
    server_max_tokens: int = 64
    concurrency: tuple[int, ...] = (1, 8, 32)
    server_prompt_chars: int = 200


FULL = PeerSizes()
QUICK = PeerSizes(decode_tokens=64, prefill_len=400, server_max_tokens=16)
TINY = PeerSizes(decode_tokens=8, prefill_len=64, server_max_tokens=4, concurrency=(1, 2), server_prompt_chars=40)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser)
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="client counts (default 1 8 32)")
    parser.add_argument("--max-tokens", type=int, default=None, help="new tokens per server request")
    parser.add_argument("--skip-servers", action="store_true", help="only the in-process comparison")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp n_threads (tuned configuration)")


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def run(args: argparse.Namespace) -> int:
    if not llama_cpp_available():
        print(INSTALL_HINT)
        return 2
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    if args.concurrency or args.max_tokens:
        sizes = PeerSizes(sizes.decode_tokens, sizes.prefill_len, args.max_tokens or sizes.server_max_tokens,
                          tuple(args.concurrency or sizes.concurrency), sizes.server_prompt_chars)
    repeats = args.repeats or (1 if args.quick or args.tiny else 3)
    progress = Progress()
    from haltwise.models.catalog import resolve_model

    gguf = str(resolve_model(args.model))  # a named model -> its file, which llama-server loads too
    options = common.parse_engine_options(args.engine_option)
    records = inprocess(gguf, sizes, repeats, args.dtype, args.tiny, args.threads, progress, options)
    if not args.skip_servers:
        records += through_servers(gguf, sizes, repeats, args.dtype, args.tiny, args.threads, progress)
    common.add_ratios(records)
    title = "haltwise vs llama-cpp-python (same GGUF)" + ("  [--tiny: haltwise runs a random tiny model; "
                                                         "ratios meaningless]" if args.tiny else "")
    print(common.format_table(records, title))
    print(LEGEND)
    common.write_json(args.json, {"benchmark": "peers", "environment": common.environment(), "dtype": args.dtype,
                                  "repeats": repeats, "tiny": args.tiny, "config": asdict(sizes),
                                  "records": records})
    if args.png:
        from haltwise.bench.charts import records_panel, save_chart

        server = [r for r in records if r["scenario"].startswith("server")]
        panels = [records_panel(records, "tokens_per_s", "tokens/s per scenario", "tokens/s")]
        if server:
            panels.append(ttft_panel(server))
        save_chart(args.png, panels, "haltwise bench peers")
    return 0


LEGEND = """\
decode: tokens/s after the first token, 1 request.  prefill: prompt tokens / TTFT.  server_cN: N
concurrent streaming clients; tokens/s = completion tokens / wall; TTFT column = p50 (p95 in JSON).
ratio: haltwise / that peer on tokens/s (> 1: haltwise faster).  Medians over repeats."""


def ttft_panel(server_records: list[dict[str, Any]]) -> Any:
    """TTFT p50 and p95 per (scenario, system)."""
    from haltwise.bench.charts import panel

    cats = [f"{r['scenario']}\n{r['system']}" for r in server_records]
    return panel("server TTFT percentiles", "seconds", cats,
                 {"p50": [r["extra"].get("ttft_p50_s") for r in server_records],
                  "p95": [r["extra"].get("ttft_p95_s") for r in server_records]}, log_y=True)


def inprocess(gguf: str, sizes: PeerSizes, repeats: int, dtype: str, tiny: bool, threads: int,
              progress: Progress, engine_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Decode and prefill, haltwise (LLMEngine) vs llama_cpp.Llama, alternating."""
    from haltwise.bench.haltwise_runner import HaltwiseRunner
    from haltwise.bench.llama_worker import LlamaWorker
    from haltwise.llm import LLM

    progress("loading haltwise and llama.cpp in this process")
    options = {"enable_prefix_caching": False, **(engine_options or {})}  # no prefix-cache hits on repeats
    llm = LLM(None if tiny else gguf, dtype=dtype, tiny=tiny, **options)
    peer = LlamaWorker(gguf, threads, sizes.prefill_len + sizes.decode_tokens + 64)  # its own process: see there
    ours = HaltwiseRunner(llm.engine)
    tokenizer = llm.tokenizer
    decode_prompt = token_prompts(tokenizer, 1, 32)
    prefill_prompt = token_prompts(tokenizer, 1, sizes.prefill_len, offset_tokens=32)
    systems = {"haltwise": lambda p, n: ours.generate(p, n), "llama.cpp": lambda p, n: peer.generate(p[0], n)}
    for name, fn in systems.items():  # warm-up, untimed
        fn(decode_prompt, 2)
    records = []
    for scenario, prompt, n in (("decode", decode_prompt, sizes.decode_tokens), ("prefill", prefill_prompt, 1)):
        runs: dict[str, list[Timed]] = {k: [] for k in systems}
        for rep in range(repeats):
            for name in list(systems)[:: 1 if rep % 2 == 0 else -1]:
                progress(f"{scenario}: {name} run {rep + 1}/{repeats}")
                runs[name].append(systems[name](prompt, n))
        for name, timed in runs.items():
            if scenario == "decode":
                records.append(record(name, "decode", median(t.decode_tokens_per_s for t in timed),
                                      median(t.ttft_s[0] for t in timed), repeats, new_tokens=n))
            else:
                records.append(record(name, "prefill", median(t.prompt_tokens / t.ttft_s[0] for t in timed),
                                      median(t.ttft_s[0] for t in timed), repeats, prompt_tokens=len(prompt[0])))
    peer.close()
    return records


def through_servers(gguf: str, sizes: PeerSizes, repeats: int, dtype: str, tiny: bool, threads: int,
                    progress: Progress) -> list[dict[str, Any]]:
    """All three servers up at once; each (concurrency, repeat) runs them in rotated order."""
    from haltwise.bench.load_client import run_load
    from haltwise.bench.servers import (ServerProcess, free_port, haltwise_server_cmd,
                                        llama_cpp_server_cmd)

    # Fresh prompts for every (concurrency, repeat) round, shared by the systems in that round: no
    # server gets a prompt-cache hit from an earlier round.
    per_round = max(sizes.concurrency)
    rounds = len(sizes.concurrency) * repeats
    width = sizes.server_prompt_chars
    text = common.long_text(width * per_round * rounds)
    prompts = [text[i * width:(i + 1) * width] for i in range(per_round * rounds)]
    eos_bias = {"logit_bias": {"0": -100.0, "2": -100.0}}
    specs = [("haltwise", lambda p: haltwise_server_cmd(p, dtype, tiny, None if tiny else gguf), "/ready",
              {"ignore_eos": True}),
             ("llama.cpp tuned", lambda p: llama_cpp_server_cmd(p, gguf, threads, False), "/v1/models", eos_bias),
             ("llama.cpp default", lambda p: llama_cpp_server_cmd(p, gguf, None, None), "/v1/models", eos_bias)]
    servers = []
    # SIGTERM (e.g. from `timeout`) must still run the finally below, or the servers outlive us.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        for name, cmd, ready, _ in specs:
            progress(f"starting server: {name}")
            port = free_port()
            servers.append(ServerProcess(cmd(port), port, name, ready))
            servers[-1].start()
        results: dict[tuple[str, int], list] = {}
        for round_no, (c, rep) in enumerate((c, rep) for c in sizes.concurrency for rep in range(repeats)):
            batch = prompts[round_no * per_round:(round_no + 1) * per_round]
            order = [(rep + k) % len(specs) for k in range(len(specs))]
            for k in order:
                name, _, _, extra = specs[k]
                progress(f"server_c{c}: {name} run {rep + 1}/{repeats} ({c} streaming clients, "
                         f"{sizes.server_max_tokens} tokens each)")
                load = asyncio.run(run_load(servers[k].base_url, batch, c, sizes.server_max_tokens,
                                            extra_body=extra))
                results.setdefault((name, c), []).append(load.summary())
    finally:
        for s in servers:
            s.stop()
        signal.signal(signal.SIGTERM, previous)
    records = []
    for (name, c), runs in results.items():
        records.append(record(name, f"server_c{c}", median(r["tokens_per_s"] for r in runs),
                              median(r["ttft_p50_s"] for r in runs), len(runs), concurrency=c,
                              ttft_p50_s=median(r["ttft_p50_s"] for r in runs),
                              ttft_p95_s=median(r["ttft_p95_s"] for r in runs),
                              completion_tokens=median(r["completion_tokens"] for r in runs),
                              failed_requests=sum(r["requests"] - r["ok"] for r in runs),
                              errors=sorted({e for r in runs for e in r["errors"]})))
    return records


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    sys.exit(128 + signum)
