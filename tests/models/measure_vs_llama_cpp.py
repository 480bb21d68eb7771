"""What `haltwise bench peers` does not report, per model, beside llama.cpp in the same run: load time
(server start to ready), tokenizer build time (cold and cached), one streamed request's decode tok/s,
and peak RSS (VmHWM) of each server after that request. A measurement program, not a test.

    PYTHONPATH=src:. python tests/models/measure_vs_llama_cpp.py qwen2.5-coder-0.5b [--dtype auto]

haltwise: `haltwise serve --model NAME --max-model-len 2048 --kv-cache-memory 96MiB --threads T`, ready at
/ready (its engine-load and kernel-plan lines are quoted from its log); llama.cpp: `llama-server -m FILE
-np 1 -c 2048 -t T`, ready at /health. The servers run one after the other, never together. Each gets
one streamed /v1/completions of --tokens greedy tokens with eos ignored; tok/s = (tokens - 1) / (time
after the first text chunk). Tokenizer: Tokenizer.from_gguf in a fresh process each, with the build cache
off (cold), then on after one store (cached; byte-level BPE files are never cached: see build_cache).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import httpx

from haltwise_bench import llama_cpp
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd

TOKENIZER_TIMER = """
import sys, time
from haltwise.tokenizer.tokenizer import Tokenizer
t = time.perf_counter(); tok = Tokenizer.from_gguf(sys.argv[1]); s = time.perf_counter() - t
print(f"{s:.3f} {tok.build_source}")
"""


def tokenizer_times(gguf: str) -> dict[str, str]:
    def once(cache: str) -> str:
        env = {**os.environ, "HALTWISE_TOKENIZER_CACHE": cache}
        return subprocess.run([sys.executable, "-c", TOKENIZER_TIMER, gguf], env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    cold = once("0")
    once("1")  # stores the entry where the builder caches this file
    return {"cold": cold, "cached": once("1")}


def vm_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kib / 1024


def stream_decode(url: str, tokens: int, extra: dict) -> dict[str, float]:
    body = {"prompt": "The history of France begins", "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, **extra}
    start, stamps = time.perf_counter(), []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=900) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                if json.loads(line[6:])["choices"][0].get("text"):
                    stamps.append(time.perf_counter())
    # eos is ignored (haltwise) or biased away (llama.cpp): exactly `tokens` tokens, in len(stamps) chunks
    return {"ttft_s": stamps[0] - start, "chunks": len(stamps),
            "decode_tok_s": (tokens - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")}


def measure(server: ServerProcess, tokens: int, extra: dict) -> dict:
    start = time.perf_counter()
    server.start()
    ready_s = time.perf_counter() - start
    try:
        decode = stream_decode(server.base_url, tokens, extra)
        rss = vm_hwm_mib(server._proc.pid)  # the process this ServerProcess started
        log = server.log_tail(200_000)
    finally:
        server.stop()
    return {"ready_s": ready_s, **decode, "peak_rss_mib": rss, "log": log}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    from haltwise_bench.peers import model_eos_ids
    from haltwise.models.catalog import resolve_model

    gguf = str(resolve_model(args.model))
    tok = tokenizer_times(gguf)
    port = free_port()
    ours = measure(ServerProcess(haltwise_server_cmd(port, args.dtype, False, args.model, (
        "--max-model-len", "2048", "--kv-cache-memory", "96MiB", "--threads", str(args.threads),
        "--watchdog", "600")),  # a niced first step on a loaded host can exceed the default 30 s
        port, "haltwise", "/ready", start_timeout_s=900), args.tokens,
        {"repetition_detection": {"enabled": False}})
    port = free_port()
    peer = measure(ServerProcess(llama_cpp.llama_server_cmd(llama_cpp.bin_dir(), port, gguf, args.threads, 1, 2048),
                                 port, "llama-server", "/health"), args.tokens,
                   {"logit_bias": {str(t): -100.0 for t in model_eos_ids(gguf)}})
    engine_lines = [m.group(0) for m in re.finditer(r"(loaded \S+ in [\d.]+s \(tokenizer [\d.]+s\)|kernel plan "
                                                    r"(applied|\(measured) in [\d.]+s)", ours["log"])]
    print(f"{args.model} ({args.dtype}, {args.threads} threads, {args.tokens} streamed tokens)")
    print(f"  tokenizer from_gguf: cold {tok['cold']}, cached {tok['cached']}  (seconds, source)")
    for name, m in (("haltwise", ours), ("llama.cpp", peer)):
        print(f"  {name:9s} start->ready {m['ready_s']:6.1f} s  ttft {m['ttft_s']:5.2f} s  decode "
              f"{m['decode_tok_s']:6.1f} tok/s ({m['chunks']} chunks)  peak RSS {m['peak_rss_mib']:7.0f} MiB")
    print("  haltwise log: " + "; ".join(engine_lines))


if __name__ == "__main__":
    main()
