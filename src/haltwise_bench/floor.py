"""`haltwise bench floor`: single-stream decode against this host's memory-bandwidth floor.

A lone decoding sequence on a real-size model is bound by reading the weights: every step reads every tensor
the layers and the lm_head use (all of the GGUF's tensors but `token_embd`, which is only indexed, unless the
lm_head is tied to it). So one stream cannot decode faster than

    floor tok/s = read bandwidth (bytes/s) / weight bytes read per token

The program measures the read bandwidth here (a streaming sum over --bandwidth-gib GiB, on 1 thread and on
--threads, the best of --repeats passes), counts the bytes per token from the file, then decodes --max-tokens
greedy tokens (`ignore_eos`, so every prompt runs the same length) on each prompt of a natural chat set, one
request at a time, with speculation off and, separately, on (the engine's prompt lookup, and the draft model
when --draft-model is given), alternating round by round. Reported per setting: decode tok/s (tokens after the
first / time after the first, median over prompts and rounds), the % of the floor it reaches, and for
speculation its acceptance (accepted / drafted). KV reads (a few MB at these lengths) are left out of the bytes:
the floor is a bound the weights alone set.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from haltwise_bench.common import median
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tools.model_args import add_model_arguments, engine_config_from

CHAT = ("What is the capital of France? Answer in two sentences.",
        "Write a short poem about autumn leaves.",
        "Give me three tips for learning a new language.",
        "Explain what a black hole is to a ten year old.",
        "How do I reverse a list in Python?",
        "Summarise the plot of Romeo and Juliet in three sentences.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens decoded per request (ignore_eos)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of off / on")
    parser.add_argument("--bandwidth-gib", type=float, default=2.0, help="GiB streamed per bandwidth pass")
    parser.add_argument("--repeats", type=int, default=5, help="bandwidth passes; the fastest counts")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")


def read_bandwidth(threads: int, gib: float = 2.0, repeats: int = 5) -> float:
    """Bytes per second of a streaming float32 sum over `gib` GiB on `threads` threads (the fastest pass)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)    # written once: every page is resident
        x.sum()                                                          # warm-up
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            x.sum()
            best = min(best, time.perf_counter() - start)
        return x.numel() * 4 / best
    finally:
        torch.set_num_threads(previous)


def weight_bytes_per_token(path) -> int:
    """Bytes a decode step reads from the GGUF's tensors: all but token_embd (read only where lm_head is tied)."""
    from haltwise.gguf.file import GGUFFile

    tensors = {t.name: t.n_bytes for t in GGUFFile(path).tensors}
    tied = "output.weight" not in tensors
    return sum(n for name, n in tensors.items() if tied or name != "token_embd.weight")


def _decode(engine, prompt: list[int], max_tokens: int) -> tuple[int, float, int, int]:
    """(tokens after the first, their seconds, drafted, accepted) of one greedy request decoded alone."""
    spec = engine.speculator
    drafted, accepted = spec.num_drafted, spec.num_accepted
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                            repetition_detection=RepetitionDetection(enabled=False))
    engine.add_request("floor", prompt, params)
    start, first, count = None, 0, 0
    while engine.has_unfinished():
        for update in engine.step():
            count = len(update.outputs[0].token_ids)
        if start is None and count:
            start, first = time.perf_counter(), count
    return count - first, time.perf_counter() - start, spec.num_drafted - drafted, spec.num_accepted - accepted


def run(args: argparse.Namespace) -> int:
    from haltwise.engine.factory import build_engine
    from haltwise.models.catalog import resolve_model

    threads = args.threads or torch.get_num_threads()
    bw1 = read_bandwidth(1, args.bandwidth_gib, args.repeats)
    bw = read_bandwidth(threads, args.bandwidth_gib, args.repeats)
    path = resolve_model(args.model)
    per_token = weight_bytes_per_token(path)
    floor = bw / per_token
    print(f"read bandwidth: {bw1 / 1e9:.1f} GB/s on 1 thread, {bw / 1e9:.1f} GB/s on {threads}; "
          f"{per_token:,} weight bytes a token -> floor {floor:.1f} tok/s", file=sys.stderr)
    config = engine_config_from(args)
    engine = build_engine(args.model, config)
    print(engine.describe(), file=sys.stderr)
    template = engine.tokenizer.chat_template is not None
    prompts = [engine.tokenizer.encode(engine.tokenizer.apply_chat_template([{"role": "user", "content": p}]),
                                       add_special_tokens=False) if template else engine.tokenizer.encode(p)
               for p in CHAT]
    settings = {"off": 0, "on": engine.speculator.num_tokens}
    runs: dict[str, list[tuple[int, float, int, int]]] = {name: [] for name in settings}
    for round_ in range(args.rounds):
        order = list(settings) if round_ % 2 == 0 else list(settings)[::-1]
        for prompt in prompts:
            for name in order:
                engine.speculator.num_tokens = settings[name]
                runs[name].append(_decode(engine, prompt, args.max_tokens))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    for name, r in runs.items():
        rate = median(n / s for n, s, _, _ in r if n and s)
        drafted, accepted = sum(x[2] for x in r), sum(x[3] for x in r)
        rows.append({"speculation": name, "tok_s": round(rate, 2), "floor_share": round(rate / floor, 3),
                     "acceptance": round(accepted / drafted, 3) if drafted else None})
    print(f"model {path.name}: {per_token / 1e6:.1f} MB a token, bandwidth {bw / 1e9:.1f} GB/s "
          f"({threads} threads), floor {floor:.1f} tok/s")
    print(f"{'speculation':12} {'tok/s':>8} {'of floor':>9} {'accept':>7}")
    for row in rows:
        acc = f"{row['acceptance']:.2f}" if row["acceptance"] is not None else "-"
        print(f"{row['speculation']:12} {row['tok_s']:>8.1f} {row['floor_share'] * 100:>8.0f}% {acc:>7}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": str(path), "bytes_per_token": per_token, "bandwidth_1": bw1, "bandwidth": bw,
                       "threads": threads, "floor_tok_s": floor, "rows": rows}, f, indent=2)
    return 0
