"""`haltwise bench longprompt`: time to first token of long prompts, and the gaps between the tokens of
decode streams running beside that prefill (docs/engine-steps.md).

For each length N: STREAMS streamed decodes start (short prompts, ignore_eos) and each receives a few tokens;
then one prompt of exactly N token ids (fresh per run: no prefix reuse) is sent, streamed, max_tokens 1.
Reported: its time to first token and prefill tok/s (or the error a server answered), and for the decode
streams while it ran: tokens received, the longest and the median gap between two of a stream's tokens, and
how many the server ended meanwhile (an ended stream has no gap after its end; haltwise's streams run with its
loop detector off, so a greedy stream that loops keeps decoding).
Runs against haltwise (started here with --server-args; --server-src runs another checkout's code, e.g.
main, for a before/after) and llama.cpp's llama-server on the same GGUF when it is built (make bench-setup).
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from haltwise_bench import llama_cpp
from haltwise_bench.common import environment, write_json
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd

STREAM_PROMPT = [9707, 11, 1879, 13]     # any few ids; the decodes only need to keep going


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalog name or GGUF path")
    p.add_argument("--lengths", default="8192,16384", help="prompt lengths in tokens, comma-separated")
    p.add_argument("--streams", type=int, default=4, help="decode streams running beside each prefill")
    p.add_argument("--server-args", default="", help="extra `haltwise serve` flags, one string")
    p.add_argument("--server-src", default=None, help="PYTHONPATH for the haltwise server (another checkout)")
    p.add_argument("--peer", action="store_true", help="also llama-server on the same GGUF (when built)")
    p.add_argument("--llama-bin", default=None, help="directory of llama-server (default: make bench-setup's)")
    p.add_argument("--threads", type=int, default=2, help="llama-server -t")
    p.add_argument("--json", default=None, help="write the results here too")


class DecodeStream(threading.Thread):
    """One streamed completion that runs until stopped, recording when each token arrived."""

    def __init__(self, url: str, model: str, index: int, extra: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.index, self.extra = url, model, index, extra
        self.arrivals: list[float] = []
        self.stop = threading.Event()
        self.error: str | None = None
        self.ended: float | None = None     # when the server ended the stream (before it was stopped)

    def run(self) -> None:
        body = {"model": self.model, "prompt": STREAM_PROMPT + [self.index + 100],   # max_tokens: the window
                "temperature": 0.0, "ignore_eos": True, "stream": True, **self.extra}
        try:
            with httpx.stream("POST", f"{self.url}/v1/completions", json=body, timeout=None) as r:
                if r.status_code != 200:
                    self.error = f"decode stream: HTTP {r.status_code}: {r.read().decode()[:160]}"
                    return
                for line in r.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("data: ") and '"choices"' in line:
                        self.arrivals.append(time.monotonic())
                self.ended = time.monotonic()
        except httpx.HTTPError as e:
            self.error = f"decode stream: {e}"


def long_prompt(n: int, seed: int) -> list[int]:
    """n ids from a plain-text id range, different per seed (no prefix cache hit between runs)."""
    return [1000 + (seed * 7919 + i * 104729) % 20000 for i in range(n)]


def measure(url: str, model: str, length: int, streams: int, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
    decoders = [DecodeStream(url, model, i, extra) for i in range(streams)]
    for d in decoders:
        d.start()
    deadline = time.monotonic() + 600
    while any(d.is_alive() and len(d.arrivals) < 3 for d in decoders) and time.monotonic() < deadline:
        time.sleep(0.05)
    if failed := next((d.error for d in decoders if d.error), None):
        for d in decoders:
            d.stop.set()
        return {"prompt_tokens": length, "ttft_s": None, "prefill_tok_s": None, "error": failed,
                "decode_tokens_during": 0, "streams_ended": 0, "max_gap_s": None, "median_gap_s": None}
    body = {"model": model, "prompt": long_prompt(length, seed), "max_tokens": 1, "temperature": 0.0,
            "stream": True}
    sent = time.monotonic()
    first, error = None, None
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=None) as r:
        if r.status_code != 200:
            error = f"HTTP {r.status_code}: {r.read().decode()[:200]}"
        else:
            for line in r.iter_lines():
                if '"error"' in line:
                    error = line[:200]
                    break
                if line.startswith("data: ") and '"choices"' in line:
                    first = time.monotonic()
                    break
    end = first or time.monotonic()
    for d in decoders:
        d.stop.set()
    gaps, during, ended = [], 0, 0
    for d in decoders:
        times = [t for t in d.arrivals if t <= end]
        during += sum(1 for t in times if t >= sent)
        inside = [t for t in times if t >= sent]
        before = [t for t in times if t < sent][-1:]      # the gap that spans the prefill's start counts too
        finished = d.ended is not None and d.ended <= end  # a stream the server ended has no gap after its end
        ended += finished
        marks = before + inside + ([end] if (inside or before) and not finished else [])
        gaps += [b - a for a, b in zip(marks, marks[1:])]
    ttft = first - sent if first else None
    return {"prompt_tokens": length, "ttft_s": ttft, "prefill_tok_s": length / ttft if ttft else None,
            "error": error, "decode_tokens_during": during, "streams_ended": ended,
            "max_gap_s": max(gaps) if gaps else None, "median_gap_s": statistics.median(gaps) if gaps else None}


def run_system(name: str, server: ServerProcess, model: str, lengths: list[int], streams: int,
               extra: dict[str, Any] | None = None) -> list[dict]:
    """extra: fields every decode stream's request adds (haltwise: its loop detector off, so that a greedy
    stream that loops keeps decoding: the streams are load, their text does not matter)."""
    rows = []
    with server:
        for seed, n in enumerate(lengths):
            print(f"[{name}] {n}-token prompt beside {streams} decode streams ...", file=sys.stderr, flush=True)
            rows.append({"system": name, **measure(server.base_url, model, n, streams, seed + 1, extra or {})})
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def run(args: argparse.Namespace) -> int:
    from haltwise.models.catalog import resolve_model
    from haltwise.server.served_name import default_served_name

    lengths = [int(x) for x in args.lengths.split(",")]
    gguf = resolve_model(args.model)
    port = free_port()
    env = {"PYTHONPATH": args.server_src} if args.server_src else None
    cmd = haltwise_server_cmd(port, model=str(gguf), extra=tuple(shlex.split(args.server_args)))
    server = ServerProcess(cmd, port, "haltwise", env=env, start_timeout_s=900)
    rows = run_system("haltwise", server, default_served_name(str(gguf)), lengths, args.streams,
                      {"repetition_detection": {"enabled": False}})
    if args.peer:
        where = llama_cpp.bin_dir(args.llama_bin)
        if missing := llama_cpp.missing_binaries(where):
            print(llama_cpp.SETUP_HINT.format(where=where) + f" (missing: {', '.join(missing)})", file=sys.stderr)
        else:
            port = free_port()
            ctx = max(lengths) + 256
            peer = ServerProcess(llama_cpp.llama_server_cmd(where, port, gguf, args.threads, args.streams + 1, ctx),
                                 port, "llama-server", ready_path="/health")
            rows += run_system("llama-server", peer, "llama-server", lengths, args.streams)
    print(f"{'system':<13} {'tokens':>7} {'TTFT s':>8} {'tok/s':>7} {'decode toks':>11} {'ended':>5} "
          f"{'max gap s':>9} {'median gap s':>12}  error")
    for r in rows:
        print(f"{r['system']:<13} {r['prompt_tokens']:>7} {_f(r['ttft_s'])} {_f(r['prefill_tok_s'], 7, 0)} "
              f"{r['decode_tokens_during']:>11} {r['streams_ended']:>5} {_f(r['max_gap_s'], 9)} "
              f"{_f(r['median_gap_s'], 12)}  {r['error'] or ''}")
    write_json(Path(args.json) if args.json else None,
               {"environment": environment(), "args": vars(args) | {"gguf": str(gguf)}, "rows": rows})
    return 0


def _f(value: float | None, width: int = 8, digits: int = 2) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"
