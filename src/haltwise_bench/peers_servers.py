"""The server half of `haltwise bench peers`: haltwise serve against llama-server -np N, per workload.

haltwise serve runs throughout; for each client count c a llama-server with c slots (-np c, continuous
batching) starts beside it. Each repeat runs every workload on both servers, alternating which goes first.

  ignore_eos  streaming /v1/completions, fresh text prompts each round, exactly max_tokens each: both get
              ignore_eos; haltwise also repetition_detection off, llama-server a -100 logit bias on the
              model's end-of-generation ids, so every request runs its full length (else it fails).
  natural     natural_chat.PROMPTS as streamed greedy chat requests whose answers end by themselves
              (at least c requests: the prompts repeat in order when c exceeds them).

Speculation is reported beside each figure, never folded into it: haltwise's acceptance from its /metrics
counters around each run; the peer's from its streams' timings (natural chat), where it speculates (-md).
"""
from __future__ import annotations

import asyncio
import math
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from haltwise_bench import common, llama_cpp, natural_chat, spec_counters
from haltwise_bench.common import Progress, median, record
from haltwise_bench.cpu_pinning import Pinning, pin_this_process

WORKLOADS = ("natural", "ignore_eos")
START_TIMEOUT_S = 900.0      # a first start may build the native kernels and measure a kernel plan


@dataclass(frozen=True, slots=True)
class ServerSetup:
    """How both servers start: the same GGUF and threads; the peer's KV type; the same draft model, if any."""

    directory: Path                    # llama.cpp binaries
    gguf: str
    dtype: str                         # haltwise --dtype
    tiny: bool                         # haltwise runs a random tiny model (tests)
    threads: int
    pinning: Pinning
    peer_kv: str = "q8_0"              # llama-server -ctk/-ctv (llama_cpp.PEER_KV_TYPES)
    draft: str | None = None           # haltwise --draft-model (a catalog name or a path)
    draft_path: str | None = None      # the same model's file, for llama-server -md


def through_servers(setup: ServerSetup, sizes: Any, workloads: tuple[str, ...], repeats: int,
                    progress: Progress, eos_ids: list[int]) -> list[dict[str, Any]]:
    """Every (workload, client count, system) over `repeats` runs; one record each (see run_records)."""
    from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd

    per_round, width = max(sizes.concurrency), sizes.server_prompt_chars
    rounds = len(sizes.concurrency) * repeats
    text = common.long_text(width * per_round * rounds)
    plain = [text[i * width:(i + 1) * width] for i in range(per_round * rounds)]   # fresh each round
    bodies = server_request_bodies(eos_ids)
    ctx_per_slot = 256 + max(sizes.server_max_tokens + width, sizes.natural_max_tokens)
    runs: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    process: dict[tuple[str, int], dict[str, float | None]] = {}
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)   # SIGTERM must still stop the servers
    restore = pin_this_process(setup.pinning.client) if setup.pinning.client else None
    ours = None
    try:
        progress("starting haltwise serve")
        port = free_port()
        extra = ("--threads", str(setup.threads)) + (("--draft-model", setup.draft) if setup.draft else ())
        ours = ServerProcess(haltwise_server_cmd(port, setup.dtype, setup.tiny, None if setup.tiny else setup.gguf,
                                                 extra), port, "haltwise", "/ready", cpus=setup.pinning.servers,
                             start_timeout_s=START_TIMEOUT_S)
        ours.start()
        _warm_up(ours.base_url)
        round_no = 0
        for c in sizes.concurrency:
            progress(f"starting llama-server -np {c}")
            port = free_port()
            cmd = llama_cpp.llama_server_cmd(setup.directory, port, setup.gguf, setup.threads, c, ctx_per_slot)
            cmd += llama_cpp.peer_options(setup.peer_kv, setup.draft_path)
            with ServerProcess(cmd, port, f"llama-server-np{c}", "/health", cpus=setup.pinning.servers,
                               start_timeout_s=START_TIMEOUT_S) as peer:
                _warm_up(peer.base_url)
                servers = {"haltwise": ours, "llama.cpp": peer}
                chat = natural_chat.PROMPTS * math.ceil(c / len(natural_chat.PROMPTS))
                for rep in range(repeats):
                    batch = plain[round_no * per_round:(round_no + 1) * per_round]
                    round_no += 1
                    for workload in workloads:
                        for name in list(servers)[:: 1 if rep % 2 == 0 else -1]:
                            progress(f"{workload} c{c}: {name} run {rep + 1}/{repeats}")
                            base = servers[name].base_url
                            before = spec_counters.scrape(base) if name == "haltwise" else None
                            if workload == "natural":
                                load = asyncio.run(natural_chat.run_chat_load(base, chat, c,
                                                                              sizes.natural_max_tokens))
                                summary = load.summary()
                            else:
                                summary = _ignore_eos_run(base, batch, c, sizes.server_max_tokens, bodies[name])
                            if before is not None:
                                summary["spec"] = spec_counters.scrape(base) - before
                            runs.setdefault((workload, c, name), []).append(summary)
                process[("llama.cpp", c)] = {"ready_s": peer.ready_s, "peak_rss_mib": peer.peak_rss_mib()}
        for c in sizes.concurrency:    # one haltwise server served every round: its peak so far
            process[("haltwise", c)] = {"ready_s": ours.ready_s, "peak_rss_mib": ours.peak_rss_mib()}
    finally:
        if ours is not None:
            ours.stop()
        if restore is not None:
            pin_this_process(restore)
        signal.signal(signal.SIGTERM, previous)
    return [run_record(workload, c, name, rs, **process.get((name, c), {}))
            for (workload, c, name), rs in runs.items()]


def server_request_bodies(eos_ids: list[int]) -> dict[str, dict[str, Any]]:
    """Extra request fields so both servers generate exactly max_tokens greedy tokens."""
    return {"haltwise": {"ignore_eos": True, "repetition_detection": {"enabled": False}},
            "llama.cpp": {"ignore_eos": True, "logit_bias": {str(t): -100.0 for t in eos_ids}}}


def model_eos_ids(gguf: str) -> list[int]:
    """The model's end-of-generation ids, as the haltwise tokenizer reads them from the GGUF."""
    from haltwise.tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_gguf(gguf)
    return sorted(tokenizer.eos_token_ids(()))


def _ignore_eos_run(base_url: str, prompts: list[str], c: int, max_tokens: int,
                    body: dict[str, Any]) -> dict[str, Any]:
    """One fixed-length round through load_client; its summary plus the per-stream decode speed and caps."""
    from haltwise_bench.load_client import run_load

    load = asyncio.run(run_load(base_url, prompts, c, max_tokens, extra_body=body))
    summary = load.summary()
    summary["stream_tok_s"] = median((r.completion_tokens - 1) / (r.latency_s - r.ttft_s) for r in load.ok
                                     if r.ttft_s is not None and r.latency_s > r.ttft_s and r.completion_tokens > 1)
    summary["capped"] = len(load.ok)        # every ok request ran to the cap: that is the workload
    summary["peer_drafted"] = summary["peer_accepted"] = 0
    return summary


def run_record(workload: str, c: int, system: str, runs: list[dict[str, Any]], **process: Any) -> dict[str, Any]:
    """One table row: medians over the repeats; speculation summed over them."""
    spec = [r["spec"] for r in runs if "spec" in r]
    drafted = sum(s.drafted for s in spec) if spec else sum(r["peer_drafted"] for r in runs)
    accepted = sum(s.accepted for s in spec) if spec else sum(r["peer_accepted"] for r in runs)
    return record(system, f"{workload}_c{c}", median(r["tokens_per_s"] for r in runs),
                  median(r["ttft_p50_s"] for r in runs), len(runs), workload=workload, concurrency=c,
                  stream_tok_s=median(r["stream_tok_s"] for r in runs),
                  ttft_p50_s=median(r["ttft_p50_s"] for r in runs), ttft_p95_s=median(r["ttft_p95_s"] for r in runs),
                  requests=runs[0]["requests"], capped=sum(r["capped"] for r in runs),
                  completion_tokens=median(r["completion_tokens"] for r in runs),
                  failed_requests=sum(r["failed"] for r in runs),
                  errors=sorted({e for r in runs for e in r["errors"]}),
                  drafted=drafted, accepted=accepted, acceptance=accepted / drafted if drafted else None,
                  draft_model_drafted=sum(s.model_drafted for s in spec) if spec else None,
                  draft_model_accepted=sum(s.model_accepted for s in spec) if spec else None, **process)


def _warm_up(base_url: str) -> None:
    """One short untimed request, so neither system's first timed run pays its first-request costs."""
    body = {"prompt": "Hello", "max_tokens": 4, "temperature": 0.0}
    httpx.post(base_url + "/v1/completions", json=body, timeout=600.0).raise_for_status()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    sys.exit(128 + signum)

