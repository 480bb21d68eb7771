"""Microbenchmark: per-token cost of stop-string checking, SequenceStopper vs the naive re-search.

The generation is real prose (default: The Tempest) cut into ~4-character "tokens". The stop
strings are phrases taken from elsewhere in the same text that never occur in the generated part,
so no stop fires, every token is checked, and stop prefixes occur often (held-back text).

  naive:     text += delta; any(s in text for s in stops)   -> O(N stops x text length) per token
  tail:      each stop searched in its last len(stop)-1 chars + delta (vLLM) -> O(N x stop length)
  stopper:   SequenceStopper.on_token(...) + release()      -> amortised O(new characters) per token

Usage: python -m haltwise_bench.stop_cost [--tokens 4000] [--stops 64] [--text PATH] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Sequence

from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.termination import Reason
from haltwise_bench.common import longtext_files

DEFAULT_TEXT = next((p for p in longtext_files() if p.name == "tempest_gut.txt"), Path("/nonexistent"))


def load_text(path: Path | None, min_chars: int, seed: int) -> str:
    """The text at `path` (default: The Tempest if present), else deterministic pseudo-prose."""
    path = path or (DEFAULT_TEXT if DEFAULT_TEXT.exists() else None)
    if path is not None:
        return path.read_text(encoding="utf-8")
    rng = random.Random(seed)
    words = ("the of and to in that is was he for it with as his on be at by I had not are but from or have "
             "island tempest spirit master island storm ship king duke sea shore magic book staff").split()
    return " ".join(rng.choice(words) for _ in range(min_chars // 3)) + "\n"


def make_tokens(text: str, num_tokens: int, seed: int) -> list[str]:
    """Cut the start of `text` into num_tokens pieces of 2..6 characters (mean 4)."""
    rng = random.Random(seed)
    tokens, pos = [], 0
    while len(tokens) < num_tokens:
        size = rng.randint(2, 6)
        piece = text[pos:pos + size] or " "
        tokens.append(piece)
        pos += size
    return tokens


def make_stops(text: str, generated: str, num_stops: int, seed: int) -> list[str]:
    """Phrases (3..16 chars) from `text` that never occur in `generated`."""
    rng = random.Random(seed)
    stops: set[str] = set()
    for _ in range(200_000):
        if len(stops) == num_stops:
            break
        start = rng.randrange(0, max(1, len(text) - 16))
        cand = text[start:start + rng.randint(3, 16)]
        if cand.strip() and cand not in generated:
            stops.add(cand)
    while len(stops) < num_stops:  # short or repetitive texts: fall back to unlikely strings
        stops.add(f"<stop-{len(stops)}>")
    return sorted(stops)


def time_stopper(tokens: Sequence[str], stops: Sequence[str]) -> tuple[list[int], str]:
    """Per-token nanoseconds of on_token + release, and the streamed text."""
    params = SamplingParams(stop=tuple(stops), max_tokens=None,
                            repetition_detection=RepetitionDetection(enabled=False))
    stopper = SequenceStopper(params, frozenset({0}), {}, num_prompt_tokens=0, max_total_tokens=len(tokens) + 1)
    clock = time.perf_counter_ns
    costs, out = [], []
    for i, delta in enumerate(tokens):
        t0 = clock()
        term = stopper.on_token(100 + i % 1000, delta)
        out.append(stopper.release())
        costs.append(clock() - t0)
        if term is not None:
            raise RuntimeError(f"a stop fired in the benchmark text: {term}")
    out.append(stopper.finish(stopper.terminate(Reason.CANCELLED, "benchmark ended")))
    return costs, "".join(out)


def time_naive(tokens: Sequence[str], stops: Sequence[str]) -> list[int]:
    """Per-token nanoseconds of appending the text and searching all of it for every stop."""
    clock = time.perf_counter_ns
    costs, text = [], ""
    for delta in tokens:
        t0 = clock()
        text += delta
        hit = any(s in text for s in stops)
        costs.append(clock() - t0)
        if hit:
            raise RuntimeError("a stop fired in the benchmark text")
    return costs


def time_tail_search(tokens: Sequence[str], stops: Sequence[str]) -> list[int]:
    """Per-token nanoseconds of vLLM's approach: search each stop in the new chars plus the
    (len(stop) - 1) before them -> O(N stops x stop length) per token."""
    clock = time.perf_counter_ns
    costs, tail = [], ""
    longest = max(map(len, stops))
    for delta in tokens:
        t0 = clock()
        window = tail + delta
        hit = any(s in window[max(0, len(window) - len(delta) - len(s) + 1):] for s in stops)
        tail = window[-(longest - 1):] if longest > 1 else ""
        costs.append(clock() - t0)
        if hit:
            raise RuntimeError("a stop fired in the benchmark text")
    return costs


def run(num_tokens: int, num_stops: int, text_path: Path | None, repeats: int, seed: int) -> dict:
    text = load_text(text_path, num_tokens * 8, seed)
    tokens = make_tokens(text, num_tokens, seed)
    generated = "".join(tokens)
    stops = make_stops(text, generated, num_stops, seed)
    stopper_med, naive_med, stopper_tail, naive_tail, window_med = [], [], [], [], []
    tail = max(1, num_tokens // 10)
    for _ in range(repeats):
        costs, streamed = time_stopper(tokens, stops)
        if streamed != generated:
            raise RuntimeError("streamed text differs from the generated text")
        naive = time_naive(tokens, stops)
        window_med.append(statistics.median(time_tail_search(tokens, stops)))
        stopper_med.append(statistics.median(costs))
        naive_med.append(statistics.median(naive))
        stopper_tail.append(statistics.median(costs[-tail:]))
        naive_tail.append(statistics.median(naive[-tail:]))
    s, n = statistics.median(stopper_med), statistics.median(naive_med)
    st, nt = statistics.median(stopper_tail), statistics.median(naive_tail)
    w = statistics.median(window_med)
    return {
        "tokens": num_tokens, "stops": len(stops), "chars": len(generated), "repeats": repeats,
        "text": str(text_path or (DEFAULT_TEXT if DEFAULT_TEXT.exists() else "synthetic")),
        "stopper_median_ns": s, "naive_median_ns": n, "ratio_median": n / s,
        "tail_search_median_ns": w, "ratio_tail_search": w / s,
        "stopper_last10pct_median_ns": st, "naive_last10pct_median_ns": nt, "ratio_last10pct": nt / st,
    }


def format_table(r: dict) -> str:
    rows = [("approach", "median ns/token", "last 10% ns/token"),
            ("SequenceStopper (Aho-Corasick)", f"{r['stopper_median_ns']:.0f}",
             f"{r['stopper_last10pct_median_ns']:.0f}"),
            ("naive re-search", f"{r['naive_median_ns']:.0f}", f"{r['naive_last10pct_median_ns']:.0f}"),
            ("per-stop tail search (vLLM-style)", f"{r['tail_search_median_ns']:.0f}", ""),
            ("ratio naive / stopper", f"{r['ratio_median']:.1f}x", f"{r['ratio_last10pct']:.1f}x"),
            ("ratio tail search / stopper", f"{r['ratio_tail_search']:.1f}x", "")]
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    head = f"{r['stops']} stop strings, {r['tokens']} tokens ({r['chars']} chars), median of {r['repeats']} runs"
    return "\n".join([head] + [f"{a:<{w[0]}}  {b:>{w[1]}}  {c:>{w[2]}}" for a, b, c in rows])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="haltwise bench stops", description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4000, help="generated tokens (~4 chars each)")
    ap.add_argument("--stops", type=int, default=64, help="stop strings in the request")
    ap.add_argument("--text", type=Path, default=None, help="source text (default: The Tempest)")
    ap.add_argument("--repeats", type=int, default=3, help="runs; medians are taken over runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    result = run(args.tokens, args.stops, args.text, args.repeats, args.seed)
    print(format_table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
