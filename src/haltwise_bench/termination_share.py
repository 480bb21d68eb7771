"""`haltwise bench termination`: the share of a real decode step spent on termination checks.

Runs the engine on the real model (or `--tiny`) with `--requests` concurrent requests, each with
`--stops` stop strings that never match (so every token is checked to the end) and the loop detector
on. For every step it times the whole engine step and, inside it, the per-token termination work:
incremental detokenization + SequenceStopper.on_token (stop tokens, eos, stop strings, limits, loop).
Reports medians and the share (target from the issue: under 2% with 16 stop strings).

`--grammar`: the grammar mask's cost against the default decode step (`--dtype auto`, the default
kernels, unless --dtype says otherwise). For each row count in --rows (default 1 and 32) the same
requests run without and with a JSON Schema that cannot complete within --tokens (an object whose one
string must hold 4096+ characters), alternating which goes first over --rounds; the loop detector is off
in both, the stop strings are the same. Reported per row count: median decode step without and with
the grammar, their ratio (cost = ratio - 1; goal: under 5% at 32 rows), and the grammar's own work timed
inside the constrained steps (filling the step's bitmask, applying it to the logits, advancing each
matcher) as a share of those steps.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stops", type=int, default=16, help="stop strings per request (none ever matches)")
    p.add_argument("--requests", type=int, default=1, help="concurrent requests")
    p.add_argument("--tokens", type=int, default=256, help="tokens per request")
    p.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16"],
                   help="default: float32 for the stop-check share, auto (the default decode path) with --grammar")
    p.add_argument("--tiny", action="store_true", help="the tiny random model (for tests)")
    p.add_argument("--grammar", action="store_true", help="decode step with vs without a JSON-schema grammar")
    p.add_argument("--rows", default="1,32", help="--grammar: constrained rows (concurrent requests) to compare")
    p.add_argument("--rounds", type=int, default=2, help="--grammar: plain/grammar pairs per row count, alternating")
    p.add_argument("--json", default=None, help="write the result here")


def _timed(fn, bucket: list[float]):
    def wrapper(*args):
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            bucket[-1] += time.perf_counter() - start
    return wrapper


ENDLESS_SCHEMA = {"type": "object", "properties": {"story": {"type": "string", "minLength": 4096}},
                  "required": ["story"], "additionalProperties": False}


def measure(engine, stops: int, requests: int, tokens: int, grammar: bool = False, loops: bool = True,
            tag: str = "share") -> dict:
    from haltwise.engine import sampler as sampler_module
    from haltwise.sampling_params import RepetitionDetection, SamplingParams
    from haltwise.structured.spec import StructuredOutputs

    stop_strings = tuple(f"<never-{i}-{'x' * (i % 7)}>" for i in range(stops))
    extra = dict(structured_outputs=StructuredOutputs(json=ENDLESS_SCHEMA)) if grammar else {}
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, stop=stop_strings,
                            repetition_detection=RepetitionDetection(enabled=loops and not grammar), **extra)
    prompt = engine.tokenizer.encode("Tell me a long story about a lighthouse keeper and the sea.")
    for i in range(requests):
        engine.add_request(f"{tag}-{i}", prompt, params)
    check_time: list[float] = []
    for request in engine.requests.values():   # instrument this run's per-sequence objects only
        for state in request.seqs:
            state.stopper.on_token = _timed(state.stopper.on_token, check_time)
            state.detokenizer.step = _timed(state.detokenizer.step, check_time)
    mask_time: list[float] = []
    original_apply = sampler_module.apply_bitmask
    if grammar:
        engine._grammar_mask = _timed(engine._grammar_mask, mask_time)
        sampler_module.apply_bitmask = _timed(original_apply, mask_time)
        for request in engine.requests.values():
            for state in request.seqs:
                state.matcher.consume = _timed(state.matcher.consume, mask_time)
    step_times, shares = [], []
    try:
        while engine.has_unfinished():
            check_time.append(0.0)
            mask_time.append(0.0)
            start = time.perf_counter()
            engine.step()
            elapsed = time.perf_counter() - start
            step_times.append(elapsed)
            shares.append(check_time[-1] / elapsed)
    finally:
        sampler_module.apply_bitmask = original_apply
        engine.__dict__.pop("_grammar_mask", None)
    decode = slice(1, None)   # the first step is the prefill
    grammar_fields = {
        "median_mask_us": round(statistics.median(mask_time[decode]) * 1e6, 1),
        "mask_share_percent": round(sum(mask_time[decode]) / sum(step_times[decode]) * 100, 3),
    } if grammar else {}
    return {
        "stops": stops, "requests": requests, "tokens": tokens, "steps": len(step_times),
        "median_step_ms": round(statistics.median(step_times[decode]) * 1e3, 3),
        "decode_step_s": step_times[decode],
        "median_checks_us": round(statistics.median(check_time[decode]) * 1e6, 1),
        "median_share_percent": round(statistics.median(shares[decode]) * 100, 3),
        "total_share_percent": round(sum(check_time[decode]) / sum(step_times[decode]) * 100, 3),
        **grammar_fields,
    }


def compare_grammar(engine, rows: list[int], stops: int, tokens: int, rounds: int) -> dict:
    """Decode steps without and with the grammar, per row count (module docstring)."""
    out = {}
    for n in rows:
        steps: dict[bool, list[float]] = {False: [], True: []}
        inside: list[dict] = []
        for r in range(rounds):
            for grammar in ((False, True) if r % 2 == 0 else (True, False)):
                print(f"rows {n}, round {r + 1}/{rounds}: {'grammar' if grammar else 'plain'}", file=sys.stderr)
                m = measure(engine, stops, n, tokens, grammar=grammar, loops=False, tag=f"g{n}-{r}-{int(grammar)}")
                steps[grammar] += m["decode_step_s"]
                if grammar:
                    inside.append(m)
        plain, constrained = statistics.median(steps[False]), statistics.median(steps[True])
        out[str(n)] = {
            "rows": n, "decode_steps": len(steps[False]),
            "median_step_ms_plain": round(plain * 1e3, 3),
            "median_step_ms_grammar": round(constrained * 1e3, 3),
            "step_ratio": round(constrained / plain, 4),
            "cost_percent": round((constrained / plain - 1) * 100, 2),
            "median_mask_us": round(statistics.median(m["median_mask_us"] for m in inside), 1),
            "mask_share_percent": round(statistics.median(m["mask_share_percent"] for m in inside), 3),
        }
    return out


def run(args: argparse.Namespace) -> int:
    from haltwise.config import EngineConfig
    from haltwise.engine.factory import build_engine

    dtype = args.dtype or ("auto" if args.grammar else "float32")
    print(f"loading the model ({dtype})...", file=sys.stderr)
    # Single-token decode steps on both sides: grammar rows are never speculated, so speculation would
    # give the plain run fewer, wider steps and the comparison would no longer be per step.
    engine = build_engine(engine_config=EngineConfig(dtype=dtype, speculative_tokens=0), tiny=args.tiny)
    if args.grammar:
        rows = [int(x) for x in args.rows.split(",")]
        per_rows = compare_grammar(engine, rows, args.stops, args.tokens, args.rounds)
        result = {"benchmark": "termination --grammar", "dtype": dtype, "stops": args.stops, "tokens": args.tokens,
                  "rounds": args.rounds, "rows": per_rows}
        print(f"grammar mask cost against the {dtype} decode step ({args.tokens} tokens, {args.rounds} rounds, "
              f"{args.stops} stop strings in both)")
        print(f"{'rows':>5} {'plain ms':>9} {'grammar ms':>10} {'ratio':>7} {'cost %':>7} {'mask us':>8} "
              f"{'mask % of step':>14}")
        for r in per_rows.values():
            print(f"{r['rows']:>5} {r['median_step_ms_plain']:>9.2f} {r['median_step_ms_grammar']:>10.2f} "
                  f"{r['step_ratio']:>7.3f} {r['cost_percent']:>7.2f} {r['median_mask_us']:>8.0f} "
                  f"{r['mask_share_percent']:>14.2f}")
    else:
        result = measure(engine, args.stops, args.requests, args.tokens)
        result.pop("decode_step_s")
        result["dtype"] = dtype
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0
