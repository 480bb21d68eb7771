"""`haltwise bench termination`: the share of a real decode step spent on termination checks.

Runs the engine on the real model (or `--tiny`) with `--requests` concurrent requests, each with
`--stops` stop strings that never match (so every token is checked to the end) and the loop detector
on. For every step it times the whole engine step and, inside it, the per-token termination work:
incremental detokenization + SequenceStopper.on_token (stop tokens, eos, stop strings, limits, loop).
Reports medians and the share (target from the issue: under 2% with 16 stop strings).

`--grammar`: every request is also constrained by a JSON Schema that cannot complete within
--tokens (an object whose one string must hold 4096+ characters), the loop detector off; the grammar's own work is timed apart:
filling the step's bitmask, applying it to the logits, and advancing each matcher.
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
    p.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--tiny", action="store_true", help="the tiny random model (for tests)")
    p.add_argument("--grammar", action="store_true", help="constrain every request by a JSON Schema; time the masks")
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


def measure(engine, stops: int, requests: int, tokens: int, grammar: bool = False) -> dict:
    from haltwise.engine import sampler as sampler_module
    from haltwise.sampling_params import RepetitionDetection, SamplingParams
    from haltwise.structured.spec import StructuredOutputs

    stop_strings = tuple(f"<never-{i}-{'x' * (i % 7)}>" for i in range(stops))
    extra = dict(structured_outputs=StructuredOutputs(json=ENDLESS_SCHEMA),
                 repetition_detection=RepetitionDetection(enabled=False)) if grammar else {}
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, stop=stop_strings, **extra)
    prompt = engine.tokenizer.encode("Tell me a long story about a lighthouse keeper and the sea.")
    for i in range(requests):
        engine.add_request(f"share-{i}", prompt, params)
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
        "median_checks_us": round(statistics.median(check_time[decode]) * 1e6, 1),
        "median_share_percent": round(statistics.median(shares[decode]) * 100, 3),
        "total_share_percent": round(sum(check_time[decode]) / sum(step_times[decode]) * 100, 3),
        **grammar_fields,
    }


def run(args: argparse.Namespace) -> int:
    from haltwise.config import EngineConfig
    from haltwise.engine.factory import build_engine

    print("loading the model...", file=sys.stderr)
    engine = build_engine(engine_config=EngineConfig(dtype=args.dtype),
                          tiny=args.tiny)
    result = measure(engine, args.stops, args.requests, args.tokens, grammar=args.grammar)
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0
